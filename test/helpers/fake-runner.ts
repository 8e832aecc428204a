// A deterministic stand-in for the native model, for engine and server tests without weights.
// It keeps a real paged "KV" (token and position per slot) and derives each next token from the
// context it reads back through the block table, so a wrong table, a stale block or a bad prefix-
// cache hit changes the output, and a request's tokens depend only on its own context (greedy) or
// on its context, seed and counter (sampled): batch invariance is checkable. With `vision` it also
// has a fake vision tower (embeddings derived from the pixels) and folds spliced embeddings, 3-axis
// positions and bidirectional blocks into the context, so a misassigned image, a stale cache hit or
// a leaked rope delta changes the output too.
import type {
  NativeImageEmbedding,
  NativeImageInput,
  NativeLateMask,
  NativeModel,
  NativeModelInfo,
  NativeStepPlan,
  NativeStepResult,
  NativeStepRow,
  NativeStepRowResult,
  NativeTopLogprob,
} from '../../src/native/types.js';
import type { MultimodalInput } from '../../src/engine/multimodal.js';

export interface FakeVisionOptions {
  /** Positions are [3, n] (mRoPE, as Qwen2.5-VL / Qwen3-VL); otherwise 1-D (as Gemma 3). */
  mrope?: boolean;
  /** DeepStack feature layers returned with each image (Qwen3-VL); default 0. */
  deepstackLayers?: number;
  /** Simulated encoder time per image (0: resolves on setImmediate). */
  encodeMs?: number;
  /** Makes encodeImage reject for these inputs (a broken image or tower). */
  failOn?: (input: NativeImageInput) => boolean;
}

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
  /** A fake vision tower: an image of grid [t, h, w] encodes to t*h*w/4 tokens (2x2 merge). */
  vision?: FakeVisionOptions;
}

const HIDDEN = 8;

