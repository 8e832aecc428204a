// The defaults every entry point shares (rapid run, rapid chat, rapid serve over HTTP, the engine
// itself), so a request behaves the same whichever way it comes in. A model's generation_config.json
// (text-model.ts reads it) comes before the sampling default here: withSamplingDefaults is the rule.
import type { SamplingInput } from './sampling-params.js';

/** Sampling temperature when neither the request nor the model's generation_config sets one (OpenAI's and vLLM's). */
export const DEFAULT_TEMPERATURE = 1;

/** What a model suggests: its generation_config.json first, the catalog's recommendation below it
 *  (models/catalog.ts samplingDefaults merges the two). */
export interface ModelSampling {
  temperature?: number;
  topP?: number;
  topK?: number;
  minP?: number;
  repetitionPenalty?: number;
}

/** The one rule for run, chat and serve: what the request sets, else the model's, else rapid's default. */
export function withSamplingDefaults(given: SamplingInput, model: ModelSampling): SamplingInput {
  return {
    ...given,
    temperature: given.temperature ?? model.temperature ?? DEFAULT_TEMPERATURE,
    topP: given.topP ?? model.topP,
    topK: given.topK ?? model.topK,
    minP: given.minP ?? model.minP,
    repetitionPenalty: given.repetitionPenalty ?? model.repetitionPenalty,
  };
}

/** The continuous-batching engine's limits when a caller sets none (rapid serve's flags default to these). */
export const ENGINE_DEFAULTS = {
  /** Requests decoded together at most. */
  maxNumSeqs: 16,
  /** Tokens per step at most (prefill chunks + decodes). */
  maxBatchedTokens: 512,
  /** Queued requests at most; more are refused (503). */
  maxWaiting: 256,
  /** Seconds a step (or an image encode) may run before the watchdog fails its requests. */
  stepTimeoutS: 120,
} as const;
