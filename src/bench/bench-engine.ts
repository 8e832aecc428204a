// The Engine as the decode benches run it (the one step driver, as `rapid serve` steps a model): no
// detokenizing, no stop tokens, no prefix cache, and every native step handed to the bench as it
// returns, so the bench measures the engine's steps from outside.
import { Engine } from '../engine/engine.js';
import type { EngineDone } from '../engine/request.js';
import { resolveSamplingParams, type SamplingInput } from '../engine/sampling-params.js';
import type { NativeImageInput, NativeModel, NativeStepResult } from '../native/types.js';

/** Bench rows detokenize nothing: the text is never read. */
const NO_TEXT = { push: () => '', flush: () => '' };

export interface BenchEngineOptions {
  maxNumSeqs: number;
  /** Tokens per step: a whole prompt (or all rows' prompts) for a one-step prefill, else the chunk. */
  maxBatchedTokens: number;
  /** Sees each step's result after it returns, before the engine processes it. */
  onStep: (result: NativeStepResult) => void;
}

/** The watchdog bound of a bench step (the engine's default, 120 s, is for serving). */
const BENCH_STEP_TIMEOUT_MS = 30 * 60_000;

export function benchEngine(model: NativeModel, o: BenchEngineOptions): Engine {
  const watched: NativeModel = {
    info: () => model.info(),
    close: () => model.close(),
    encodeImage: (image) => model.encodeImage(image),
    ...(model.encodeImages ? { encodeImages: (images: NativeImageInput[]) => model.encodeImages!(images) } : {}),
    async step(plan) {
      const r = await model.step(plan); // a row's error fails its request through the engine
      o.onStep(r);
      return r;
    },
  };
  return new Engine({
    model: watched,
    newTextStream: () => NO_TEXT,
    stopTokenIds: [], // every request runs all its tokens
    maxNumSeqs: o.maxNumSeqs,
    maxWaiting: o.maxNumSeqs,
    maxBatchedTokens: o.maxBatchedTokens,
    enablePrefixCache: false, // a repeated prompt is computed again, as each bench run must
    maxPrefillAttention: 0,
    // A one-step prefill of 8192+ tokens on two shared cores runs for minutes: past the serving
    // watchdog's bound, not stuck.
    stepTimeoutMs: BENCH_STEP_TIMEOUT_MS,
  });
}

/** Runs one request of `maxTokens` tokens to its end; throws if it ended early or failed. */
export async function benchRequest(engine: Engine, id: string, promptIds: number[], maxTokens: number, sampling: SamplingInput): Promise<EngineDone> {
  const params = resolveSamplingParams({ ...sampling, maxTokens }, { maxTokens });
  let done: EngineDone | undefined;
  for await (const ev of engine.generate({ id, promptIds, params })) if (ev.type === 'done') done = ev;
  if (done?.usage.completionTokens !== maxTokens) throw new Error(`bench request ${id} ended after ${done?.usage.completionTokens ?? 0} of ${maxTokens} tokens`);
  return done;
}
