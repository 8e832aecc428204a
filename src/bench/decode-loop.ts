// The decode measurement the random-weight decode benches (bench:cuda, bench:moe, gemma4) share: the
// Engine drives the steps (bench-engine.ts) and the bench times them from outside.
import { loadNative } from '../native/binding.js';
import type { NativeModel, NativeSampleParams, NativeStepResult } from '../native/types.js';
import { GREEDY_SAMPLE } from '../engine/sampling-params.js';
import { benchEngine, benchRequest } from './bench-engine.js';

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

/** Submits `concurrency` prompts together (prefilled in one step), lets the engine decode `steps`
 *  steps of all rows together, and returns the decode ms (end of the prefill step to the last step). */
export async function timeDecode(model: NativeModel, o: DecodeLoop): Promise<number> {
  const info = model.info();
  const perRow = Math.ceil((o.prompt + o.steps + 1) / info.blockSize);
  if (perRow * o.concurrency > info.numBlocks) throw new Error(`KV pool too small: need ${perRow * o.concurrency} blocks, the pool has ${info.numBlocks}`);
  let steps = 0;
  let decodeStart = 0;
  let decodeEnd = 0;
  const engine = benchEngine(model, {
    maxNumSeqs: o.concurrency,
    maxBatchedTokens: o.concurrency * o.prompt,
    onStep: (r) => {
      const decode = steps++ > 0;
      o.onTimings?.(r.timings, decode);
      decodeEnd = performance.now();
      if (!decode) decodeStart = decodeEnd;
    },
  });
  const s = { ...GREEDY_SAMPLE, ...o.sample };
  const sampling = { temperature: s.temperature, topP: s.topP, topK: s.topK, minP: s.minP, repetitionPenalty: s.repetitionPenalty };
  try {
    await Promise.all(
      Array.from({ length: o.concurrency }, (_, i) =>
        benchRequest(engine, `${o.idPrefix}-${o.concurrency}-${i}`, Array.from({ length: o.prompt }, (_, k) => o.promptToken(i, k, info.vocabSize)), o.steps + 1, { ...sampling, seed: s.seed + i }),
      ),
    );
  } finally {
    await engine.shutdown(0);
  }
  return decodeEnd - decodeStart;
}

/** Loads `dir` and measures at concurrency 1 then 8, each after a 2-step warm-up that pages in the weights it touches. */
export async function measureAtConcurrencies<F>(
  dir: string,
  load: { threads: number; precision: 'fast' | 'exact'; device?: 'cpu' | 'cuda' },
  steps: number,
  measure: (model: NativeModel, concurrency: number, steps: number) => Promise<F>,
): Promise<F[]> {
  const device = load.device ?? 'cpu';
  const model = loadNative(load.device ? { device } : {}).addon.loadModel(dir, {
    threads: load.threads,
    kvCacheBytes: 256 << 20,
    precision: load.precision,
    ...(load.device ? { device } : {}),
  });
  const info = model.info();
  if (load.device && info.device !== device) {
    model.close();
    throw new Error(`the model loaded on ${String(info.device)}, not ${device}${info.deviceNote ? ` (${info.deviceNote})` : ''}`);
  }
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
