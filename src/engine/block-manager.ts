// Paged KV cache bookkeeping: which native pool block belongs to which sequence, with reference
// counts so full blocks can be shared through the prefix cache. A block's cache key is a chained
// hash (parent hash + its tokens + the content keys of images in it), so a hit at block i implies
// the whole prefix up to i matches.
// Unreferenced cached blocks stay reusable until evicted, least recently freed first.
import { createHash } from 'node:crypto';
import type { EngineRequest } from './request.js';

export interface BlockManagerOptions {
  numBlocks: number;
  blockSize: number;
  enablePrefixCache?: boolean;
}

export interface BlockManagerStats {
  numBlocks: number;
  blockSize: number;
  usedBlocks: number; // referenced by at least one sequence
  cachedBlocks: number; // unreferenced but holding a reusable prefix
  freeBlocks: number; // allocatable: empty + cached
  prefixQueryTokens: number;
  prefixHitTokens: number;
}

export class BlockManager {
  readonly numBlocks: number;
  readonly blockSize: number;
  readonly prefixCaching: boolean;
  private readonly refCount: Int32Array;
  private readonly hashOf: (string | null)[];
  /** Unreferenced blocks without a cache entry: handed out first. */
  private readonly empty: number[] = [];
  /** Unreferenced blocks with a cache entry, in eviction order (first = least recently freed). */
  private readonly evictable = new Set<number>();
  private readonly cache = new Map<string, number>();
  private queryTokens = 0;
  private hitTokens = 0;

  constructor(opts: BlockManagerOptions) {
    if (!(opts.numBlocks > 0 && opts.blockSize > 0)) throw new Error('block manager needs numBlocks > 0 and blockSize > 0');
    this.numBlocks = opts.numBlocks;
    this.blockSize = opts.blockSize;
    this.prefixCaching = opts.enablePrefixCache ?? true;
    this.refCount = new Int32Array(opts.numBlocks);
    this.hashOf = new Array<string | null>(opts.numBlocks).fill(null);
    // Pop from the end, so low block ids go out first.
    for (let i = opts.numBlocks - 1; i >= 0; i--) this.empty.push(i);
  }

  get freeBlocks(): number {
    return this.empty.length + this.evictable.size;
  }

  get usedBlocks(): number {
    return this.numBlocks - this.freeBlocks;
  }

  blocksFor(tokens: number): number {
    return Math.ceil(tokens / this.blockSize);
  }

  stats(): BlockManagerStats {
    return {
      numBlocks: this.numBlocks,
      blockSize: this.blockSize,
      usedBlocks: this.usedBlocks,
      cachedBlocks: this.evictable.size,
      freeBlocks: this.freeBlocks,
      prefixQueryTokens: this.queryTokens,
      prefixHitTokens: this.hitTokens,
    };
  }

  /** Extends req.blockHashes over every full block of its known tokens. */
  hashBlocks(req: EngineRequest): void {
    const bs = this.blockSize;
    const full = Math.floor(req.tokens.length / bs);
    for (let i = req.blockHashes.length; i < full; i++) {
      const h = createHash('sha256');
      h.update(i === 0 ? `salt:${req.cacheSalt}` : req.blockHashes[i - 1]!);
      h.update(new Uint8Array(Int32Array.from(req.tokens.slice(i * bs, (i + 1) * bs)).buffer));
      // Placeholder ids are the same for every image: the image content decides what the KV holds.
      for (const s of req.imageSpans) {
        if (s.end > i * bs && s.start < (i + 1) * bs) h.update(`|img:${s.key}@${s.start - i * bs}`);
      }
      req.blockHashes.push(h.digest('base64'));
    }
  }

  /**
   * The longest run of cached blocks matching req's leading full blocks. At least one token is
   * always left to compute, since the step needs a row to sample from.
   */
  lookupPrefix(req: EngineRequest): number[] {
    if (!this.prefixCaching) return [];
    this.hashBlocks(req);
    const maxBlocks = Math.floor((req.tokens.length - 1) / this.blockSize);
    const hit: number[] = [];
    for (let i = 0; i < maxBlocks; i++) {
      const b = this.cache.get(req.blockHashes[i]!);
      if (b === undefined) break;
      hit.push(b);
    }
    // The computation resumes at the hit's end: never inside an image span (it is encoded whole).
    while (hit.length > 0 && req.imageSpans.some((s) => s.start < hit.length * this.blockSize && hit.length * this.blockSize < s.end)) hit.pop();
    return hit;
  }

