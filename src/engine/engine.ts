// The continuous-batching engine: schedule -> one native step over the whole mixed batch (on the
// addon's own thread, awaited through its Promise) -> update each request. A row the native side
// refuses fails alone; a step that throws is rerun without the rows that make it fail (bounded,
// logged), so only those fail and the loop goes on; a step that never returns trips a watchdog.
// Every request ends with a done event or an error.
import { ENGINE_DEFAULTS } from './defaults.js';
import { pollsSteps, pollWhile } from '../native/poll-while.js';
import type { NativeImageEmbedding, NativeLateMask, NativeModel, NativeModelInfo, NativeStepPlan, NativeStepResult, NativeStepRow, NativeStepRowResult } from '../native/types.js';
import { BlockManager } from './block-manager.js';
import { EncoderCache, type EncoderCacheStats } from './encoder-cache.js';
import { EngineRequestError, grammarDeadEnd } from './engine-errors.js';
import { InvalidRequestError, EngineUnavailableError } from '../errors/request-errors.js';
import type { TextStream } from './detokenizer.js';
import type { GrammarNext, GrammarPick, RequestGrammar } from './grammar/request-grammar.js';
import { checkMultimodal, rowEmbeds, rowPositions, type ImageSpan, type MultimodalInput } from './multimodal.js';
import { EngineRequest, type EngineEvent, type EngineFinishReason } from './request.js';
import type { SamplingParams } from './sampling-params.js';
import { Scheduler, type ScheduledRow, type SchedulerOutput } from './scheduler.js';
import type { DraftSource } from './speculative/draft-source.js';
import { NgramDraftSource } from './speculative/ngram-source.js';
import { Speculator, type SpeculativeMode, type SpeculatorOptions } from './speculative/speculator.js';

/** Test-only fault hooks; reachable only through the constructor, never from HTTP. */
export interface EngineFaults {
  /** Runs before each native step: throw to fail the step, or return a promise to stall it. */
  step?(plan: NativeStepPlan): void | Promise<void>;
  /** Runs for each sampled row: throw to fail that row as the sampler would. */
  sampler?(requestId: string, token: number): void;
  /** Runs before each image encode (keyed by the image's hash): throw to fail it, or stall it. */
  encode?(hash: string): void | Promise<void>;
  /** Runs before output processing of each token: throw to fail that request's detokenizer. */
  detokenizer?(requestId: string, token: number): void;
}

export interface EngineOptions {
  model: NativeModel;
  /** A fresh streaming detokenizer per request. */
  newTextStream: (options?: { keepSpecialTokens?: boolean }) => TextStream;
  stopTokenIds?: Iterable<number>;
  /** Defaults from model.info(). */
  contextLength?: number;
  vocabSize?: number;
  blockSize?: number;
  numBlocks?: number;
  maxNumSeqs?: number;
  maxBatchedTokens?: number;
  maxWaiting?: number;
  /** Attention work of a prefill chunk in a step that also decodes (Scheduler's maxPrefillAttention; 0: no cap). */
  maxPrefillAttention?: number;
  /** A step that takes longer fails its requests and marks the engine unhealthy until it returns. */
  stepTimeoutMs?: number;
  /** Keep the event loop polling while a step runs (pollWhile); default pollsSteps(the model's device). */
  pollSteps?: boolean;
  /** How long sampling waits after the forward for grammar masks computed meanwhile (default 10 s);
   *  then only the constrained rows of that step fail. */
  maskTimeoutMs?: number;
  /** Compute grammar masks while the forward runs when the model can take them late (default true). */
  overlapMasks?: boolean;
  /**
   * Greedy constrained rows in wide grammar states skip the mask: the sampler ranks its top
   * candidates and the grammar takes the best it allows, which is the masked argmax exactly; when
   * none is allowed the token is redone with a mask next step (default: on for CPU models; off on a
   * GPU, where masks are computed while the device runs and greedy rows take the device argmax).
   */
  speculativeGrammar?: boolean;
  enablePrefixCache?: boolean;
  /** Speculative decoding (docs/speculative.md): 'ngram' drafts from the request's own context. Default
   *  off here; a loaded text model (createTextEngine) defaults to defaultSpeculative(its device). */
  speculative?: SpeculativeMode;
  speculator?: Partial<SpeculatorOptions>;
  /** Drafts from this source instead of the n-gram one (a draft model; a bench's worst case); needs speculative 'ngram'. */
  draftSource?: DraftSource;
  /** Bytes of image embeddings kept by content hash (default 256 MiB). */
  encoderCacheBytes?: number;
  /**
   * Encode the images a step needs in one batched forward (model.encodeImages) rather than one at a
   * time (default: on a GPU, where stacked rows fill the GEMMs; on the CPU a batch gains nothing and
   * holds the one native slot longer).
   */
  batchImageEncodes?: boolean;
  /** Defaults from model.info(): 3-axis positions (mropeSections), a vision tower, hidden size. */
  mrope?: boolean;
  vision?: boolean;
  hiddenSize?: number;
  faults?: EngineFaults;
  log?: (message: string) => void;
}

export interface SubmitOptions {
  promptIds: readonly number[];
  params: SamplingParams;
  id?: string;
  cacheSalt?: string;
  /** Structured output: the request's own matcher (the engine frees it when the request ends). */
  grammar?: RequestGrammar;
  /** Special tokens stay in the text (tool-call formats whose markers are special tokens). */
  keepSpecialTokens?: boolean;
  /** The request's images (placeholder spans in promptIds) and its mRoPE positions. */
  multimodal?: MultimodalInput;
  /** Pooling (embeddings): a prefill-only request whose done event carries the last prompt token's
   *  hidden state (EngineDone.embedding); params are ignored, its KV is freed when it ends. */
  embed?: boolean;
}

export interface RequestHandle {
  readonly id: string;
  readonly numPromptTokens: number;
  /** Deltas, then one done event; throws EngineRequestError if the request fails. */
  readonly events: AsyncIterable<EngineEvent>;
  abort(): void;
  /** An engine in another process: settles when it queued the request, or rejects with why it did not
   *  (as submit would throw here). Absent: submit already queued it. */
  readonly accepted?: Promise<void>;
}

export interface EngineHealth {
  ok: boolean;
  reason?: string;
}

