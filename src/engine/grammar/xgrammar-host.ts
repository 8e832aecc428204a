// The event-loop side of the grammar worker: queues xgrammar ops, sends them as one batch at a
// time (the masks of a step's rows travel together), and contains failures. A trap or a batch past
// its time limit discards the worker's instance: the op that caused it fails alone, a fresh
// instance starts, every live matcher is replayed in it (its format recompiled, its accepted tokens
// accepted again through its UTF-8 guard and budget closing) and the other queued ops go on there.
// Meanwhile health() says degraded.
import { Worker } from 'node:worker_threads';
import { InvalidRequestError } from '../../errors/request-errors.js';
import { grammarFaults } from './grammar-faults.js';
import type { RequestGrammarOptions } from './guarded-grammar.js';
import { GRAMMAR_WORKER_LIMITS, type WorkerLimits } from './schema-limits.js';
import type { XgInit, XgOp, XgReply, XgResult } from './xgrammar-protocol.js';
import { compiledWorker } from '../../compiled-worker.js';

export type XgInitData = Omit<XgInit, 'type' | 'progress'>;

/** A live request's matcher as the host knows it: enough to rebuild it in a new instance. */
export interface MatcherRecord {
  readonly id: number;
  readonly key: string;
  readonly schema: string;
  readonly strict: boolean;
  /** How the worker wraps the matcher (UTF-8 guard, budget closing). */
  readonly options: RequestGrammarOptions;
  /** Every token accepted so far, in order. */
  readonly history: number[];
  /** The tokens the request has left, as last told (budget closing); undefined until then. */
  left?: number;
  /** Why it can no longer be used (its op trapped, or its replay failed); null while usable. */
  dead: string | null;
}

interface Pending {
  op: XgOp;
  record?: MatcherRecord;
  /** Part of a replay: runs before anything queued. */
  replay?: boolean;
  resolve(r: XgResult): void;
  reject(e: Error): void;
}

interface Inflight {
  seq: number;
  ops: Pending[];
  timer: NodeJS.Timeout;
  limitMs: number;
}

const workerFile = (): URL => compiledWorker(import.meta.url, 'engine/grammar/xgrammar-worker.js', 'grammar worker');

/** The op's failure as the request sees it: a compile's is the schema's (400), others the grammar's. */
function opError(p: Pending, why: string): Error {
  if (p.op.op === 'compile') return new InvalidRequestError(`response_format: the schema could not be compiled: ${why}`, 'response_format');
  return new Error(why);
}

export class XgrammarHost {
  private readonly initData: () => XgInitData;
  private worker: Worker | null = null;
  private generation = 0;
  private ready = false;
  private queue: Pending[] = [];
  private inflight: Inflight | null = null;
  private seq = 0;
  private flushQueued = false;
  private readonly progress = new SharedArrayBuffer(4);
  private readonly live = new Map<number, MatcherRecord>();
  /** Compiles done or under way in the current instance, by key. */
  private compiles = new Map<string, Promise<void>>();
  private rebuilding: string | null = null;
  private rebuildsInARow = 0;
  private init: XgInitData | null = null;
  private startTimer: NodeJS.Timeout | undefined;
  /** The instance's wasm memory after its first batch (its replay, if any). */
  private baselineBytes: number | null = null;
  /** Instances replaced so far (for logs and tests). */
  rebuilds = 0;

  private readonly limits: WorkerLimits;

  constructor(limits: Partial<WorkerLimits>, initData: () => XgInitData) {
    this.limits = { ...GRAMMAR_WORKER_LIMITS, ...limits };
    this.initData = initData;
  }

  /** Degraded while an instance is being rebuilt: requests still run, they wait for it. */
  health(): { ok: true } | { ok: false; reason: string } {
    return this.rebuilding === null ? { ok: true } : { ok: false, reason: `the grammar engine is being rebuilt after: ${this.rebuilding}` };
  }

  /** Compiles a schema in the current instance (once per instance); InvalidRequestError when refused. */
  compile(key: string, schema: string, strict: boolean): Promise<void> {
    let p = this.compiles.get(key);
    if (p === undefined) {
      p = this.call({ op: 'compile', key, schema, strict }).then((r) => {
        if (!r.ok) throw new InvalidRequestError(`response_format: the schema is not supported: ${r.error}`, 'response_format');
      });
      p.catch(() => this.compiles.delete(key));
      this.compiles.set(key, p);
    }
    return p;
  }

  /** Drops a compiled grammar no live matcher needs at creation anymore. */
  evict(key: string): void {
    if (!this.compiles.delete(key)) return;
    void this.call({ op: 'evict', key }).catch(() => undefined);
  }

  /**
   * A new matcher for a compiled key; the record is what a rebuild replays. Returns the shortest
   * valid output's length when budget closing measured it (see XgResult).
   */
  async create(record: MatcherRecord): Promise<number | null> {
    this.live.set(record.id, record);
    try {
      const r = await this.call({ op: 'create', id: record.id, key: record.key, options: record.options, history: [] }, record);
      if (!r.ok) throw new Error(r.error);
      return r.shortest ?? null;
    } catch (err) {
      this.live.delete(record.id);
      throw err;
    }
  }

