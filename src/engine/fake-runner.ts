// A deterministic stand-in for the native model, for engine and server tests without weights.
// It keeps a real paged "KV" (token and position per slot) and derives each next token from the
// context it reads back through the block table, so a wrong table, a stale block or a bad prefix-
// cache hit changes the output, and a request's tokens depend only on its own context (greedy) or
// on its context, seed and counter (sampled): batch invariance is checkable.
import type { NativeImageEmbedding, NativeModel, NativeModelInfo, NativeStepPlan, NativeStepResult, NativeStepRowResult, NativeTopLogprob } from '../native/types.js';

export interface FakeModelOptions {
  vocabSize?: number; // default 256 (byte tokens)
  contextLength?: number; // default 512
  blockSize?: number; // default 4
  numBlocks?: number; // default 256
  /** Tokens the model emits (default: 'a'..'z' and space as bytes). */
  alphabet?: number[];
  /** When > 0, the end-of-sequence token follows when the context hash is divisible by this. */
  eosEvery?: number;
  eosId?: number; // default 0
  /** Simulated compute: a step takes stepMs + msPerToken * tokens (0: resolves on setImmediate). */
  stepMs?: number;
  msPerToken?: number;
}

const FNV_OFFSET = 0x811c9dc5;

function fnv(h: number, x: number): number {
  h ^= x & 0xff;
  h = Math.imul(h, 0x01000193);
  h ^= (x >>> 8) & 0xffffff;
  return Math.imul(h, 0x01000193) >>> 0;
}

function mix(a: number, b: number): number {
  let h = Math.imul(a ^ (b + 0x9e3779b9), 0x85ebca6b) >>> 0;
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35) >>> 0;
  return (h ^ (h >>> 16)) >>> 0;
}

export class FakeModel implements NativeModel {
  readonly opts: Required<FakeModelOptions>;
  /** Every plan seen, newest last (tests inspect batching). */
  readonly plans: NativeStepPlan[] = [];
  closed = false;
  private readonly kvToken: Int32Array;
  private readonly kvPos: Int32Array;

  constructor(options: FakeModelOptions = {}) {
    const alphabet = options.alphabet ?? [...Array.from({ length: 26 }, (_, i) => 97 + i), 32];
    this.opts = {
      vocabSize: options.vocabSize ?? 256,
      contextLength: options.contextLength ?? 512,
      blockSize: options.blockSize ?? 4,
      numBlocks: options.numBlocks ?? 256,
      alphabet,
      eosEvery: options.eosEvery ?? 0,
      eosId: options.eosId ?? 0,
      stepMs: options.stepMs ?? 0,
      msPerToken: options.msPerToken ?? 0,
    };
    const slots = this.opts.numBlocks * this.opts.blockSize;
    this.kvToken = new Int32Array(slots).fill(-1);
    this.kvPos = new Int32Array(slots).fill(-1);
  }

  info(): NativeModelInfo {
    const o = this.opts;
    return {
      architecture: 'FakeForCausalLM',
      family: 'fake',
      vocabSize: o.vocabSize,
      hiddenSize: 8,
      numLayers: 1,
      contextLength: o.contextLength,
      blockSize: o.blockSize,
      numBlocks: o.numBlocks,
      kvBytes: o.numBlocks * o.blockSize * 8,
      weightBytes: 0,
      quantization: 'none',
      precision: 'exact',
      threads: 1,
    };
  }

  encodeImage(): Promise<NativeImageEmbedding> {
    return Promise.reject(new Error('FakeForCausalLM has no vision tower'));
  }

  close(): void {
    this.closed = true;
  }

  /** The greedy next token after `context` (what a correct engine must produce). */
  greedyNext(context: readonly number[]): number {
    return this.pick(this.hash(context), null);
  }

  /** The greedy continuation of `prompt` for up to n tokens, stopping after eos. */
  greedy(prompt: readonly number[], n: number): number[] {
    const ctx = [...prompt];
    const out: number[] = [];
    for (let i = 0; i < n; i++) {
      const t = this.greedyNext(ctx);
      out.push(t);
      ctx.push(t);
      if (this.opts.eosEvery > 0 && t === this.opts.eosId) break;
    }
    return out;
  }