export interface EngineStats {
  healthy: boolean;
  unhealthyReason: string | null;
  draining: boolean;
  waiting: number;
  running: number;
  maxNumSeqs: number;
  maxBatchedTokens: number;
  contextLength: number;
  kv: { numBlocks: number; blockSize: number; usedBlocks: number; cachedBlocks: number; freeBlocks: number; usage: number };
  prefixCache: { enabled: boolean; queryTokens: number; hitTokens: number; hitRate: number };
  encoderCache: EncoderCacheStats;
  steps: number;
  /** Steps whose forward the GPU had started before they were asked for (CUDA's step ahead: see cuda_decoder.cu). */
  stepsAhead: number;
  stepFailures: number;
  watchdogTrips: number;
  preemptions: number;
  requests: { submitted: number; stop: number; length: number; abort: number; error: number };
  tokens: { prompt: number; generated: number; computed: number };
  /** Speculative decoding: rows verified with a draft, draft tokens sent and kept. */
  speculative: { mode: SpeculativeMode; rows: number; drafted: number; accepted: number };
  generatedTokensPerSecond: number; // over the last 10 s
  lastStepMs: number;
}

/** The part of the engine the server uses; a fake can stand in for it in tests. */
export interface EngineLike {
  readonly contextLength: number;
  submit(options: SubmitOptions): RequestHandle;
  health(): EngineHealth;
  ready(): EngineHealth;
  stats(): EngineStats;
  shutdown(graceMs: number): Promise<void>;
}

class WatchdogTrip extends Error {}

const THROUGHPUT_WINDOW_MS = 10_000;
const NO_MASKS: ReadonlyMap<string, Int32Array> = new Map();
const NO_ROWS: ReadonlySet<EngineRequest> = new Set();
/** Native calls that may rerun the rows of a step that threw, to find the rows that make it fail:
 *  bisection isolates one such row of 128 in 14. */
const MAX_STEP_RERUNS = 16;
/** Candidates a speculative row asks the sampler for (its top logprobs, best first). */
const SPECULATION_CANDIDATES = 16;

export class Engine implements EngineLike {
  readonly contextLength: number;
  readonly vocabSize: number;
  readonly blocks: BlockManager;
  readonly scheduler: Scheduler;
  readonly encoderCache: EncoderCache;
  /** Positions are [3, n] (mRoPE): text tokens get index (+ the request's rope delta) on all axes. */
  readonly mrope: boolean;
  readonly vision: boolean;
  private readonly hiddenSize: number;
  private readonly model: NativeModel;
  private readonly newTextStream: (options?: { keepSpecialTokens?: boolean }) => TextStream;
  private readonly stopTokenIds: ReadonlySet<number>;
  private readonly stepTimeoutMs: number;
  private readonly maskTimeoutMs: number;
  private readonly overlapMasks: boolean;
  private readonly speculativeGrammar: boolean;
  private readonly batchImageEncodes: boolean;
  private readonly deepstackLayers: number;
  private readonly pollSteps: boolean;
  private readonly speculator: Speculator | null;
  private maskStepId = 0;
  private readonly faults: EngineFaults;
  private readonly log: (message: string) => void;
  private readonly requests = new Map<string, EngineRequest>();
  private looping = false;
  private loopDone: Promise<void> = Promise.resolve();
  private draining = false;
  private stopped = false;
  private unhealthy: string | null = null;
  private nextId = 0;
  private readonly counters = {
    steps: 0,
    stepsAhead: 0,
    stepFailures: 0,
    watchdogTrips: 0,
    preemptions: 0,
    submitted: 0,
    stop: 0,
    length: 0,
    abort: 0,
    error: 0,
    promptTokens: 0,
    generated: 0,
    computed: 0,
  };
  private lastStepMs = 0;
  private readonly recent: { at: number; tokens: number }[] = [];

  constructor(opts: EngineOptions) {
    const needInfo =
      opts.contextLength === undefined || opts.blockSize === undefined || opts.numBlocks === undefined || opts.vocabSize === undefined ||
      opts.mrope === undefined || opts.vision === undefined || opts.hiddenSize === undefined;
    const info = needInfo ? opts.model.info() : undefined;
    this.model = opts.model;
    this.mrope = opts.mrope ?? info!.mropeSections !== undefined;
    this.vision = opts.vision ?? info!.vision !== undefined;
    this.hiddenSize = opts.hiddenSize ?? info!.hiddenSize;
    this.encoderCache = new EncoderCache(opts.encoderCacheBytes ?? 256 * 1024 * 1024);
    this.contextLength = opts.contextLength ?? info!.contextLength;
    this.vocabSize = opts.vocabSize ?? info!.vocabSize;
    this.blocks = new BlockManager({
      numBlocks: opts.numBlocks ?? info!.numBlocks,
      blockSize: opts.blockSize ?? info!.blockSize,
      enablePrefixCache: opts.enablePrefixCache,
    });
    this.scheduler = new Scheduler(
      {
        maxNumSeqs: opts.maxNumSeqs ?? ENGINE_DEFAULTS.maxNumSeqs,
        maxBatchedTokens: opts.maxBatchedTokens ?? ENGINE_DEFAULTS.maxBatchedTokens,
        maxWaiting: opts.maxWaiting ?? ENGINE_DEFAULTS.maxWaiting,
        ...(opts.maxPrefillAttention !== undefined ? { maxPrefillAttention: opts.maxPrefillAttention } : {}),
      },
      this.blocks,
    );
    this.newTextStream = opts.newTextStream;
    this.stopTokenIds = new Set(opts.stopTokenIds ?? []);
    this.stepTimeoutMs = opts.stepTimeoutMs ?? ENGINE_DEFAULTS.stepTimeoutS * 1000;
    this.maskTimeoutMs = opts.maskTimeoutMs ?? 10_000;
    this.overlapMasks = opts.overlapMasks ?? true;
    let device: NativeModelInfo['device'] | undefined; // read from the model once, and only if an option needs it
    const deviceOf = () => (device ??= (info ?? opts.model.info()).device);
    this.speculativeGrammar = opts.speculativeGrammar ?? deviceOf() !== 'cuda';
    this.pollSteps = opts.pollSteps ?? pollsSteps(deviceOf());
    this.batchImageEncodes = opts.model.encodeImages !== undefined && this.vision && (opts.batchImageEncodes ?? deviceOf() === 'cuda');
    this.deepstackLayers = this.batchImageEncodes ? ((info ?? opts.model.info()).vision?.deepstackLayers ?? 0) : 0;
    const mode = opts.speculative ?? 'off';
    this.speculator = mode === 'ngram' ? new Speculator(opts.draftSource ?? new NgramDraftSource(), opts.speculator) : null;
    if (this.speculator !== null) this.scheduler.draftFor = (req, room) => this.speculator!.draftFor(req, room);
    this.faults = opts.faults ?? {};
    this.log = opts.log ?? (() => undefined);
  }