/** The fake tower's simulated encode time (0: resolves on setImmediate). */
function encodeDelay(v: FakeVisionOptions): Promise<void> {
  const ms = v.encodeMs ?? 0;
  return new Promise<void>((resolve) => (ms > 0 ? setTimeout(resolve, ms) : setImmediate(resolve)));
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
  readonly opts: Required<Omit<FakeModelOptions, 'vision'>>;
  readonly vision: FakeVisionOptions | null;
  /** Every image encoded, oldest first (tests count encoder calls). */
  readonly encodeCalls: NativeImageInput[] = [];
  /** The inputs of each batched encode (encodeImages), in call order. */
  readonly batchCalls: NativeImageInput[][] = [];
  /** Every plan seen, newest last (tests inspect batching). */
  readonly plans: NativeStepPlan[] = [];
  closed = false;
  private readonly kvToken: Int32Array;
  private readonly kvPos: Int32Array;
  /** Per slot: 0 = a plain token at a 1-D position; otherwise the signature of what else it holds. */
  private readonly kvSig: Uint32Array;

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
    this.kvSig = new Uint32Array(slots);
    this.vision = options.vision ?? null;
  }

  info(): NativeModelInfo {
    const o = this.opts;
    return {
      architecture: 'FakeForCausalLM',
      family: 'fake',
      vocabSize: o.vocabSize,
      hiddenSize: HIDDEN,
      numLayers: 1,
      contextLength: o.contextLength,
      blockSize: o.blockSize,
      numBlocks: o.numBlocks,
      kvBytes: o.numBlocks * o.blockSize * 8,
      kvCacheDtype: 'f32',
      weightBytes: 0,
      quantization: 'none',
      precision: 'exact',
      threads: 1,
      device: 'cpu',
      deviceName: 'fake CPU',
      ...(this.vision?.mrope ? { mropeSections: [1, 1, 2] } : {}),
      ...(this.vision ? { vision: { family: 'fake', deepstackLayers: this.vision.deepstackLayers ?? 0, weightBytes: 0, quantization: 'none' } } : {}),
    };
  }

  async encodeImage(input: NativeImageInput): Promise<NativeImageEmbedding> {
    const v = this.tower();
    this.encodeCalls.push(input);
    await encodeDelay(v);
    if (v.failOn?.(input)) throw new Error('fake vision tower: this image makes it fail');
    return this.embed(input);
  }

  /** A batched encode, as the native one: one call, rejected as a whole when any image fails. */
  async encodeImages(inputs: NativeImageInput[]): Promise<NativeImageEmbedding[]> {
    const v = this.tower();
    this.batchCalls.push(inputs);
    await encodeDelay(v);
    if (inputs.some((i) => v.failOn?.(i))) throw new Error('fake vision tower: an image of this batch makes it fail');
    return inputs.map((i) => this.embed(i));
  }

  /** The fake tower's options; throws when the model is closed or has none. */
  private tower(): FakeVisionOptions {
    if (this.closed) throw new Error('model is closed');
    if (this.vision === null) throw new Error('FakeForCausalLM has no vision tower');
    return this.vision;
  }

  /** What the fake tower returns for `input` (also the oracle for tests). */
  embed(input: NativeImageInput): NativeImageEmbedding {
    const [t, h, w] = input.grid;
    if (h % 2 !== 0 || w % 2 !== 0 || t < 1) throw new Error(`fake vision tower: grid ${input.grid.join('x')} does not merge 2x2`);
    const tokens = (t * h * w) / 4;
    let seed = FNV_OFFSET;
    const bits = new Uint32Array(input.pixels.buffer, input.pixels.byteOffset, input.pixels.length);
    for (const b of bits) seed = fnv(seed, b);
    seed = fnv(fnv(fnv(seed, t), h), w);
    const values = (n: number, salt: number) => {
      const out = new Float32Array(n * HIDDEN);
      for (let i = 0; i < out.length; i++) out[i] = (mix(mix(seed, salt), i) % 2001) / 1000 - 1;
      return out;
    };
    const layers = this.vision?.deepstackLayers ?? 0;
    const e: NativeImageEmbedding = { tokens, embeddings: values(tokens, 1), ms: 0 };
    if (layers > 0) e.deepstack = values(layers * tokens, 2);
    return e;
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

  /**
   * The greedy continuation of a prompt with images, computed directly from the request's data
   * (images encoded by embed(), stored positions, index + ropeDelta after the prompt): the oracle
   * for what the engine must produce.
   */
  greedyMultimodal(prompt: readonly number[], mm: MultimodalInput, n: number): number[] {
    const mrope = this.vision?.mrope === true;
    const sigs: number[] = [];
    const inSpan = new Map<number, { row: Float32Array; deep: Float32Array[] }>();
    for (const img of mm.images) {
      const e = this.embed(img.input);
      if (e.tokens !== img.length) throw new Error(`oracle: image encodes to ${e.tokens} tokens, span is ${img.length}`);
      const layers = e.deepstack ? e.deepstack.length / (e.tokens * HIDDEN) : 0;
      for (let r = 0; r < img.length; r++) {
        const deep = Array.from({ length: layers }, (_, l) => e.deepstack!.subarray((l * e.tokens + r) * HIDDEN, (l * e.tokens + r + 1) * HIDDEN));
        inSpan.set(img.offset + r, { row: e.embeddings.subarray(r * HIDDEN, (r + 1) * HIDDEN), deep });
      }
    }
    const L = prompt.length;
    const pos = (i: number, a: number) => (mm.positions !== undefined && i < L ? mm.positions[a * L + i]! : i + (mm.ropeDelta ?? 0));
    const sigAt = (i: number) => {
      const e = inSpan.get(i);
      const p = mrope ? [pos(i, 0), pos(i, 1), pos(i, 2)] : null;
      return signature(i, e?.row ?? null, e?.deep ?? [], p, e !== undefined && mm.bidirectional === true);
    };
    const ctx = [...prompt];
    for (let i = 0; i < L; i++) sigs.push(sigAt(i));
    const out: number[] = [];
    for (let k = 0; k < n; k++) {
      const t = this.pick(this.hashItems(ctx, sigs), null);
      out.push(t);
      sigs.push(sigAt(ctx.length));
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
    // Pending masks, as the addon: supplied while the "forward" runs, awaited (bounded) after it.
    let late: Promise<NativeLateMask[]> | null = null;
    if (plan.rows.some((r) => r.sample?.bitmask === 'pending')) {
      if (plan.pendingMasks === undefined) throw new Error("plan.pendingMasks is required when a row's bitmask is 'pending'");
      const stepId = plan.pendingMasks.stepId;
      late = new Promise((resolve) => (this.gate = { stepId, closed: false, supply: resolve }));
    }
    const delay = this.opts.stepMs + this.opts.msPerToken * tokens;
    await new Promise<void>((resolve) => (delay > 0 ? setTimeout(resolve, delay) : setImmediate(resolve)));
    const t0 = performance.now();
    const lateErrors = late === null ? null : await this.takeLateMasks(plan, late);
    const maskWaitMs = performance.now() - t0;
    const rows = this.compute(plan).map((r) => (lateErrors?.has(r.requestId) ? { requestId: r.requestId, error: lateErrors.get(r.requestId)! } : r));
    return { rows, timings: { forwardMs: performance.now() - t0, sampleMs: 0, tokens, maskWaitMs } };
  }

  /** The in-flight step's late-mask hand-off (supplyMasks resolves it once). */
  private gate: { stepId: number; closed: boolean; supply: (masks: NativeLateMask[]) => void } | null = null;

  supplyMasks(stepId: number, masks: NativeLateMask[]): boolean {
    const g = this.gate;
    if (g === null || g.stepId !== stepId || g.closed) return false;
    g.closed = true;
    g.supply(masks);
    return true;
  }

  /** Waits for the supplied masks (bounded), writes them into the plan's rows; returns the rows that got none. */
  private async takeLateMasks(plan: NativeStepPlan, late: Promise<NativeLateMask[]>): Promise<Map<string, string>> {
    const timeoutMs = plan.pendingMasks!.timeoutMs;
    let timer: NodeJS.Timeout | undefined;
    const got = await Promise.race([late, new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), timeoutMs)))]);
    clearTimeout(timer);
    this.gate!.closed = true;
    this.gate = null;
    const errors = new Map<string, string>();
    const words = Math.ceil(this.opts.vocabSize / 32);
    for (const row of plan.rows) {
      if (row.sample?.bitmask !== 'pending') continue;
      const m = got?.find((x) => x.requestId === row.requestId);
      if (got === null) errors.set(row.requestId, `the grammar bitmask for this row was not supplied within ${timeoutMs} ms of the forward's end (the grammar stalled)`);
      else if (m === undefined) errors.set(row.requestId, 'no grammar bitmask was supplied for this row');
      else if (m.bitmask === null) errors.set(row.requestId, 'the grammar bitmask was withheld (the request ended while the step ran)');
      else if (m.bitmask.length !== words) errors.set(row.requestId, `bitmask has ${m.bitmask.length} words, expected ${words}`);
      else row.sample.bitmask = m.bitmask; // the recorded plan shows the mask the row sampled with
    }
    return errors;
  }

  /** Throws (failing the whole step, as a native crash would) when the plan is inconsistent. */
  private compute(plan: NativeStepPlan): NativeStepRowResult[] {
    const bs = this.opts.blockSize;
    const ids = new Set<string>();
    const written = new Map<number, string>();
    const mrope = this.vision?.mrope === true;
    for (const row of plan.rows) {
      if (ids.has(row.requestId)) throw new Error(`duplicate row ${row.requestId}`);
      ids.add(row.requestId);
      const n = row.tokens.length;
      if (n === 0 || row.positions.length !== (mrope ? 3 * n : n)) throw new Error(`${row.requestId}: ${n} tokens, ${row.positions.length} positions`);
      if (row.blockTable.length * bs < row.contextLen + n) throw new Error(`${row.requestId}: block table too short for ${row.contextLen + n} tokens`);
      this.checkExtras(row);
      for (let i = 0; i < n; i++) {
        if (!mrope && row.positions[i] !== row.contextLen + i) throw new Error(`${row.requestId}: position ${row.positions[i]} at ${i}, expected ${row.contextLen + i}`);
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
      const embedAt = new Map<number, number>();
      if (row.embeds) for (let k = 0; k < row.embeds.offsets.length; k++) embedAt.set(row.embeds.offsets[k]!, k);
      const bidi = new Uint8Array(n);
      const pairs = row.bidirectional ?? new Int32Array(0);
      for (let k = 0; k < pairs.length; k += 2) bidi.fill(1, pairs[k]!, pairs[k + 1]!);
      const m = row.embeds?.offsets.length ?? 0;
      const layers = row.embeds?.deepstack ? row.embeds.deepstack.length / (m * HIDDEN) : 0;
      for (let i = 0; i < n; i++) {
        const pos = row.contextLen + i;
        const slot = row.blockTable[Math.floor(pos / bs)]! * bs + (pos % bs);
        this.kvToken[slot] = row.tokens[i]!;
        this.kvPos[slot] = pos;
        const k = embedAt.get(i);
        const e = k === undefined ? null : row.embeds!.data.subarray(k * HIDDEN, (k + 1) * HIDDEN);
        const deep = k === undefined ? [] : Array.from({ length: layers }, (_, l) => row.embeds!.deepstack!.subarray((l * m + k) * HIDDEN, (l * m + k + 1) * HIDDEN));
        const p = mrope ? [row.positions[i]!, row.positions[n + i]!, row.positions[2 * n + i]!] : null;
        this.kvSig[slot] = signature(pos, e, deep, p, bidi[i] === 1);
      }
      if (!row.sample && !row.wantHidden) {
        out.push({ requestId: row.requestId });
        continue;
      }
      // Read the whole context back through the block table, as attention would.
      const total = row.contextLen + n;
      const ctx = new Array<number>(total);
      const sigs = new Array<number>(total);
      for (let pos = 0; pos < total; pos++) {
        const slot = row.blockTable[Math.floor(pos / bs)]! * bs + (pos % bs);
        if (this.kvPos[slot] !== pos) throw new Error(`${row.requestId}: KV slot for position ${pos} holds position ${this.kvPos[slot]}`);
        ctx[pos] = this.kvToken[slot]!;
        sigs[pos] = this.kvSig[slot]!;
      }
      if (!row.sample) {
        // Pooling: a hidden state that is a function of the context alone (batch invariance is checkable).
        const h = this.hashItems(ctx, sigs);
        out.push({ requestId: row.requestId, hidden: Float32Array.from({ length: HIDDEN }, (_, k) => ((h >>> (k % 24)) & 255) / 64 - 2 + k / HIDDEN) });
        continue;
      }
      const s = row.sample;
      const h = this.hashItems(ctx, sigs);
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

  /** hash() when every signature is 0 (plain tokens at 1-D positions), so text matches greedy(). */
  private hashItems(ctx: readonly number[], sigs: readonly number[]): number {
    let h = FNV_OFFSET;
    for (let i = 0; i < ctx.length; i++) {
      h = fnv(h, ctx[i]!);
      if (sigs[i] !== 0) h = fnv(h, sigs[i]!);
    }
    return h;
  }

  /** Throws (failing the step, as the native side would) on malformed embeds or bidirectional pairs. */
  private checkExtras(row: NativeStepRow): void {
    const n = row.tokens.length;
    if ((row.embeds || row.bidirectional) && this.vision === null) throw new Error(`${row.requestId}: image embeddings sent to a model without a vision tower`);
    if (row.embeds) {
      const { offsets, data, deepstack } = row.embeds;
      const m = offsets.length;
      if (m === 0 || data.length !== m * HIDDEN) throw new Error(`${row.requestId}: embeds carry ${data.length} values for ${m} offsets`);
      for (let k = 0; k < m; k++) {
        if (offsets[k]! < 0 || offsets[k]! >= n || (k > 0 && offsets[k]! <= offsets[k - 1]!)) throw new Error(`${row.requestId}: bad embed offset ${offsets[k]}`);
      }
      const layers = this.vision?.deepstackLayers ?? 0;
      if ((deepstack?.length ?? 0) !== layers * m * HIDDEN) throw new Error(`${row.requestId}: deepstack carries ${deepstack?.length ?? 0} values, expected ${layers * m * HIDDEN}`);
    }
    const pairs = row.bidirectional;
    if (pairs) {
      if (pairs.length % 2 !== 0) throw new Error(`${row.requestId}: odd bidirectional pair list`);
      for (let k = 0; k < pairs.length; k += 2) {
        if (!(pairs[k]! >= 0 && pairs[k]! < pairs[k + 1]! && pairs[k + 1]! <= n)) throw new Error(`${row.requestId}: bad bidirectional block [${pairs[k]}, ${pairs[k + 1]})`);
      }
    }
  }

  private pick(h: number, rng: { seed: number; counter: number } | null): number {
    const o = this.opts;
    if (o.eosEvery > 0 && mix(h, 7) % o.eosEvery === 0) return o.eosId;
    const r = rng === null ? h : mix(mix(h, rng.seed % 0xffffffff), rng.counter);
    return o.alphabet[r % o.alphabet.length]!;
  }
}

/** What a KV slot holds beyond its token: 0 for a plain token at 1-D-equivalent positions. */
function signature(index: number, embedding: Float32Array | null, deepstack: readonly Float32Array[], positions: number[] | null, bidirectional: boolean): number {
  const rope = positions !== null && positions.some((p) => p !== index);
  if (embedding === null && !rope && !bidirectional) return 0;
  let h = FNV_OFFSET;
  if (embedding !== null) {
    for (const v of [embedding, ...deepstack]) for (const b of new Uint32Array(v.buffer, v.byteOffset, v.length)) h = fnv(h, b);
  }
  if (rope) for (const p of positions) h = fnv(h, p - index + 0x10000);
  if (bidirectional) h = fnv(h, 0xb1d1);
  return h === 0 ? 1 : h;
}
