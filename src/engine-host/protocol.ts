// The IPC between the HTTP process and its engine child (`rapid serve --engine-process child`). It
// runs over child_process's channel with advanced serialization (structured clone), so typed
// arrays (image pixels, mRoPE positions) cross as they are. Token output is batched: one message
// per engine step carries every row's deltas, ends and failures.
import { EngineRequestError, type EngineErrorCode } from '../engine/engine-errors.js';
import { InvalidRequestError, EngineUnavailableError } from '../errors/request-errors.js';
import type { EngineHealth, EngineStats, SubmitOptions } from '../engine/engine.js';
import type { GrammarHealth } from '../engine/grammar/grammar-service.js';
import type { RequestGrammarOptions } from '../engine/grammar/guarded-grammar.js';
import type { GrammarSpec } from '../engine/grammar/grammar-spec.js';
import type { EngineDone } from '../engine/request.js';
import type { TextEngineOptions } from '../engine/text-engine.js';
import type { NativeLoadOptions, NativeModelInfo, NativeTopLogprob } from '../native/types.js';

/** What the child needs to open the model and build its engine (functions stay in the parent). */
export interface ChildInit {
  dir: string;
  load: NativeLoadOptions;
  engine: Omit<TextEngineOptions, 'log' | 'faults'>;
}

/** An error as it crosses the channel; rebuilt as the same class on the other side. */
export interface WireError {
  kind: 'invalid' | 'unavailable' | 'request' | 'other';
  message: string;
  param?: string;
  code?: EngineErrorCode;
  reason?: EngineUnavailableError['reason'];
  retryAfter?: number;
}

/** One token of one request: [request id, text, token, logprob?, top logprobs?]. */
export type WireDelta = [id: string, text: string, token: number, logprob?: number, top?: NativeTopLogprob[]];

export type ParentMessage =
  | { t: 'init'; init: ChildInit }
  /** The submit options as given (every field, so new ones cross too), the grammar as its handle. */
  | { t: 'submit'; id: string; options: Omit<SubmitOptions, 'grammar' | 'id'>; grammar?: number }
  | { t: 'abort'; id: string }
  /** Compile a response format in the child; answered by `grammar` with the matcher's handle. */
  | { t: 'grammar'; rid: number; format: GrammarSpec; options: RequestGrammarOptions }
  /** A matcher that will never be submitted (the request failed before it was queued). */
  | { t: 'grammar-drop'; handle: number }
  | { t: 'shutdown'; graceMs: number };

/** What the child pushes about itself (the parent answers /health, /v1/status and /metrics from the last one). */
export interface ChildSnapshot {
  health: EngineHealth;
  ready: EngineHealth;
  stats: EngineStats;
  grammar: GrammarHealth | null;
}

export type ChildMessage =
  /** loadMs: opening the model and building the engine, inside the child's start. */
  | { t: 'ready'; info: NativeModelInfo; snapshot: ChildSnapshot; loadMs: number }
  | { t: 'fatal'; message: string }
  | { t: 'log'; line: string }
  | { t: 'accepted'; id: string }
  | { t: 'rejected'; id: string; error: WireError }
  | { t: 'grammar'; rid: number; handle?: number; error?: WireError }
  /** One engine step's output: deltas in order, then requests that ended or failed. */
  | { t: 'step'; deltas: WireDelta[]; done: EngineDone[]; doneIds: string[]; failed: [id: string, error: WireError][] }
  | { t: 'snapshot'; snapshot: ChildSnapshot };

export function toWire(err: unknown): WireError {
  if (err instanceof InvalidRequestError) return { kind: 'invalid', message: err.message, ...(err.param !== undefined ? { param: err.param } : {}) };
  if (err instanceof EngineUnavailableError) return { kind: 'unavailable', message: err.message, reason: err.reason, retryAfter: err.retryAfterSeconds };
  if (err instanceof EngineRequestError) return { kind: 'request', message: err.message, code: err.code };
  return { kind: 'other', message: err instanceof Error ? err.message : String(err) };
}

export function fromWire(w: WireError): Error {
  switch (w.kind) {
    case 'invalid':
      return new InvalidRequestError(w.message, w.param);
    case 'unavailable':
      return new EngineUnavailableError(w.message, w.reason ?? 'unhealthy', w.retryAfter);
    case 'request':
      return new EngineRequestError(w.message, w.code ?? 'step_failed');
    default:
      return new Error(w.message);
  }
}
