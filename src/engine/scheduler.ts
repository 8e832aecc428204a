// Continuous batching as plain data. There is no prefill or decode phase: each step, every running
// request's computed tokens catch up with its known tokens under one token budget. Decodes go
// first, then unfinished prefill chunks, then new requests in arrival order (FCFS). What decodes
// leave is shared: each prefilling or admitted request first gets at most an equal share, then the
// rest goes out in the same order, so a 32k-token prompt cannot hold back a short request's first
// token for its whole prefill. When the KV pool is full the newest running request is preempted:
// its blocks are freed and it is recomputed later. A prefill chunk never splits an image's
// placeholder span (it is encoded and spliced whole).
import { BlockManager } from './block-manager.js';
import { EngineRequestError } from './engine-errors.js';
import { EngineUnavailableError } from '../errors/request-errors.js';
import { chunkEnd } from './multimodal.js';
import type { EngineRequest } from './request.js';

export interface SchedulerConfig {
  maxNumSeqs: number; // running requests at most
  maxBatchedTokens: number; // tokens per step at most (prefill chunks + decodes)
  maxWaiting: number; // queued requests at most; more are refused (overload)
  /**
   * While decodes run, a prefill chunk's attention work (its tokens x the keys they attend to) at most:
   * deep into a long prompt a full chunk costs far more than its token count says, and the decodes of
   * that step wait for it. Default maxBatchedTokens x PREFILL_ATTENTION_KEYS; 0 turns the cap off.
   */
  maxPrefillAttention?: number;
}

/** Keys a full prefill chunk may attend to, on average, in a step that also decodes (see maxPrefillAttention). */
export const PREFILL_ATTENTION_KEYS = 4096;

export interface ScheduledRow {
  request: EngineRequest;
  /** Tokens computed this step: request.tokens[contextLen, contextLen + numTokens). */
  numTokens: number;
  contextLen: number;
  /** Whether this row emits a token (its last known token is computed this step). */
  sample: boolean;
  /** Speculative draft after its last token, verified this step (counted in the step's tokens). */
  draft?: number[];
}

export interface SchedulerOutput {
  rows: ScheduledRow[];
  /** Requests moved back to the waiting queue this step (their KV was freed). */
  preempted: EngineRequest[];
  /** Requests that can never fit in the KV pool; they are out of the scheduler already. */
  failed: { request: EngineRequest; error: EngineRequestError }[];
  numTokens: number;
}

export class Scheduler {
  readonly waiting: EngineRequest[] = [];
  readonly running: EngineRequest[] = [];
  /** Requests whose image span waited for room last step: it goes whole next time. */
  private readonly deferred = new WeakSet<EngineRequest>();
  /** Drafts for decode rows (speculative decoding), within the room left in the step's budget. */
  draftFor: ((req: EngineRequest, room: number) => number[]) | null = null;

  constructor(
    readonly config: SchedulerConfig,
    readonly blocks: BlockManager,
  ) {
    if (!(config.maxNumSeqs >= 1 && config.maxBatchedTokens >= 1 && config.maxWaiting >= 0)) {
      throw new Error('scheduler needs maxNumSeqs >= 1, maxBatchedTokens >= 1, maxWaiting >= 0');
    }
  }

  get hasWork(): boolean {
    return this.waiting.length > 0 || this.running.length > 0;
  }

  /** Queues a request (FCFS); refuses it when the waiting queue is full. */
  add(req: EngineRequest): void {
    if (this.waiting.length >= this.config.maxWaiting) {
      throw new EngineUnavailableError(`the server is overloaded: ${this.waiting.length} requests are already waiting; retry later`, 'overloaded');
    }
    req.status = 'waiting';
    this.waiting.push(req);
  }

  /** Takes a request out (finished, aborted or failed) and frees its KV blocks. */
  remove(req: EngineRequest): void {
    const list = req.status === 'running' ? this.running : this.waiting;
    const i = list.indexOf(req);
    if (i >= 0) list.splice(i, 1);
    this.blocks.free(req);
    req.status = 'finished';
  }

