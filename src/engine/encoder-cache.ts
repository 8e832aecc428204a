// Image embeddings by content key, least recently used evicted first, bounded in bytes: a chat that
// resends an image (or two requests with the same image) encodes it once. Concurrent lookups of a
// key being encoded share that one encode. A request keeps its own reference while it needs the
// embeddings, so eviction never pulls them from under a running prefill.
import type { NativeImageEmbedding } from '../native/types.js';

export interface EncoderCacheStats {
  entries: number;
  bytes: number;
  maxBytes: number;
  hits: number;
  misses: number;
  evictions: number;
  encodes: number;
  encodeFailures: number;
  encodeMs: number;
}

export function embeddingBytes(e: NativeImageEmbedding): number {
  return e.embeddings.byteLength + (e.deepstack?.byteLength ?? 0);
}

export class EncoderCache {
  private readonly entries = new Map<string, NativeImageEmbedding>(); // insertion order = LRU order
  private readonly inFlight = new Map<string, Promise<NativeImageEmbedding>>();
  private bytes = 0;
  private readonly counters = { hits: 0, misses: 0, evictions: 0, encodes: 0, encodeFailures: 0, encodeMs: 0 };

  constructor(readonly maxBytes: number) {
    if (!(maxBytes >= 0)) throw new Error('encoder cache size must be >= 0 bytes');
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  /** Cached, or being encoded now. */
  knows(key: string): boolean {
    return this.entries.has(key) || this.inFlight.has(key);
  }

  /** The cached embedding (refreshing its recency), the in-flight encode of it, or a new encode. */
  get(key: string, encode: () => Promise<NativeImageEmbedding>): Promise<NativeImageEmbedding> {
    const hit = this.entries.get(key);
    if (hit !== undefined) {
      this.counters.hits++;
      this.entries.delete(key);
      this.entries.set(key, hit);
      return Promise.resolve(hit);
    }
    const pending = this.inFlight.get(key);
    if (pending !== undefined) {
      this.counters.hits++;
      return pending;
    }
    this.counters.misses++;
    this.counters.encodes++;
    const t0 = performance.now();
    const p = encode().then(
      (e) => {
        this.inFlight.delete(key);
        this.counters.encodeMs += performance.now() - t0;
        this.put(key, e);
        return e;
      },
      (err: unknown) => {
        this.inFlight.delete(key); // a failure is not cached: the next request tries again
        this.counters.encodeFailures++;
        throw err;
      },
    );
    this.inFlight.set(key, p);
    return p;
  }

  private put(key: string, e: NativeImageEmbedding): void {
    const size = embeddingBytes(e);
    if (size > this.maxBytes) return; // larger than the whole cache: used once, not kept
    this.bytes += size;
    this.entries.set(key, e);
    for (const [k, v] of this.entries) {
      if (this.bytes <= this.maxBytes) break;
      this.entries.delete(k);
      this.bytes -= embeddingBytes(v);
      this.counters.evictions++;
    }
  }

  clear(): void {
    this.entries.clear();
    this.bytes = 0;
  }

  stats(): EncoderCacheStats {
    return { entries: this.entries.size, bytes: this.bytes, maxBytes: this.maxBytes, ...this.counters };
  }
}