  /**
   * Queues a request. Throws InvalidRequestError for a prompt that can never run (empty, beyond the
   * context or the KV pool, token ids outside the vocabulary) and EngineUnavailableError when the
   * engine cannot take it now.
   */
  submit(options: SubmitOptions): RequestHandle {
    try {
      return this.submitRequest(options);
    } catch (err) {
      options.grammar?.dispose(); // refused: nobody else will free it
      throw err;
    }
  }

  private submitRequest(options: SubmitOptions): RequestHandle {
    if (this.stopped || this.draining) throw new EngineUnavailableError('the server is shutting down', 'shutting_down');
    if (this.unhealthy !== null) throw new EngineUnavailableError(`the engine is unhealthy: ${this.unhealthy}`, 'unhealthy', 5);
    const prompt = options.promptIds;
    if (prompt.length === 0) throw new InvalidRequestError('the prompt is empty', 'prompt');
    // A pooling request generates nothing: its prompt may fill the whole context.
    if (prompt.length > this.contextLength - (options.embed === true ? 0 : 1)) {
      throw new InvalidRequestError(
        `the prompt is ${prompt.length} tokens; this model's context is ${this.contextLength} tokens${options.embed === true ? '' : ' (including at least one generated token)'}. Shorten the prompt.`,
        'prompt',
      );
    }
    for (const t of prompt) {
      if (!Number.isInteger(t) || t < 0 || t >= this.vocabSize) {
        throw new InvalidRequestError(`token id ${String(t)} is outside the vocabulary [0, ${this.vocabSize})`, 'prompt');
      }
    }
    const biased = options.params.logitBias?.tokens;
    const lastBiased = biased?.[biased.length - 1]; // ids ascend (resolveLogitBias)
    if (lastBiased !== undefined && lastBiased >= this.vocabSize) {
      throw new InvalidRequestError(`logit_bias: token id ${lastBiased} is outside the vocabulary [0, ${this.vocabSize})`, 'logit_bias');
    }
    if (this.blocks.blocksFor(prompt.length + 1) > this.blocks.numBlocks) {
      throw new InvalidRequestError(
        `the prompt is ${prompt.length} tokens; the KV cache holds ${this.blocks.numBlocks * this.blocks.blockSize}. Shorten the prompt or raise --kv-cache-memory.`,
        'prompt',
      );
    }
    const imageSpans = options.multimodal ? checkMultimodal(options.multimodal, prompt.length, this.mrope, this.vision) : [];
    const id = options.id ?? `req-${++this.nextId}`;
    if (this.requests.has(id)) throw new InvalidRequestError(`request id ${id} is already in use`, 'id');
    const req = new EngineRequest({
      id,
      promptIds: prompt,
      params: options.params,
      maxTotalTokens: options.embed === true ? prompt.length : Math.min(this.contextLength, prompt.length + options.params.maxTokens),
      stopTokenIds: this.stopTokenIds,
      text: this.newTextStream(options.keepSpecialTokens ? { keepSpecialTokens: true } : undefined),
      cacheSalt: options.cacheSalt,
      grammar: options.grammar,
      multimodal: options.multimodal,
      imageSpans,
      embed: options.embed,
    });
    this.scheduler.add(req); // throws when the queue is full
    this.requests.set(id, req);
    this.counters.submitted++;
    this.counters.promptTokens += prompt.length;
    this.kick();
    return {
      id,
      numPromptTokens: prompt.length,
      events: req.events,
      // Bound to this request object: a later request reusing the id is not affected.
      abort: () => {
        if (this.requests.get(id) === req) this.end(req, 'abort');
      },
    };
  }