  schedule(): SchedulerOutput {
    const out: SchedulerOutput = { rows: [], preempted: [], failed: [], numTokens: 0 };
    let budget = this.config.maxBatchedTokens;
    const scheduled = new Set<EngineRequest>();
    const decodes = this.running.filter((r) => r.tokens.length - r.numComputed === 1);
    const prefills = this.running.filter((r) => r.tokens.length - r.numComputed > 1);
    // Each prefill's first pass is capped at an equal share of what the decodes leave, among the
    // running prefills and the requests that could be admitted this step.
    const admissible = Math.max(0, Math.min(this.waiting.length, this.config.maxNumSeqs - this.running.length));
    const contenders = prefills.length + admissible;
    const share = contenders > 1 ? Math.max(1, Math.floor((budget - decodes.length) / contenders)) : Infinity;
    const attention = decodes.length > 0 ? (this.config.maxPrefillAttention ?? this.config.maxBatchedTokens * PREFILL_ATTENTION_KEYS) : 0;

    for (const [i, req] of [...decodes, ...prefills].entries()) {
      if (budget <= 0) break;
      if (req.status !== 'running') continue; // preempted earlier in this loop
      const n = this.sharedChunk(req, req.numComputed, budget, Math.min(share, attentionCap(req.numComputed, attention)));
      if (n === 0) continue; // an image span waits for a step with room for it
      // A draft only where its slots fit without preempting anyone, leaving a token for each decode after it.
      const room = budget - n - (decodes.length - i - 1);
      const draft = this.draftFor !== null && i < decodes.length && room > 0 ? this.draftFor(req, room) : [];
      if (draft.length > 0 && this.blocks.allocate(req, [], req.numComputed + n + draft.length)) {
        this.addRow(out, req, n, scheduled, draft);
        budget -= n + draft.length;
        continue;
      }
      let ok = this.blocks.allocate(req, [], req.numComputed + n);
      while (!ok) {
        const victim = this.lowestPriorityUnscheduled(scheduled);
        if (victim === undefined || victim === req) {
          if (scheduled.size === 0 && this.running.length === 1) {
            // Alone with the whole pool and still short: it can never fit.
            this.fail(req, out);
          } else {
            this.preempt(req, out);
          }
          break;
        }
        this.preempt(victim, out);
        ok = this.blocks.allocate(req, [], req.numComputed + n);
      }
      if (!ok) continue;
      this.addRow(out, req, n, scheduled);
      budget -= n;
    }

    // Admission only when nothing was preempted: memory is short, let the running ones finish.
    while (out.preempted.length === 0 && budget > 0 && this.waiting.length > 0 && this.running.length < this.config.maxNumSeqs) {
      const req = this.waiting[0]!;
      const prefix = req.numComputed === 0 && req.blockTable.length === 0 ? this.blocks.lookupPrefix(req) : [];
      const start = prefix.length * this.blocks.blockSize;
      const n = this.sharedChunk(req, start, budget, Math.min(share, attentionCap(start, attention)));
      if (n === 0) break; // FCFS: the head's image span waits for the next step
      if (!this.blocks.allocate(req, prefix, start + n)) {
        if (this.running.length === 0 && out.rows.length === 0 && this.blocks.freeBlocks === this.blocks.numBlocks) {
          this.waiting.shift();
          this.fail(req, out); // more than the whole pool for one chunk: never fits
          continue;
        }
        break; // FCFS: nobody overtakes the head of the queue
      }
      this.waiting.shift();
      if (this.blocks.prefixCaching) this.blocks.notePrefixQuery(req.tokens.length, start);
      req.status = 'running';
      req.numComputed = start;
      if (req.cachedTokens < 0) req.cachedTokens = start;
      this.running.push(req);
      this.addRow(out, req, n, scheduled);
      budget -= n;
    }
    if (share !== Infinity) this.topUp(out, budget, attention);
    return out;
  }

  /**
   * Hands what the shares left of the budget to this step's prefill rows, in order (a lone long
   * prompt among short ones still prefills at full speed). Only grows rows whose blocks fit without
   * preempting anyone; a chunk still never ends inside an image span.
   */
  private topUp(out: SchedulerOutput, budget: number, attention: number): void {
    for (const row of out.rows) {
      if (budget <= 0) return;
      const req = row.request;
      const end = row.contextLen + row.numTokens;
      if (req.status !== 'running' || end >= req.tokens.length) continue;
      const room = Math.min(budget, attentionCap(row.contextLen, attention) - row.numTokens);
      if (room <= 0) continue;
      const grown = chunkEnd(req.imageSpans, row.contextLen, req.tokens.length, row.numTokens + room, this.config.maxBatchedTokens, false);
      const n = Math.min(grown, row.contextLen + row.numTokens + room) - row.contextLen;
      if (n <= row.numTokens || !this.blocks.allocate(req, [], row.contextLen + n)) continue;
      budget -= n - row.numTokens;
      out.numTokens += n - row.numTokens;
      row.numTokens = n;
      row.sample = row.contextLen + n === req.tokens.length;
    }
  }

  /** Advances each scheduled row that is still running by its computed tokens; caches full blocks. */
  completeStep(out: SchedulerOutput): void {
    for (const row of out.rows) {
      const req = row.request;
      if (req.status !== 'running') continue;
      req.numComputed = row.contextLen + row.numTokens;
      this.blocks.commit(req);
    }
  }

