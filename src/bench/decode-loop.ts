// The decode measurement the random-weight decode benches (bench:cuda, bench:moe, gemma4) share: the
// Engine drives the steps (the one step driver, as `rapid serve` runs them) and the bench watches
// each native step from outside, through a model whose step reports its timings.
import { loadNative } from '../native/binding.js';
import type { NativeModel, NativeSampleParams, NativeStepPlan, NativeStepResult } from '../native/types.js';
import { Engine } from '../engine/engine.js';
import type { EngineDone } from '../engine/request.js';
import { GREEDY_SAMPLE, resolveSamplingParams } from '../engine/sampling-params.js';

export interface DecodeLoop {
  concurrency: number;
  steps: number;
  prompt: number;
  /** Request ids are `${idPrefix}-${concurrency}-${row}`. */
  idPrefix: string;
  /** Token `k` of row `row`'s prompt. */
  promptToken: (row: number, k: number, vocabSize: number) => number;
  /** Sees every step's timings; `decode` is false for the prefill step. */
  onTimings?: (timings: NativeStepResult['timings'], decode: boolean) => void;
  /** Sampling of every token (default greedy); row `i` draws with seed `seed + i`. */
  sample?: Partial<Omit<NativeSampleParams, 'counter'>>;
}

/** Bench rows detokenize nothing: the text is never read. */
const NO_TEXT = { push: () => '', flush: () => '' };

/** Submits `concurrency` prompts together (prefilled in one step), lets the engine decode `steps`
 *  steps of all rows together, and returns the decode ms (end of the prefill step to the last step). */
export async function timeDecode(model: NativeModel, o: DecodeLoop): Promise<number> {
  const info = model.info();
  const perRow = Math.ceil((o.prompt + o.steps + 1) / info.blockSize);
  if (perRow * o.concurrency > info.numBlocks) throw new Error(`KV pool too small: need ${perRow * o.concurrency} blocks, the pool has ${info.numBlocks}`);
  let steps = 0;
  let decodeStart = 0;
  let decodeEnd = 0;
  const watched: NativeModel = {
    info: () => info,
    close: () => model.close(),
    encodeImage: (image) => model.encodeImage(image),
    async step(plan: NativeStepPlan) {
      const r = await model.step(plan); // a row's error fails its request through the engine
      const decode = steps++ > 0;
      o.onTimings?.(r.timings, decode);
      if (decode) decodeEnd = performance.now();
      else decodeStart = decodeEnd = performance.now();
      return r;
    },
  };
  const engine = new Engine({
    model: watched,
    newTextStream: () => NO_TEXT,
    stopTokenIds: [], // every row decodes all its steps
    maxNumSeqs: o.concurrency,
    maxWaiting: o.concurrency,
    maxBatchedTokens: o.concurrency * o.prompt,
    enablePrefixCache: false, // rows that share a prompt still compute it, as the bench always did
    maxPrefillAttention: 0,
  });
  const s = { ...GREEDY_SAMPLE, ...o.sample };
  try {
    const runs = Array.from({ length: o.concurrency }, async (_, i): Promise<EngineDone | undefined> => {
      const params = resolveSamplingParams(
        { temperature: s.temperature, topP: s.topP, topK: s.topK, minP: s.minP, repetitionPenalty: s.repetitionPenalty, seed: s.seed + i, maxTokens: o.steps + 1 },
        { maxTokens: o.steps + 1 },
      );
      const promptIds = Array.from({ length: o.prompt }, (_, k) => o.promptToken(i, k, info.vocabSize));
      let done: EngineDone | undefined;
      for await (const ev of engine.generate({ id: `${o.idPrefix}-${o.concurrency}-${i}`, promptIds, params })) if (ev.type === 'done') done = ev;
      return done;
    });
    const done = await Promise.all(runs);
    if (done.some((d) => d?.usage.completionTokens !== o.steps + 1)) throw new Error('a bench row ended before its last step');
  } finally {
    await engine.shutdown(0);
  }
  return decodeEnd - decodeStart;
}

/** Loads `dir` and measures at concurrency 1 then 8, each after a 2-step warm-up that pages in the weights it touches. */
export async function measureAtConcurrencies<F>(
  dir: string,
  load: { threads: number; precision: 'fast' | 'exact' },
  steps: number,
  measure: (model: NativeModel, concurrency: number, steps: number) => Promise<F>,
): Promise<F[]> {
  const model = loadNative().addon.loadModel(dir, { threads: load.threads, kvCacheBytes: 256 << 20, precision: load.precision });
  try {
    const figures: F[] = [];
    for (const c of [1, 8]) {
      await measure(model, c, 2); // warm-up
      figures.push(await measure(model, c, steps));
    }
    return figures;
  } finally {
    model.close();
  }
}
