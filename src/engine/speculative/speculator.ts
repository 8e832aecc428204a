// Which decode rows carry a draft and how long it is: the policy over a DraftSource. Per request, k
// adapts to what verification keeps (all kept: k grows to 2k + 1; a miss: back to minDraft), and
// a request whose drafts keep failing stops drafting for a while (the cool-down doubles each time),
// so a workload where nothing matches pays only the lookup.
import type { EngineRequest } from '../request.js';
import type { DraftSource } from './draft-source.js';

export interface SpeculatorOptions {
  /** Draft tokens per row at most, and after a miss. k + 1 a multiple of 4: on the CPU a row of 4 tokens
   *  hides under the weights' streaming (0.5B, 2 threads, Zen 3: 1.40x a decode, 5 tokens 1.76x) and a row
   *  of 8 costs 2.33x (docs/speculative.md). */
  maxDraft: number;
  minDraft: number;
  /** Below this share of drafted tokens kept (over the last drafts of a request), it pauses drafting. */
  minAcceptance: number;
  /** Steps a request first pauses for; doubles on each pause, up to maxPause. Short: a workload that
   *  alternates between new text and copying loses the start of each copy while paused. */
  pauseSteps: number;
  maxPause: number;
}

export const SPECULATOR_DEFAULTS: SpeculatorOptions = { maxDraft: 7, minDraft: 3, minAcceptance: 0.25, pauseSteps: 2, maxPause: 256 };

/**
 * One sequence's drafting: adaptive k, and a pause after drafts keep failing. Used per request by the
 * Speculator (the engine) and alone by `rapid run`'s single-sequence loop.
 */
export class DraftPolicy {
  private k: number;
  /** Exponential averages of drafted and kept tokens per verified row. */
  private drafted = 0;
  private kept = 0;
  private pausedUntil = 0;
  private pause: number;
  private steps = 0;

  constructor(
    private readonly source: DraftSource,
    private readonly o: SpeculatorOptions = SPECULATOR_DEFAULTS,
  ) {
    this.k = Math.min(o.minDraft, o.maxDraft);
    this.pause = o.pauseSteps;
  }

  /** The draft after `tokens` (prompt + output), at most `room` tokens (empty: decode plainly). */
  next(tokens: readonly number[], room: number): number[] {
    this.steps++;
    if (this.steps < this.pausedUntil) return [];
    const k = Math.min(this.k, room);
    return k > 0 ? this.source.propose(tokens, k) : [];
  }

  /** What verification kept of a draft of `drafted` tokens. */
  record(drafted: number, accepted: number): void {
    this.k = accepted === drafted ? Math.min(this.o.maxDraft, 2 * this.k + 1) : Math.min(this.o.minDraft, this.o.maxDraft);
    this.drafted = 0.7 * this.drafted + 0.3 * drafted;
    this.kept = 0.7 * this.kept + 0.3 * accepted;
    if (this.kept < this.o.minAcceptance * this.drafted) {
      this.pausedUntil = this.steps + this.pause;
      this.pause = Math.min(this.o.maxPause, this.pause * 2);
      this.drafted = this.kept = 0;
    } else if (accepted > 0) this.pause = this.o.pauseSteps;
  }
}

export interface SpeculationStats {
  /** Rows verified with a draft, draft tokens sent, and draft tokens kept. */
  rows: number;
  drafted: number;
  accepted: number;
}

export class Speculator {
  readonly options: SpeculatorOptions;
  private readonly policies = new WeakMap<EngineRequest, DraftPolicy>();
  readonly stats: SpeculationStats = { rows: 0, drafted: 0, accepted: 0 };

  constructor(
    readonly source: DraftSource,
    options: Partial<SpeculatorOptions> = {},
  ) {
    this.options = { ...SPECULATOR_DEFAULTS, ...options };
    if (!(this.options.maxDraft >= 1 && this.options.minDraft >= 1)) throw new Error('speculative decoding needs maxDraft >= 1 and minDraft >= 1');
  }

  /**
   * The draft for req's decode row (its tokens are all computed but the last), within `room` tokens
   * of the step's budget. Empty for requests verification cannot serve: grammar (drafts are not checked
   * against it: speculation is off for structured output), logprobs, pooling.
   */
  draftFor(req: EngineRequest, room: number): number[] {
    if (req.grammar !== null || req.embed || req.params.logprobs >= 0) return [];
    // Every kept draft plus the token after it must fit the request's limits.
    const left = Math.min(req.params.maxTokens - req.output.length, req.maxTotalTokens - req.tokens.length) - 1;
    return this.policy(req).next(req.tokens, Math.min(room, left));
  }

  /** What verification kept of req's draft of `drafted` tokens. */
  record(req: EngineRequest, drafted: number, accepted: number): void {
    this.stats.rows++;
    this.stats.drafted += drafted;
    this.stats.accepted += accepted;
    this.policy(req).record(drafted, accepted);
  }

  private policy(req: EngineRequest): DraftPolicy {
    let p = this.policies.get(req);
    if (p === undefined) this.policies.set(req, (p = new DraftPolicy(this.source, this.options)));
    return p;
  }
}

/** `--speculative`: the draft sources by name. */
export const SPECULATIVE_MODES = ['ngram', 'off'] as const;
export type SpeculativeMode = (typeof SPECULATIVE_MODES)[number];

export function parseSpeculativeMode(v: string): SpeculativeMode {
  if ((SPECULATIVE_MODES as readonly string[]).includes(v)) return v as SpeculativeMode;
  throw new Error(`--speculative must be ${SPECULATIVE_MODES.join(' or ')}, got "${v}"`);
}

/**
 * The default for a loaded model: n-gram drafts on the CPU, where verifying k + 1 tokens costs about
 * one decode and a workload without matches loses nothing measurable (docs/speculative.md); off on
 * CUDA until it is measured there.
 */
export function defaultSpeculative(device: 'cpu' | 'cuda'): SpeculativeMode {
  return device === 'cuda' ? 'off' : 'ngram';
}
