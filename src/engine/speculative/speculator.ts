// Which decode rows carry a draft and how long it is: the policy over a DraftSource. Per request, k
// adapts to what verification keeps (all kept: k grows; a miss: k shrinks to what was kept + 1), and
// a request whose drafts keep failing stops drafting for a while (the cool-down doubles each time),
// so a workload where nothing matches pays only the lookup.
import type { EngineRequest } from '../request.js';
import type { DraftSource } from './draft-source.js';

export interface SpeculatorOptions {
  /** Draft tokens per row at most. */
  maxDraft: number;
  /** Below this share of drafted tokens kept (over the last drafts of a request), it pauses drafting. */
  minAcceptance: number;
  /** Steps a request first pauses for; doubles on each pause, up to maxPause. */
  pauseSteps: number;
  maxPause: number;
}

export const SPECULATOR_DEFAULTS: SpeculatorOptions = { maxDraft: 8, minAcceptance: 0.25, pauseSteps: 8, maxPause: 256 };

/** A request's speculation state (kept beside the request, dropped with it). */
interface DraftState {
  k: number;
  /** Exponential averages of drafted and kept tokens per verified row. */
  drafted: number;
  kept: number;
  pausedUntil: number;
  pause: number;
  steps: number;
}

export interface SpeculationStats {
  /** Rows verified with a draft, draft tokens sent, and draft tokens kept. */
  rows: number;
  drafted: number;
  accepted: number;
}

export class Speculator {
  readonly options: SpeculatorOptions;
  private readonly states = new WeakMap<EngineRequest, DraftState>();
  readonly stats: SpeculationStats = { rows: 0, drafted: 0, accepted: 0 };

  constructor(
    readonly source: DraftSource,
    options: Partial<SpeculatorOptions> = {},
  ) {
    this.options = { ...SPECULATOR_DEFAULTS, ...options };
    if (!(this.options.maxDraft >= 1)) throw new Error('speculative decoding needs maxDraft >= 1');
  }

  /**
   * The draft for req's decode row (its tokens are all computed but the last), within `room` tokens
   * of the step's budget. Empty for requests verification cannot serve: grammar (drafts are not checked
   * against it: speculation is off for structured output), logprobs, pooling.
   */
  draftFor(req: EngineRequest, room: number): number[] {
    if (req.grammar !== null || req.embed || req.params.logprobs >= 0) return [];
    const st = this.state(req);
    st.steps++;
    if (st.steps < st.pausedUntil) return [];
    // Every kept draft plus the token after it must fit the request's limits.
    const left = Math.min(req.params.maxTokens - req.output.length, req.maxTotalTokens - req.tokens.length) - 1;
    const k = Math.min(st.k, room, left);
    if (k <= 0) return [];
    return this.source.propose(req.tokens, k);
  }

  /** What verification kept of a draft of `drafted` tokens. */
  record(req: EngineRequest, drafted: number, accepted: number): void {
    const st = this.state(req);
    this.stats.rows++;
    this.stats.drafted += drafted;
    this.stats.accepted += accepted;
    st.k = accepted === drafted ? Math.min(this.options.maxDraft, st.k * 2) : Math.max(1, accepted + 1);
    st.drafted = 0.7 * st.drafted + 0.3 * drafted;
    st.kept = 0.7 * st.kept + 0.3 * accepted;
    if (st.kept < this.options.minAcceptance * st.drafted) {
      st.pausedUntil = st.steps + st.pause;
      st.pause = Math.min(this.options.maxPause, st.pause * 2);
      st.drafted = st.kept = 0;
    } else if (accepted > 0) st.pause = this.options.pauseSteps;
  }

  private state(req: EngineRequest): DraftState {
    let st = this.states.get(req);
    if (st === undefined) {
      st = { k: Math.min(4, this.options.maxDraft), drafted: 0, kept: 0, pausedUntil: 0, pause: this.options.pauseSteps, steps: 0 };
      this.states.set(req, st);
    }
    return st;
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
