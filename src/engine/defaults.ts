// The defaults every entry point shares (rapid run, rapid chat, rapid serve over HTTP, the engine
// itself), so a request behaves the same whichever way it comes in. A model's generation_config.json
// (text-model.ts reads it) comes before the sampling default here.

/** Sampling temperature when neither the request nor the model's generation_config sets one (OpenAI's and vLLM's). */
export const DEFAULT_TEMPERATURE = 1;

/** The continuous-batching engine's limits when a caller sets none (rapid serve's flags default to these). */
export const ENGINE_DEFAULTS = {
  /** Requests decoded together at most. */
  maxNumSeqs: 16,
  /** Tokens per step at most (prefill chunks + decodes). */
  maxBatchedTokens: 512,
  /** Queued requests at most; more are refused (503). */
  maxWaiting: 256,
} as const;
