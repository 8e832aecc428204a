// Errors a request can end with inside the engine. Each carries a code the server maps to an HTTP
// status (before a stream starts) or to an SSE error event (after).
import { StepError } from '../errors/request-errors.js';

export type EngineErrorCode =
  | 'step_failed' // the forward pass of a step threw
  | 'sampler_failed' // the native side returned an error for this row
  | 'detokenizer_failed' // output processing threw for this request
  | 'watchdog' // a step did not return within the bound
  | 'kv_cache_full' // this request alone cannot fit in the KV pool
  | 'encoder_failed' // the vision encoder failed for one of this request's images
  | 'grammar_failed' // a constrained request's grammar can no longer complete (or rejected a token)
  | 'shutdown' // the engine stopped before the request finished
  | 'engine_crashed'; // the engine's process died (--engine-process child): it restarts, the request is lost

/** A terminal failure of one request (StepError, so callers of generate() treat it alike). */
export class EngineRequestError extends StepError {
  constructor(
    message: string,
    readonly code: EngineErrorCode,
  ) {
    super(message);
    this.name = 'EngineRequestError';
  }
}

/** A constrained request whose grammar allows no continuation (every path that samples under a grammar). */
export function grammarDeadEnd(): EngineRequestError {
  return new EngineRequestError('the output can no longer satisfy the requested format (grammar dead end)', 'grammar_failed');
}
