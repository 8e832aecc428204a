// `rapid run` and doctor's smoke test: one request through the Engine `rapid serve` runs (same
// scheduler, same KV block manager, same limits), in this process and without HTTP, so a prompt
// gives the same tokens whichever way it comes in.
import { ENGINE_DEFAULTS } from '../engine/defaults.js';
import type { SubmitOptions } from '../engine/engine.js';
import type { EngineDone } from '../engine/request.js';
import { createTextEngine, type TextEngineOptions } from '../engine/text-engine.js';
import type { TextModel } from '../engine/text-model.js';

export interface OneRequestTimings {
  /** Submit to first token: the prompt's forward (and image encoding), queueing excluded. */
  prefillMs: number;
  /** First token to the last. */
  decodeMs: number;
  prefillTokensPerSecond: number;
  decodeTokensPerSecond: number;
}

export interface OneRequestResult {
  done: EngineDone;
  timings: OneRequestTimings;
  /** Milliseconds the vision encoder ran for this request's images. */
  imageEncodeMs: number;
}

/** What `rapid run` may set on its one-request engine. */
export type OneRequestEngineOptions = Pick<TextEngineOptions, 'speculative' | 'stepTimeoutMs'>;

/** Runs `request` to its end on a fresh engine over `model`; `onText` gets each streamed piece. */
export async function runOneRequest(model: TextModel, request: SubmitOptions, onText: (text: string) => void = () => undefined, options: OneRequestEngineOptions = {}): Promise<OneRequestResult> {
  // Serve's token budget per step, so prefill chunks (and their float sums) are the server's.
  const engine = createTextEngine(model, { maxNumSeqs: 1, maxWaiting: 1, maxBatchedTokens: ENGINE_DEFAULTS.maxBatchedTokens, ...options });
  let done: EngineDone | undefined;
  try {
    for await (const ev of engine.generate(request)) {
      if (ev.type === 'delta') onText(ev.text);
      else done = ev;
    }
  } finally {
    await engine.shutdown(0);
  }
  if (!done) throw new Error('generation ended without a result');
  const t = done.timings;
  const prefillMs = Math.max(0, t.ttftMs - t.queueMs);
  const decodeMs = Math.max(0, t.totalMs - t.ttftMs);
  return {
    done,
    imageEncodeMs: engine.stats().encoderCache.encodeMs,
    timings: {
      prefillMs,
      decodeMs,
      prefillTokensPerSecond: prefillMs > 0 ? (done.usage.promptTokens / prefillMs) * 1000 : 0,
      decodeTokensPerSecond: t.decodeTokensPerSecond,
    },
  };
}