  /**
   * After a draft row: `accepted` draft tokens were kept (their KV is valid and they are appended to
   * req.tokens by the caller), so they count as computed; blocks held only for rejected draft slots go
   * back to the pool (they were never full of verified tokens, so never in the prefix cache).
   */
  acceptDraft(req: EngineRequest, accepted: number): void {
    if (req.status !== 'running') return;
    req.numComputed += accepted;
    this.blocks.trim(req, req.numComputed + 1);
  }

  /**
   * Un-computes req's last token (its sampled token could not be used: a speculative grammar row
   * whose candidates all missed), so the next step recomputes it and its logits at the same
   * position. Its KV slot is rewritten with the same values, so blocks stay allocated and any
   * prefix-cache entry already registered for them stays valid.
   */
  redoLastToken(req: EngineRequest): void {
    if (req.status !== 'running' || req.numComputed !== req.tokens.length) {
      throw new Error(`${req.id}: only a running request whose tokens are all computed can redo its last token`);
    }
    req.numComputed--;
  }

  /**
   * chunkSize within this request's share of the step. An image span at `start` larger than the
   * share is atomic: it is sized against the whole remaining budget, as without sharing (otherwise
   * every contender could defer its span and the step would be empty).
   */
  private sharedChunk(req: EngineRequest, start: number, budget: number, share: number): number {
    if (share >= budget) return this.chunkSize(req, start, budget);
    if (req.imageSpans.length > 0) {
      const capped = chunkEnd(req.imageSpans, start, req.tokens.length, share, this.config.maxBatchedTokens, false);
      if (capped - start > share) return this.chunkSize(req, start, budget);
    }
    return this.chunkSize(req, start, share);
  }

  /**
   * Tokens of req to compute from `start` within `budget`: never part of an image span. A span
   * that does not fit what is left of this step waits one step at most, then goes whole.
   */
  private chunkSize(req: EngineRequest, start: number, budget: number): number {
    const limit = req.tokens.length;
    if (req.imageSpans.length === 0) return Math.min(limit - start, budget);
    const mayDefer = !this.deferred.has(req);
    const end = chunkEnd(req.imageSpans, start, limit, budget, this.config.maxBatchedTokens, mayDefer);
    if (end === start) this.deferred.add(req);
    else this.deferred.delete(req);
    return end - start;
  }

  private addRow(out: SchedulerOutput, req: EngineRequest, n: number, scheduled: Set<EngineRequest>, draft?: number[]): void {
    if (req.firstScheduledMs === 0) req.firstScheduledMs = performance.now();
    const row: ScheduledRow = { request: req, numTokens: n, contextLen: req.numComputed, sample: req.numComputed + n === req.tokens.length };
    if (draft !== undefined) row.draft = draft;
    out.rows.push(row);
    out.numTokens += n + (draft?.length ?? 0);
    scheduled.add(req);
  }

  /** The most recently admitted running request not scheduled in this step. */
  private lowestPriorityUnscheduled(scheduled: Set<EngineRequest>): EngineRequest | undefined {
    for (let i = this.running.length - 1; i >= 0; i--) {
      const r = this.running[i]!;
      if (!scheduled.has(r)) return r;
    }
    return undefined;
  }

  private preempt(req: EngineRequest, out: SchedulerOutput): void {
    const i = this.running.indexOf(req);
    if (i >= 0) this.running.splice(i, 1);
    this.blocks.free(req);
    req.numComputed = 0;
    req.preemptions++;
    req.status = 'waiting';
    this.waiting.unshift(req); // first in line again: it arrived before everyone waiting
    out.preempted.push(req);
  }

  private fail(req: EngineRequest, out: SchedulerOutput): void {
    const i = this.running.indexOf(req);
    if (i >= 0) this.running.splice(i, 1);
    this.blocks.free(req);
    req.status = 'finished';
    const need = this.blocks.blocksFor(req.tokens.length);
    out.failed.push({
      request: req,
      error: new EngineRequestError(
        `the KV cache is too small for this request: it needs ${need} blocks of ${this.blocks.blockSize} tokens and the pool has ${this.blocks.numBlocks}; raise --kv-cache-memory or shorten the request`,
        'kv_cache_full',
      ),
    });
  }
}

/**
 * The most tokens a prefill chunk from `start` may have so that tokens x keys attended (start + n)
 * stays within `attention` (0: no cap); at least 1, so a long prompt always advances.
 */
function attentionCap(start: number, attention: number): number {
  if (attention <= 0) return Infinity;
  // n (start + n) <= attention  =>  n <= (sqrt(start^2 + 4 attention) - start) / 2
  return Math.max(1, Math.floor((Math.sqrt(start * start + 4 * attention) - start) / 2));
}