  /** Counts one admission's prefix-cache lookup (for the hit rate). */
  notePrefixQuery(tokens: number, hitTokens: number): void {
    this.queryTokens += tokens;
    this.hitTokens += hitTokens;
  }

  /**
   * Grows req.blockTable (after the cached `prefix` blocks, when given for an empty table) to cover
   * `numTokens` slots. Returns false and changes nothing if the pool is short.
   */
  allocate(req: EngineRequest, prefix: readonly number[], numTokens: number): boolean {
    if (prefix.length > 0 && req.blockTable.length > 0) throw new Error(`${req.id}: prefix blocks given for a non-empty block table`);
    const have = req.blockTable.length + prefix.length;
    const need = Math.max(0, this.blocksFor(numTokens) - have);
    let reclaimed = 0; // prefix blocks that sit in the evictable set and stop being allocatable
    for (const b of prefix) if (this.refCount[b] === 0) reclaimed++;
    if (need > this.freeBlocks - reclaimed) return false;
    for (const b of prefix) {
      if (this.refCount[b]++ === 0) this.evictable.delete(b);
      req.blockTable.push(b);
    }
    if (prefix.length > 0) req.numCommittedBlocks = prefix.length;
    for (let i = 0; i < need; i++) req.blockTable.push(this.take());
    return true;
  }

  /** An unreferenced block: an empty one, else the least recently freed cached one (evicting it). */
  private take(): number {
    let b = this.empty.pop();
    if (b === undefined) {
      const first = this.evictable.values().next();
      if (first.done) throw new Error('KV block pool exhausted (allocate checked capacity first)');
      b = first.value;
      this.evictable.delete(b);
      const h = this.hashOf[b]!;
      if (this.cache.get(h) === b) this.cache.delete(h);
      this.hashOf[b] = null;
    }
    this.refCount[b] = 1;
    return b;
  }

  /** Registers req's full, computed blocks in the prefix cache. */
  commit(req: EngineRequest): void {
    if (!this.prefixCaching) return;
    const full = Math.min(Math.floor(req.numComputed / this.blockSize), req.blockTable.length);
    if (full <= req.numCommittedBlocks) return;
    this.hashBlocks(req);
    for (let i = req.numCommittedBlocks; i < full; i++) {
      const b = req.blockTable[i]!;
      const h = req.blockHashes[i]!;
      // A block with the same content may already be cached (computed twice concurrently): keep one.
      if (this.hashOf[b] === null && !this.cache.has(h)) {
        this.cache.set(h, b);
        this.hashOf[b] = h;
      }
    }
    req.numCommittedBlocks = full;
  }

  /** Frees req's tail blocks beyond those `numTokens` slots need (slots of a rejected draft). */
  trim(req: EngineRequest, numTokens: number): void {
    const keep = Math.max(this.blocksFor(numTokens), req.numCommittedBlocks);
    while (req.blockTable.length > keep) {
      const b = req.blockTable.pop()!;
      if (--this.refCount[b]! > 0) continue;
      if (this.hashOf[b] !== null) this.evictable.add(b);
      else this.empty.push(b);
    }
  }

  /** Drops req's references; its tail blocks become the first to be evicted. */
  free(req: EngineRequest): void {
    for (let i = req.blockTable.length - 1; i >= 0; i--) {
      const b = req.blockTable[i]!;
      if (--this.refCount[b]! > 0) continue;
      if (this.refCount[b]! < 0) throw new Error(`KV block ${b} freed twice`);
      if (this.hashOf[b] !== null) this.evictable.add(b);
      else this.empty.push(b);
    }
    req.blockTable = [];
    req.numCommittedBlocks = 0;
  }
}