  /** Runs one request to completion, aborting it when `signal` fires or the consumer stops early. */
  async *generate(options: SubmitOptions, signal?: AbortSignal): AsyncGenerator<EngineEvent> {
    const handle = this.submit(options);
    const onAbort = () => handle.abort();
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      yield* handle.events;
    } finally {
      signal?.removeEventListener('abort', onAbort);
      handle.abort(); // no-op once finished
    }
  }

  /** Ends a request now: its KV blocks are free before the next step is scheduled. */
  abort(id: string): void {
    const req = this.requests.get(id);
    if (!req) return;
    this.end(req, 'abort');
  }

  health(): EngineHealth {
    if (this.unhealthy !== null) return { ok: false, reason: this.unhealthy };
    if (this.stopped) return { ok: false, reason: 'stopped' };
    return { ok: true };
  }

  /** Whether new requests are accepted now (for /health/ready). */
  ready(): EngineHealth {
    const h = this.health();
    if (!h.ok) return h;
    if (this.draining) return { ok: false, reason: 'shutting down' };
    if (this.scheduler.waiting.length >= this.scheduler.config.maxWaiting) return { ok: false, reason: 'waiting queue is full' };
    return { ok: true };
  }

  stats(): EngineStats {
    const b = this.blocks.stats();
    const now = performance.now();
    while (this.recent.length > 0 && now - this.recent[0]!.at > THROUGHPUT_WINDOW_MS) this.recent.shift();
    let windowTokens = 0;
    for (const r of this.recent) windowTokens += r.tokens;
    const span = this.recent.length > 0 ? Math.max(1000, now - this.recent[0]!.at) : 1;
    const c = this.counters;
    return {
      healthy: this.unhealthy === null && !this.stopped,
      unhealthyReason: this.unhealthy,
      draining: this.draining,
      waiting: this.scheduler.waiting.length,
      running: this.scheduler.running.length,
      maxNumSeqs: this.scheduler.config.maxNumSeqs,
      maxBatchedTokens: this.scheduler.config.maxBatchedTokens,
      contextLength: this.contextLength,
      kv: { ...pick(b), usage: b.usedBlocks / b.numBlocks },
      prefixCache: {
        enabled: this.blocks.prefixCaching,
        queryTokens: b.prefixQueryTokens,
        hitTokens: b.prefixHitTokens,
        hitRate: b.prefixQueryTokens > 0 ? b.prefixHitTokens / b.prefixQueryTokens : 0,
      },
      encoderCache: this.encoderCache.stats(),
      steps: c.steps,
      stepsAhead: c.stepsAhead,
      stepFailures: c.stepFailures,
      watchdogTrips: c.watchdogTrips,
      preemptions: c.preemptions,
      requests: { submitted: c.submitted, stop: c.stop, length: c.length, abort: c.abort, error: c.error },
      tokens: { prompt: c.promptTokens, generated: c.generated, computed: c.computed },
      speculative: { mode: this.speculator === null ? 'off' : 'ngram', ...(this.speculator?.stats ?? { rows: 0, drafted: 0, accepted: 0 }) },
      generatedTokensPerSecond: this.recent.length > 0 ? (windowTokens / span) * 1000 : 0,
      lastStepMs: this.lastStepMs,
    };
  }

  /** Stops admitting, lets in-flight requests finish for up to graceMs, fails the rest, stops. */
  async shutdown(graceMs: number): Promise<void> {
    this.draining = true;
    const deadline = performance.now() + graceMs;
    while (this.requests.size > 0 && performance.now() < deadline) await sleep(Math.min(20, Math.max(1, deadline - performance.now())));
    this.stopped = true;
    for (const req of [...this.requests.values()]) this.failRequest(req, new EngineRequestError('the server shut down before this request finished', 'shutdown'));
    // A step stuck in native code must not hold the process hostage.
    await Promise.race([this.loopDone, sleep(1000)]);
  }

  private kick(): void {
    if (this.looping || this.stopped) return;
    this.looping = true;
    // Start on the next turn so a burst of submissions lands in the same first step.
    this.loopDone = new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.loop());
  }

  private async loop(): Promise<void> {
    try {
      while (!this.stopped && this.scheduler.hasWork) {
        await this.runStep();
        // Let sockets and timers run between steps even if the native side resolves at once.
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    } catch (err) {
      // A bug in the engine itself: fail everything rather than leave anyone waiting.
      this.log(`engine loop failed: ${(err as Error).stack ?? String(err)}`);
      for (const req of [...this.requests.values()]) this.failRequest(req, new EngineRequestError(`internal engine error: ${(err as Error).message}`, 'step_failed'));
    } finally {
      this.looping = false;
    }
  }

  private async runStep(): Promise<void> {
    const out = this.scheduler.schedule();
    this.counters.preemptions += out.preempted.length;
    for (const f of out.failed) this.failRequest(f.request, f.error);
    if (out.rows.length === 0) {
      if (out.failed.length > 0 || out.preempted.length > 0) return;
      throw new Error(`scheduler produced an empty step with ${this.scheduler.waiting.length} waiting and ${this.scheduler.running.length} running`);
    }
    // Image spans this step computes get their embeddings first (text-only and decode steps skip this).
    if (out.rows.some(reachesImages)) {
      if (!(await this.encodeImages(out))) return; // the watchdog tripped
      if (out.rows.length === 0) return;
    }
    // Budget-aware closing: each constrained grammar learns how many tokens its request has left.
    for (const row of out.rows) if (row.sample) row.request.grammar?.setTokensLeft?.(row.request.maxTotalTokens - row.request.tokens.length);
    const spec = await this.speculativeRows(out);
    dropEndedRows(out); // aborted while the grammars were asked
    if (out.rows.length === 0) return;
    const constrained = out.rows.some((r) => needsMask(r, spec));
    // Two-phase: the forward starts now and the masks follow while it runs (the model waits for
    // them right before sampling). Otherwise they are computed first; unconstrained steps skip both.
    const late = constrained && this.overlapMasks && this.model.supplyMasks !== undefined;
    const masks = constrained && !late ? await this.grammarMasks(out, spec) : NO_MASKS;
    if (out.rows.length === 0) return;
    const plan = this.buildPlan(out, masks, late, spec);
    const t0 = performance.now();
    let result: NativeStepResult;
    let launched!: (ok: boolean) => void;
    const started = new Promise<boolean>((resolve) => (launched = resolve));
    const work = this.runNative(plan, launched);
    const supplying = late ? this.supplyLateMasks(out, spec, plan.pendingMasks!.stepId, started) : undefined;
    try {
      result = await this.withWatchdog(work);
    } catch (err) {
      this.counters.stepFailures++;
      if (err instanceof WatchdogTrip) {
        await this.onWatchdog(`a step of ${out.rows.length} rows`, work);
        return;
      }
      const rerun = await this.rerunWithoutFailing(out, { masks, late, spec, supplying }, errorText(err));
      if (rerun === null) return;
      result = rerun;
    }
    this.lastStepMs = performance.now() - t0;
    this.counters.steps++;
    if (result.timings.ahead === true) this.counters.stepsAhead++;
    this.counters.computed += out.numTokens;
    const byId = new Map(result.rows.map((r) => [r.requestId, r]));
    // Rows the native side failed go first, so their KV never reaches the prefix cache.
    for (const row of out.rows) {
      const r = byId.get(row.request.id);
      if (r === undefined) this.failRequest(row.request, new EngineRequestError('the step returned no result for this request', 'step_failed'));
      else if (r.error !== undefined) {
        // A pending-mask row that got no mask in time: the grammar's failure, not the sampler's.
        const code = plan.pendingMasks !== undefined && needsMask(row, spec) ? 'grammar_failed' : 'sampler_failed';
        this.failRequest(row.request, new EngineRequestError(`the step failed for this request: ${r.error}`, code));
      }
    }
    this.scheduler.completeStep(out);
    for (const row of out.rows) if (row.request.imageEmbeddings.size > 0) releaseComputed(row.request);
    const picked = spec.size > 0 ? await this.resolveSpeculation(out, byId, spec) : new Map<string, number>();
    const lengthEnded = this.applyResult(out, byId, spec, picked);
    // max_tokens on a constrained request: "stop" if its last token completed the output.
    for (const req of lengthEnded) {
      const next = await req.grammar!.next().catch(() => ({ kind: 'dead' as const }));
      this.end(req, next.kind === 'complete' ? completeReason(req) : 'length');
    }
  }

  /**
   * A step that threw for its whole batch: reruns its rows in halves (bisection, at most
   * MAX_STEP_RERUNS native calls) until the rows that fail are alone, fails only those
   * ('step_failed', their own error), drops them from `out` and returns the other rows' results,
   * which equal what one step would have given (batch invariance; counter-based seeds). Safe to
   * rerun: the failed step committed nothing (completeStep registers prefix-cache blocks, after
   * this), KV it wrote is rewritten with the same values (same tokens at the same positions), and a
   * CUDA step enqueued ahead is used only for exactly its batch (cuda_decoder.cu, same_batch), so
   * a rerun of fewer rows drops it. Null when a rerun hung (the watchdog failed everyone).
   */
  private async rerunWithoutFailing(
    out: SchedulerOutput,
    step: { masks: ReadonlyMap<string, Int32Array>; late: boolean; spec: ReadonlySet<EngineRequest>; supplying?: Promise<void> },
    error: string,
  ): Promise<NativeStepResult | null> {
    const many = out.rows.length > 1;
    this.log(`step failed (${out.rows.length} rows): ${error}${many ? '; rerunning its rows without the failing ones' : ''}`);
    // The failed step's late masks are done before any grammar is asked again.
    await step.supplying;
    const merged: NativeStepResult = { rows: [], timings: { forwardMs: 0, sampleMs: 0, tokens: 0 } };
    const failing: { rows: ScheduledRow[]; error: string }[] = [{ rows: out.rows, error }];
    let reruns = 0;
    while (failing.length > 0) {
      const group = failing.pop()!;
      const rows = group.rows.filter((r) => r.request.status === 'running');
      if (rows.length === 0) continue;
      if (rows.length === 1 || reruns >= MAX_STEP_RERUNS) {
        if (rows.length > 1) this.log(`step reruns exhausted: failing ${rows.length} rows together`);
        for (const row of rows) this.failRequest(row.request, new EngineRequestError(`the step running this request failed: ${group.error}`, 'step_failed'));
        continue;
      }
      const half = Math.ceil(rows.length / 2);
      for (const part of [rows.slice(0, half), rows.slice(half)]) {
        const live = part.filter((r) => r.request.status === 'running');
        if (live.length === 0) continue;
        reruns++;
        const r = await this.rerunRows(live, step);
        if (r === null) return null;
        if (typeof r === 'string') {
          failing.push({ rows: live, error: r });
          continue;
        }
        merged.rows.push(...r.rows);
        merged.timings.forwardMs += r.timings.forwardMs;
        merged.timings.sampleMs += r.timings.sampleMs;
        merged.timings.tokens += r.timings.tokens;
      }
    }
    dropEndedRows(out);
    return merged;
  }

  /** One rerun of some of a failed step's rows: their result, the error it threw, or null after a watchdog trip. */
  private async rerunRows(
    rows: ScheduledRow[],
    step: { masks: ReadonlyMap<string, Int32Array>; late: boolean; spec: ReadonlySet<EngineRequest> },
  ): Promise<NativeStepResult | string | null> {
    const sub: SchedulerOutput = { rows, preempted: [], failed: [], numTokens: rows.reduce((n, r) => n + r.numTokens, 0) };
    const plan = this.buildPlan(sub, step.masks, step.late, step.spec);
    let launched!: (ok: boolean) => void;
    const started = new Promise<boolean>((resolve) => (launched = resolve));
    const work = this.runNative(plan, launched);
    const supplying = step.late ? this.supplyLateMasks(sub, step.spec, plan.pendingMasks!.stepId, started) : undefined;
    try {
      return await this.withWatchdog(work);
    } catch (err) {
      this.counters.stepFailures++;
      if (err instanceof WatchdogTrip) {
        await this.onWatchdog(`a rerun of ${rows.length} rows of a failed step`, work);
        return null;
      }
      return errorText(err);
    } finally {
      await supplying;
    }
  }

  /**
   * The token bitmask of every constrained row that samples this step. A row whose grammar is
   * complete ends with "stop"; one whose grammar is dead (or throws) fails alone. Rows that ended
   * (here, or by an abort while a mask was computed) leave the step.
   */
  private async grammarMasks(out: SchedulerOutput, spec: ReadonlySet<EngineRequest>): Promise<ReadonlyMap<string, Int32Array>> {
    const masks = await this.computeMasks(out, spec);
    dropEndedRows(out);
    return masks;
  }

  /**
   * The masks of the step's constrained sampling rows, in row order. A complete grammar ends its
   * request with "stop"; a dead or throwing one fails it alone; either way the row gets no mask.
   */
  private async computeMasks(out: SchedulerOutput, spec: ReadonlySet<EngineRequest>): Promise<Map<string, Int32Array>> {
    const masks = new Map<string, Int32Array>();
    // Asked all at once (a grammar in a worker answers them in one round trip), handled in row order.
    const asked: [EngineRequest, Promise<GrammarNext>][] = [];
    for (const row of out.rows) {
      const req = row.request;
      if (!needsMask(row, spec) || req.grammar === null || req.status !== 'running') continue;
      const next = ask(() => req.grammar!.next());
      asked.push([req, next]);
    }
    for (const [req, pending] of asked) {
      try {
        const next = await pending;
        if (req.status !== 'running') continue;
        if (next.kind === 'mask') masks.set(req.id, next.bitmask);
        else if (next.kind === 'complete') {
          req.completeText();
          this.end(req, completeReason(req));
        } else this.failRequest(req, grammarDeadEnd());
      } catch (err) {
        this.failRequest(req, new EngineRequestError(`the grammar failed: ${(err as Error).message}`, 'grammar_failed'));
      }
    }
    return masks;
  }

  /**
   * Two-phase step, JS side: computes the masks while the forward runs and hands them to the model
   * once it has the step. Rows whose request ended meanwhile are withheld (null: not sampled). If the
   * model stopped waiting (timeout), it refuses them and has failed those rows itself. Never throws.
   */
  private async supplyLateMasks(out: SchedulerOutput, spec: ReadonlySet<EngineRequest>, stepId: number, started: Promise<boolean>): Promise<void> {
    try {
      const masks = await this.computeMasks(out, spec);
      if (!(await started)) return; // the step never reached the model
      const late: NativeLateMask[] = [];
      for (const row of out.rows) {
        if (!needsMask(row, spec)) continue;
        const m = masks.get(row.request.id);
        late.push({ requestId: row.request.id, bitmask: m !== undefined && row.request.status === 'running' ? m : null });
      }
      if (!this.model.supplyMasks!(stepId, late)) this.log(`step ${stepId}: its grammar masks came after it stopped waiting`);
    } catch (err) {
      this.log(`step ${stepId}: supplying grammar masks failed: ${(err as Error).message}`);
    }
  }

  /**
   * The step's rows that sample without a mask and take the grammar's best allowed candidate instead:
   * greedy (the argmax is what speculation reproduces), no logprobs asked (they would have to come
   * from the masked distribution), not covering images (a miss un-computes the last prompt token,
   * which must stay a text token), and in a state the grammar judges wide. Penalties are fine: the
   * sampler masks first and penalizes after, so the ranking of allowed tokens is the same.
   */
  private async speculativeRows(out: SchedulerOutput): Promise<ReadonlySet<EngineRequest>> {
    if (!this.speculativeGrammar) return NO_ROWS;
    const asks: Promise<EngineRequest | null>[] = [];
    for (const row of out.rows) {
      const req = row.request;
      const g = req.grammar;
      if (!row.sample || g === null || g.speculate === undefined || g.acceptBest === undefined) continue;
      // A redo after a miss takes the mask, so every token is sampled at most twice.
      if (req.redoWithMask || req.params.temperature !== 0 || req.params.logprobs >= 0 || reachesImages(row)) continue;
      // All rows at once: a grammar in a worker answers them in one round trip. A failure is left
      // to the mask path, which meets it and fails the request with it.
      asks.push((async () => ((await g.speculate!()) ? req : null))().catch(() => null));
    }
    if (asks.length === 0) return NO_ROWS;
    const wide = (await Promise.all(asks)).filter((r): r is EngineRequest => r !== null && r.status === 'running');
    return wide.length > 0 ? new Set(wide) : NO_ROWS;
  }

  /**
   * Speculative rows after the step: the grammar takes the best allowed of the sampler's ranked
   * candidates. Returns the token each such row emits. A complete or dead state ends the request as
   * the mask path would. A miss emits nothing and un-computes the row's last token, so the next step
   * recomputes its logits at the same position and samples them with a mask.
   */
  private async resolveSpeculation(
    out: SchedulerOutput,
    byId: ReadonlyMap<string, NativeStepRowResult>,
    spec: ReadonlySet<EngineRequest>,
  ): Promise<Map<string, number>> {
    const picked = new Map<string, number>();
    // Asked all at once (one round trip to a grammar worker), handled in row order.
    const asked: [EngineRequest, Promise<GrammarPick>][] = [];
    for (const row of out.rows) {
      const req = row.request;
      const r = byId.get(req.id);
      if (!spec.has(req) || req.status !== 'running' || r?.token === undefined) continue; // applyResult fails a missing token
      const pending = ask(() => req.grammar!.acceptBest!(rankedCandidates(r)));
      asked.push([req, pending]);
    }
    for (const [req, pending] of asked) {
      let pick: GrammarPick;
      try {
        pick = await pending;
      } catch (err) {
        this.failRequest(req, new EngineRequestError(`the grammar failed: ${(err as Error).message}`, 'grammar_failed'));
        continue;
      }
      if (req.status !== 'running') continue; // aborted while a mask was computed
      if (pick.kind === 'token') picked.set(req.id, pick.token);
      else if (pick.kind === 'complete') {
        req.completeText();
        this.end(req, completeReason(req));
      } else if (pick.kind === 'dead') this.failRequest(req, grammarDeadEnd());
      else {
        this.scheduler.redoLastToken(req);
        req.redoWithMask = true;
      }
    }
    return picked;
  }

  /**
   * Fetches (encoder cache) or computes (vision tower: encode and step share the native slot) the
   * embeddings of every image span the step's rows cover: the images no cache entry or encode in
   * flight has go in one batched forward (batchImageEncodes), else one at a time. An encoder failure
   * fails that request alone. Returns false when an encode hung (the watchdog failed everyone).
   */
  private async encodeImages(out: SchedulerOutput): Promise<boolean> {
    const { promises: batched, all } = this.batchImageEncodes ? this.startBatch(out) : { promises: new Map<string, Promise<NativeImageEmbedding>>(), all: null };
    for (const row of out.rows) {
      const req = row.request;
      for (const [i, span] of unencodedSpans(row)) {
        if (req.status !== 'running') break; // ended while an earlier image was encoded
        const work = batched.get(span.key) ?? this.encoderCache.get(span.key, () => this.encodeOne(span));
        let e: NativeImageEmbedding;
        try {
          e = await this.withWatchdog(work);
          checkEmbedding(e, span, this.hiddenSize);
        } catch (err) {
          if (err instanceof WatchdogTrip) {
            this.counters.stepFailures++;
            await this.onWatchdog(`an image encode (request ${req.id})`, work);
            return false;
          }
          this.failRequest(req, new EngineRequestError(`the image encoder failed for image ${i} of this request: ${(err as Error).message}`, 'encoder_failed'));
          break;
        }
        if (req.status === 'running') req.imageEmbeddings.set(i, e);
      }
    }
    if (all !== null) {
      // The native slot is free only once the whole batch returned (it never rejects: failures are per image).
      try {
        await this.withWatchdog(all);
      } catch (err) {
        if (!(err instanceof WatchdogTrip)) throw err;
        this.counters.stepFailures++;
        await this.onWatchdog('a batched image encode', all);
        return false;
      }
    }
    dropEndedRows(out);
    return true;
  }

  private async encodeOne(span: ImageSpan): Promise<NativeImageEmbedding> {
    if (this.faults.encode) await this.faults.encode(span.image.hash);
    return this.model.encodeImage(span.image.input);
  }

  /**
   * Starts one batched encode of the step's images that are neither cached nor being encoded, when
   * there are any, joined by the images the next admitted requests will need (lookahead, up to half
   * the encoder cache), so concurrent image requests share a forward even when one step's token
   * budget holds a single image. One image alone goes the usual way. Each is registered in the
   * encoder cache; returns the promises of this step's images by key, and the whole call.
   */
  private startBatch(out: SchedulerOutput): { promises: Map<string, Promise<NativeImageEmbedding>>; all: Promise<unknown> | null } {
    const now = new Map<string, ImageSpan>();
    for (const row of out.rows)
      if (row.request.status === 'running')
        for (const [, span] of unencodedSpans(row)) if (!this.encoderCache.knows(span.key)) now.set(span.key, span);
    const promises = new Map<string, Promise<NativeImageEmbedding>>();
    if (now.size === 0) return { promises, all: null };
    const spans = new Map(now);
    let room = this.encoderCache.maxBytes / 2;
    for (const s of now.values()) room -= this.embeddingBytesOf(s);
    const next = [...this.scheduler.running, ...this.scheduler.waiting.slice(0, this.scheduler.config.maxNumSeqs)];
    for (const req of next) {
      for (const [i, span] of req.imageSpans.entries()) {
        if (req.imageEmbeddings.has(i) || spans.has(span.key) || this.encoderCache.knows(span.key)) continue;
        room -= this.embeddingBytesOf(span);
        if (room < 0) break;
        spans.set(span.key, span);
      }
      if (room < 0) break;
    }
    if (spans.size < 2) return { promises, all: null };
    const list = [...spans.values()];
    const all = this.encodeBatch(list);
    list.forEach((span, j) => {
      const p = this.encoderCache.get(span.key, () =>
        all.then((r) => {
          const e = r[j]!;
          if (e instanceof Error) throw e;
          return e;
        }),
      );
      p.catch(() => undefined); // its request may end (or come later) before awaiting it: failures are reported where awaited
      if (now.has(span.key)) promises.set(span.key, p);
    });
    return { promises, all };
  }

  /** Bytes an image's embeddings take (with DeepStack features): what the encoder cache will hold. */
  private embeddingBytesOf(span: ImageSpan): number {
    return (span.end - span.start) * this.hiddenSize * 4 * (1 + this.deepstackLayers);
  }

  /** One native call for every image; if it fails (one bad image fails a batch), each alone, so only a bad one fails. */
  private async encodeBatch(spans: readonly ImageSpan[]): Promise<(NativeImageEmbedding | Error)[]> {
    try {
      if (this.faults.encode) for (const s of spans) await this.faults.encode(s.image.hash);
      const out = await this.model.encodeImages!(spans.map((s) => s.image.input));
      if (out.length !== spans.length) throw new Error(`encodeImages returned ${out.length} embeddings for ${spans.length} images`);
      return out;
    } catch {
      const out: (NativeImageEmbedding | Error)[] = [];
      for (const s of spans) {
        try {
          out.push(await this.encodeOne(s));
        } catch (err) {
          out.push(err instanceof Error ? err : new Error(String(err)));
        }
      }
      return out;
    }
  }

  private buildPlan(out: SchedulerOutput, masks: ReadonlyMap<string, Int32Array>, late: boolean, spec: ReadonlySet<EngineRequest>): NativeStepPlan {
    const rows: NativeStepRow[] = out.rows.map((s) => {
      const req = s.request;
      const k = s.draft?.length ?? 0;
      const tokens = Int32Array.from(req.tokens.slice(s.contextLen, s.contextLen + s.numTokens));
      const positions = rowPositions(s.contextLen, s.numTokens + k, this.mrope, req.numPromptTokens, req.multimodal);
      const row: NativeStepRow = {
        requestId: req.id,
        tokens: k > 0 ? Int32Array.from([...tokens, ...s.draft!]) : tokens,
        positions,
        blockTable: Int32Array.from(req.blockTable),
        contextLen: s.contextLen,
      };
      if (k > 0) row.draft = k;
      if (reachesImages(s)) {
        const bidi = req.multimodal?.bidirectional === true;
        const e = rowEmbeds(req.imageSpans, req.imageEmbeddings, s.contextLen, s.numTokens, this.hiddenSize, bidi);
        if (e.embeds !== undefined) row.embeds = e.embeds;
        if (e.bidirectional !== undefined) row.bidirectional = e.bidirectional;
      }
      if (s.sample && req.embed) row.wantHidden = true; // its last prompt token: pooled, not sampled
      else if (s.sample) {
        row.sample = req.sampleParams();
        if (spec.has(req)) row.sample.logprobs = SPECULATION_CANDIDATES; // no mask: its ranked candidates
        else if (late && req.grammar !== null) row.sample.bitmask = 'pending';
        const bitmask = masks.get(req.id);
        if (bitmask !== undefined) row.sample.bitmask = bitmask;
      }
      return row;
    });
    return late ? { rows, pendingMasks: { stepId: ++this.maskStepId, timeoutMs: this.maskTimeoutMs } } : { rows };
  }

  /** Calls launched(true) as soon as the model has the plan (late masks may go in), false if it never will. */
  private async runNative(plan: NativeStepPlan, launched: (ok: boolean) => void): Promise<NativeStepResult> {
    try {
      if (this.faults.step) await this.faults.step(plan);
      const work = this.pollSteps ? pollWhile(this.model.step(plan)) : this.model.step(plan);
      launched(true);
      return await work;
    } finally {
      launched(false); // no-op once resolved
    }
  }

  private async withWatchdog<T>(work: Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const trip = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new WatchdogTrip()), this.stepTimeoutMs);
    });
    const t0 = performance.now();
    try {
      const out = await Promise.race([work, trip]);
      // Work that finished past the bound broke it too: the timer can lose the race to a fast native completion
      // (a 0 ms bound, or an event loop that was busy), and the bound must not depend on that order.
      if (performance.now() - t0 > this.stepTimeoutMs) throw new WatchdogTrip();
      return out;
    } finally {
      clearTimeout(timer);
    }
  }

  /** A hung step or encode: fail everyone (nothing can run until the native side returns), then wait for it. */
  private async onWatchdog(what: string, work: Promise<unknown>): Promise<void> {
    this.counters.watchdogTrips++;
    this.unhealthy = `${what} did not return within ${this.stepTimeoutMs} ms`;
    this.log(`watchdog: ${this.unhealthy}`);
    const err = new EngineRequestError(`the engine stalled: ${this.unhealthy}`, 'watchdog');
    for (const req of [...this.requests.values()]) this.failRequest(req, err);
    // Freed blocks are not reused before the stuck step settles: no new step starts until then.
    await work.then(
      () => undefined,
      () => undefined,
    );
    this.unhealthy = null;
    this.log('watchdog: the stalled step returned; the engine is healthy again');
  }

  /**
   * Returns the constrained requests that reached their token limit (not ended yet). Speculative rows
   * emit their `picked` token (already accepted by their grammar; none after a miss).
   */
  private applyResult(
    out: SchedulerOutput,
    byId: ReadonlyMap<string, NativeStepRowResult>,
    spec: ReadonlySet<EngineRequest>,
    picked: ReadonlyMap<string, number>,
  ): EngineRequest[] {
    const lengthEnded: EngineRequest[] = [];
    let generated = 0;
    for (const row of out.rows) {
      const req = row.request;
      if (req.status !== 'running') continue; // aborted while the step ran, or failed above
      const r = byId.get(req.id);
      if (!row.sample) continue;
      if (req.embed) {
        if (r?.hidden === undefined) this.failRequest(req, new EngineRequestError('the step returned no hidden state for this request', 'step_failed'));
        else {
          req.embedding = r.hidden;
          this.end(req, 'stop'); // prefill only: its KV blocks are freed now (full ones stay in the prefix cache)
        }
        continue;
      }
      if (r?.token === undefined) {
        this.failRequest(req, new EngineRequestError('the step returned no token for this request', 'sampler_failed'));
        continue;
      }
      const speculative = spec.has(req);
      const token = speculative ? picked.get(req.id) : r.token;
      if (token === undefined) continue; // a speculative miss: the token is redone next step
      if (row.draft !== undefined && row.draft.length > 0) {
        generated += this.applyDraft(req, row.draft, r);
        continue;
      }
      try {
        this.faults.sampler?.(req.id, token);
      } catch (err) {
        this.failRequest(req, new EngineRequestError(`sampling failed: ${(err as Error).message}`, 'sampler_failed'));
        continue;
      }
      if (!speculative && req.grammar !== null && !req.grammar.accept(token)) {
        this.failRequest(req, new EngineRequestError(`the grammar rejected token ${token}`, 'grammar_failed'));
        continue;
      }
      let reason: EngineFinishReason | null;
      try {
        this.faults.detokenizer?.(req.id, token);
        // A speculative row's logprobs were its candidates, not something the user asked for.
        reason = speculative ? req.appendToken(token) : req.appendToken(token, r.logprob, r.topLogprobs);
      } catch (err) {
        this.failRequest(req, new EngineRequestError(`output processing failed: ${(err as Error).message}`, 'detokenizer_failed'));
        continue;
      }
      generated++;
      req.redoWithMask = false;
      if (reason === 'length' && req.grammar !== null) lengthEnded.push(req);
      else if (reason !== null) this.end(req, reason);
    }
    this.counters.generated += generated;
    if (generated > 0) {
      const now = performance.now();
      this.recent.push({ at: now, tokens: generated });
      while (now - this.recent[0]!.at > THROUGHPUT_WINDOW_MS) this.recent.shift();
    }
    return lengthEnded;
  }

  /**
   * A verified draft row: the kept draft tokens, then the token sampled after them, each through output
   * processing in order (a stop token, stop string or limit ends it there). Its rejected slots' blocks
   * are freed. Returns the tokens emitted.
   */
  private applyDraft(req: EngineRequest, draft: readonly number[], r: NativeStepRowResult): number {
    const accepted = r.accepted ?? 0;
    if (!(Number.isInteger(accepted) && accepted >= 0 && accepted <= draft.length)) {
      this.failRequest(req, new EngineRequestError(`the step kept ${String(r.accepted)} of a ${draft.length}-token draft`, 'step_failed'));
      return 0;
    }
    this.speculator!.record(req, draft.length, accepted);
    this.scheduler.acceptDraft(req, accepted);
    const emitted = [...draft.slice(0, accepted), r.token!];
    let n = 0;
    for (const token of emitted) {
      let reason: EngineFinishReason | null;
      try {
        this.faults.sampler?.(req.id, token);
      } catch (err) {
        this.failRequest(req, new EngineRequestError(`sampling failed: ${(err as Error).message}`, 'sampler_failed'));
        return n;
      }
      try {
        this.faults.detokenizer?.(req.id, token);
        reason = req.appendToken(token);
      } catch (err) {
        this.failRequest(req, new EngineRequestError(`output processing failed: ${(err as Error).message}`, 'detokenizer_failed'));
        return n;
      }
      n++;
      if (reason !== null) {
        this.end(req, reason);
        return n;
      }
    }
    return n;
  }

  private end(req: EngineRequest, reason: EngineFinishReason): void {
    if (!this.requests.has(req.id)) return;
    this.scheduler.remove(req);
    this.requests.delete(req.id);
    this.counters[reason]++;
    req.finish(reason);
  }

  private failRequest(req: EngineRequest, error: Error): void {
    if (!this.requests.has(req.id)) return;
    if (req.status !== 'finished') this.scheduler.remove(req);
    this.requests.delete(req.id);
    this.counters.error++;
    req.fail(error);
  }
}