  release(record: MatcherRecord): void {
    if (!this.live.delete(record.id)) return;
    void this.call({ op: 'dispose', id: record.id }).catch(() => undefined);
  }

  /** Queues one op; it goes with the next batch. Rejects when the op trapped or timed out. */
  call(op: XgOp, record?: MatcherRecord): Promise<XgResult> {
    if (record?.dead) return Promise.reject(new Error(record.dead));
    return new Promise<XgResult>((resolve, reject) => {
      this.queue.push({ op, record, resolve, reject });
      this.schedule();
    });
  }

  /** Stops the worker (its matchers are gone); for shutdown and tests. */
  async close(): Promise<void> {
    const w = this.worker;
    this.worker = null;
    this.ready = false;
    this.generation++;
    const batch = this.inflight;
    this.inflight = null;
    if (batch !== null) clearTimeout(batch.timer);
    clearTimeout(this.startTimer);
    const left = [...(batch?.ops ?? []), ...this.queue];
    this.queue = [];
    for (const p of left) p.reject(opError(p, 'the grammar engine was stopped'));
    for (const r of this.live.values()) r.dead = 'the grammar engine was stopped';
    this.live.clear();
    if (w !== null) await w.terminate();
  }

  private schedule(): void {
    if (this.flushQueued) return;
    this.flushQueued = true;
    // After the current microtasks: a step's next() calls for all rows join one batch.
    queueMicrotask(() => {
      this.flushQueued = false;
      this.flush();
    });
  }

  private flush(): void {
    if (this.worker === null) {
      try {
        this.startInstance();
      } catch (err) {
        // No worker can start (its file is missing): every queued op fails, nothing hangs.
        const queued = this.queue;
        this.queue = [];
        for (const p of queued) p.reject(opError(p, (err as Error).message));
        return;
      }
    }
    if (!this.ready || this.inflight !== null || this.queue.length === 0) return;
    const ops: Pending[] = [];
    let compiles = 0;
    let alone = false;
    while (this.queue.length > 0) {
      const p = this.queue[0]!;
      // A compile goes alone (its time limit is its own), but a replay goes whole.
      if (alone || (p.op.op === 'compile' && !p.replay && ops.length > 0)) break;
      alone = p.op.op === 'compile' && !p.replay;
      this.queue.shift();
      if (p.record?.dead && !p.replay) {
        p.reject(new Error(p.record.dead));
        continue;
      }
      if (p.op.op === 'compile') compiles++;
      ops.push(p);
    }
    if (ops.length === 0) return;
    const limitMs = alone ? this.limits.compileTimeoutMs : this.limits.opTimeoutMs + compiles * this.limits.compileTimeoutMs;
    const seq = ++this.seq;
    const timer = setTimeout(() => this.onTimeout(seq), limitMs);
    this.inflight = { seq, ops, timer, limitMs };
    this.worker!.ref();
    this.worker!.postMessage({ type: 'batch', seq, ops: ops.map((p) => this.withFaults(p)) });
  }

  /** The test-only faults of grammar-faults.ts, as a flag on the op. */
  private withFaults(p: Pending): XgOp {
    const { op } = p;
    if (op.op === 'compile' && grammarFaults.trapCompile?.(op.schema)) return { ...op, trap: true };
    if (op.op === 'next' && p.record !== undefined && grammarFaults.trapMask?.(p.record.schema)) return { ...op, trap: true };
    return op;
  }

  private startInstance(): void {
    const gen = ++this.generation;
    this.ready = false;
    this.baselineBytes = null;
    this.compiles = new Map();
    const worker = new Worker(workerFile(), { execArgv: [] });
    this.worker = worker;
    worker.on('message', (msg: XgReply) => {
      if (gen === this.generation) this.onReply(msg);
    });
    worker.on('error', (err) => {
      if (gen === this.generation) this.discard(`the grammar worker failed: ${err.message}`, this.culprit());
    });
    worker.on('exit', (code) => {
      if (gen === this.generation) this.discard(`the grammar worker exited (code ${code})`, this.culprit());
    });
    this.init ??= this.initData();
    const init: XgInit = { type: 'init', ...this.init, progress: this.progress };
    worker.postMessage(init);
    const timer = setTimeout(() => {
      if (gen === this.generation && !this.ready) this.discard(`the grammar engine did not start within startTimeoutMs = ${this.limits.startTimeoutMs} ms`, null);
    }, this.limits.startTimeoutMs);
    timer.unref();
    this.startTimer = timer;
  }