  async step(plan: NativeStepPlan): Promise<NativeStepResult> {
    if (this.closed) throw new Error('model is closed');
    this.plans.push(plan);
    if (this.plans.length > 4096) this.plans.splice(0, 2048);
    let tokens = 0;
    for (const r of plan.rows) tokens += r.tokens.length;
    const delay = this.opts.stepMs + this.opts.msPerToken * tokens;
    await new Promise<void>((resolve) => (delay > 0 ? setTimeout(resolve, delay) : setImmediate(resolve)));
    const t0 = performance.now();
    const rows = this.compute(plan);
    return { rows, timings: { forwardMs: performance.now() - t0, sampleMs: 0, tokens } };
  }

  /** Throws (failing the whole step, as a native crash would) when the plan is inconsistent. */
  private compute(plan: NativeStepPlan): NativeStepRowResult[] {
    const bs = this.opts.blockSize;
    const ids = new Set<string>();
    const written = new Map<number, string>();
    for (const row of plan.rows) {
      if (ids.has(row.requestId)) throw new Error(`duplicate row ${row.requestId}`);
      ids.add(row.requestId);
      const n = row.tokens.length;
      if (n === 0 || row.positions.length !== n) throw new Error(`${row.requestId}: ${n} tokens, ${row.positions.length} positions`);
      if (row.blockTable.length * bs < row.contextLen + n) throw new Error(`${row.requestId}: block table too short for ${row.contextLen + n} tokens`);
      for (let i = 0; i < n; i++) {
        if (row.positions[i] !== row.contextLen + i) throw new Error(`${row.requestId}: position ${row.positions[i]} at ${i}, expected ${row.contextLen + i}`);
        const b = row.blockTable[Math.floor((row.contextLen + i) / bs)]!;
        if (b < 0 || b >= this.opts.numBlocks) throw new Error(`${row.requestId}: block ${b} out of range`);
        const owner = written.get(b);
        if (owner !== undefined && owner !== row.requestId) throw new Error(`block ${b} written by ${owner} and ${row.requestId} in one step`);
        written.set(b, row.requestId);
      }
    }
    const out: NativeStepRowResult[] = [];
    for (const row of plan.rows) {
      const n = row.tokens.length;
      for (let i = 0; i < n; i++) {
        const pos = row.contextLen + i;
        const slot = row.blockTable[Math.floor(pos / bs)]! * bs + (pos % bs);
        this.kvToken[slot] = row.tokens[i]!;
        this.kvPos[slot] = pos;
      }
      if (!row.sample) {
        out.push({ requestId: row.requestId });
        continue;
      }
      // Read the whole context back through the block table, as attention would.
      const total = row.contextLen + n;
      const ctx = new Array<number>(total);
      for (let pos = 0; pos < total; pos++) {
        const slot = row.blockTable[Math.floor(pos / bs)]! * bs + (pos % bs);
        if (this.kvPos[slot] !== pos) throw new Error(`${row.requestId}: KV slot for position ${pos} holds position ${this.kvPos[slot]}`);
        ctx[pos] = this.kvToken[slot]!;
      }
      const s = row.sample;
      const h = this.hash(ctx);
      const token = this.pick(h, s.temperature > 0 ? { seed: s.seed, counter: s.counter } : null);
      const res: NativeStepRowResult = { requestId: row.requestId, token };
      if (s.logprobs >= 0) {
        res.logprob = -((h % 1000) + 1) / 1000;
        if (s.logprobs > 0) {
          const top: NativeTopLogprob[] = [];
          for (let k = 0; k < s.logprobs; k++) {
            top.push({ token: this.opts.alphabet[(h + k) % this.opts.alphabet.length]!, logprob: -(k + 1) / 10 });
          }
          res.topLogprobs = top;
        }
      }
      out.push(res);
    }
    return out;
  }

  private hash(ctx: readonly number[]): number {
    let h = FNV_OFFSET;
    for (const t of ctx) h = fnv(h, t);
    return h;
  }

  private pick(h: number, rng: { seed: number; counter: number } | null): number {
    const o = this.opts;
    if (o.eosEvery > 0 && mix(h, 7) % o.eosEvery === 0) return o.eosId;
    const r = rng === null ? h : mix(mix(h, rng.seed % 0xffffffff), rng.counter);
    return o.alphabet[r % o.alphabet.length]!;
  }
}