/** The image spans (index, span) this row's tokens cover whose embeddings its request does not have yet. */
function* unencodedSpans(row: ScheduledRow): Generator<[number, ImageSpan]> {
  const req = row.request;
  const from = row.contextLen;
  const to = from + row.numTokens;
  for (const [i, span] of req.imageSpans.entries()) if (span.end > from && span.start < to && !req.imageEmbeddings.has(i)) yield [i, span];
}

/** Throws when the encoder's output does not match the image's placeholder span. */
function checkEmbedding(e: NativeImageEmbedding, span: ImageSpan, hidden: number): void {
  const n = span.image.embedAt?.length ?? span.end - span.start; // Pixtral: only its [IMG] tokens take rows
  if (e.tokens !== n) throw new Error(`the image encodes to ${e.tokens} tokens but the prompt has ${n} placeholder tokens for it`);
  if (e.embeddings.length !== n * hidden) throw new Error(`the encoder returned ${e.embeddings.length} values for ${n} tokens of width ${hidden}`);
}

/** A completed constrained output ends with "stop", or "length" when budget closing had to end it. */
function completeReason(req: EngineRequest): EngineFinishReason {
  return req.grammar?.closedByBudget?.() === true ? 'length' : 'stop';
}

/** Whether a row samples with a grammar mask: constrained and not speculative. */
function needsMask(row: ScheduledRow, spec: ReadonlySet<EngineRequest>): boolean {
  return row.sample && row.request.grammar !== null && !spec.has(row.request);
}