  private onReply(msg: XgReply): void {
    if (msg.type === 'ready') {
      clearTimeout(this.startTimer);
      const go = () => {
        this.ready = true;
        this.worker?.unref();
        this.replay();
        this.flush();
      };
      const delay = this.rebuilding !== null ? grammarFaults.rebuildDelayMs : undefined;
      if (delay !== undefined) setTimeout(go, delay);
      else go();
      return;
    }
    if (msg.type === 'fatal') {
      this.discard(`the grammar engine did not start: ${msg.message}`, null);
      return;
    }
    const batch = this.inflight;
    if (batch === null || batch.seq !== msg.seq) return;
    clearTimeout(batch.timer);
    msg.results.forEach((r, i) => batch.ops[i]!.resolve(r));
    if (msg.type === 'trap') {
      this.discard(`xgrammar trapped (${msg.message})`, msg.index, true);
      return;
    }
    this.inflight = null;
    this.worker?.unref();
    if (this.rebuilding !== null && !this.queue.some((p) => p.replay)) {
      this.rebuilding = null;
      this.rebuildsInARow = 0;
    }
    this.baselineBytes ??= msg.memoryBytes;
    if (msg.memoryBytes > this.limits.maxWasmBytes && msg.memoryBytes - this.baselineBytes > this.limits.maxWasmBytes / 2) {
      const mb = (b: number) => `${Math.round(b / 2 ** 20)} MiB`;
      this.discard(`its wasm memory grew to ${mb(msg.memoryBytes)} (maxWasmBytes = ${this.limits.maxWasmBytes}); replaced to release it`, null);
      return;
    }
    this.flush();
  }

  /** The index of the in-flight op the worker is running (it stores it before each op). */
  private culprit(): number | null {
    return this.inflight === null ? null : Atomics.load(new Int32Array(this.progress), 0);
  }

  private onTimeout(seq: number): void {
    const batch = this.inflight;
    if (batch === null || batch.seq !== seq) return;
    const index = this.culprit()!;
    const op = batch.ops[index]?.op;
    const limit = op?.op === 'compile' ? `compileTimeoutMs = ${this.limits.compileTimeoutMs}` : `opTimeoutMs = ${this.limits.opTimeoutMs}`;
    this.discard(`it ran past the limit ${limit} ms`, index);
  }

  /**
   * The instance is unusable: fail the op at `index` of the in-flight batch (and its matcher), put
   * the others back in the queue (after a trap, those before it were answered by its reply) and
   * start a fresh instance.
   */
  private discard(why: string, index: number | null, answeredBefore = false): void {
    const batch = this.inflight;
    this.inflight = null;
    if (batch !== null) clearTimeout(batch.timer);
    const old = this.worker;
    this.worker = null;
    this.ready = false;
    this.generation++;
    void old?.terminate();
    this.rebuilds++;
    this.rebuilding = why;
    const again: Pending[] = [];
    if (batch !== null) {
      // Ops the trap reply answered were resolved already; a timeout answered none.
      batch.ops.forEach((p, i) => {
        if (i === index) {
          if (p.record !== undefined) p.record.dead = `the grammar failed: ${why}`;
          if (p.op.op === 'compile') for (const r of this.live.values()) if (r.key === p.op.key) r.dead = `the grammar failed: ${why}`;
          p.reject(opError(p, why));
        } else if (index === null || i > index || !answeredBefore) again.push(p);
      });
    }
    if (++this.rebuildsInARow > this.limits.maxRebuildsInARow) {
      // Replays keep failing: give up on everything live, start clean.
      for (const r of this.live.values()) r.dead = `the grammar failed: ${why}`;
      this.live.clear();
      this.rebuildsInARow = 0;
    }
    // What a replay rebuilds needs no rerun: a matcher's creation and its accepted tokens.
    const rest = [...again.filter((p) => !p.replay), ...this.queue.filter((p) => !p.replay)];
    this.queue = [];
    for (const p of rest) {
      const op = p.op.op;
      if (op === 'create' || op === 'accept' || op === 'dispose' || op === 'evict') p.resolve({ ok: true });
      else this.queue.push(p);
    }
    this.startInstance();
  }

  /** Queues the rebuild of every live matcher, ahead of everything else. */
  private replay(): void {
    if (this.rebuilding === null) return;
    const ops: Pending[] = [];
    const keys = new Map<string, MatcherRecord>();
    for (const r of this.live.values()) if (r.dead === null && !keys.has(r.key)) keys.set(r.key, r);
    for (const [key, r] of keys) {
      const done = new Promise<void>((resolve, reject) => {
        ops.push({
          op: { op: 'compile', key, schema: r.schema, strict: r.strict },
          replay: true,
          resolve: (res) => (res.ok ? resolve() : reject(new Error(res.error))),
          reject,
        });
      });
      done.catch((err: Error) => {
        for (const x of this.live.values()) if (x.key === key) x.dead = `the grammar failed: ${err.message}`;
      });
      this.compiles.set(key, done);
    }
    for (const r of this.live.values()) {
      if (r.dead !== null) continue;
      const fail = (e: string) => {
        r.dead = `the grammar failed replaying its tokens: ${e}`;
      };
      ops.push({
        op: { op: 'create', id: r.id, key: r.key, options: r.options, history: [...r.history], left: r.left },
        record: r,
        replay: true,
        resolve: (res) => (res.ok ? undefined : fail(res.error)),
        reject: (e) => fail(e.message),
      });
    }
    if (ops.length === 0) {
      this.rebuilding = null;
      this.rebuildsInARow = 0;
      return;
    }
    this.queue.unshift(...ops);
  }
}