/** Starts a grammar call whose result is awaited later, in row order: a throw becomes its rejection. */
function ask<T>(call: () => Promise<T>): Promise<T> {
  let p: Promise<T>;
  try {
    p = call();
  } catch (err) {
    p = Promise.reject(err as Error);
  }
  p.catch(() => undefined); // handled where it is awaited
  return p;
}

/** A speculative row's candidates as the sampler ranked them (best first, ties lower id first). */
function rankedCandidates(r: NativeStepRowResult): number[] {
  return r.topLogprobs !== undefined && r.topLogprobs.length > 0 ? r.topLogprobs.map((c) => c.token) : [r.token!];
}


/** Whether a row can cover an image span: not once it starts past the last one (decode rows). */
function reachesImages(row: ScheduledRow): boolean {
  return row.contextLen < (row.request.imageSpans.at(-1)?.end ?? 0);
}

/** Takes rows whose request ended (while its masks or images were computed) out of the step. */
function dropEndedRows(out: SchedulerOutput): void {
  if (out.rows.every((r) => r.request.status === 'running')) return;
  out.rows = out.rows.filter((r) => r.request.status === 'running');
  out.numTokens = out.rows.reduce((n, r) => n + r.numTokens, 0);
}

/** Drops a request's image embeddings once their spans are in its KV (a preemption fetches them again). */
function releaseComputed(req: EngineRequest): void {
  for (const [i, span] of req.imageSpans.entries()) if (span.end <= req.numComputed) req.imageEmbeddings.delete(i);
}

function pick(b: { numBlocks: number; blockSize: number; usedBlocks: number; cachedBlocks: number; freeBlocks: number }) {
  return { numBlocks: b.numBlocks, blockSize: b.blockSize, usedBlocks: b.usedBlocks, cachedBlocks: b.cachedBlocks, freeBlocks: b.freeBlocks };
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
