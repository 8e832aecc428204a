// The decode measurement the random-weight decode benches (bench:moe, gemma4) share.
import { loadNative } from '../native/binding.js';
import type { NativeModel, NativeSampleParams, NativeStepPlan, NativeStepResult, NativeStepRow } from '../native/types.js';
import { GREEDY_SAMPLE } from '../engine/sampling-params.js';
import { pollsSteps, pollWhile } from '../native/poll-while.js';

export interface DecodeLoop {
  concurrency: number;
  steps: number;
  prompt: number;
  /** Row ids are `${idPrefix}-${concurrency}-${row}`. */
  idPrefix: string;
  /** Token `k` of row `row`'s prompt. */
  promptToken: (row: number, k: number, vocabSize: number) => number;
  /** Sees every step's timings after its rows are checked; `decode` is false for the prefill step. */
  onTimings?: (timings: NativeStepResult['timings'], decode: boolean) => void;
  /** Sampling of every token (default greedy); row `i` draws with seed `seed + i`. */
  sample?: Partial<Omit<NativeSampleParams, 'counter'>>;
}

/** Prefills `concurrency` prompts in one step, then decodes `steps` steps of all rows together; returns the decode ms. */
export async function timeDecode(model: NativeModel, o: DecodeLoop): Promise<number> {
  const info = model.info();
  // As the engine steps a CUDA model: the event loop polls while the step runs.
  const step = pollsSteps(info.device) ? (plan: NativeStepPlan) => pollWhile(model.step(plan)) : (plan: NativeStepPlan) => model.step(plan);
  let nextBlock = 0;
  const need = Math.ceil((o.prompt + o.steps + 1) / info.blockSize);
  const seqs = Array.from({ length: o.concurrency }, (_, i) => ({
    id: `${o.idPrefix}-${o.concurrency}-${i}`,
    table: Int32Array.from({ length: need }, () => nextBlock++),
    ctx: 0,
    last: 0,
  }));
  if (nextBlock > info.numBlocks) throw new Error(`KV pool too small: need ${nextBlock} blocks`);
  const sample = (row: number, counter: number): NativeSampleParams => ({ ...GREEDY_SAMPLE, ...o.sample, seed: (o.sample?.seed ?? 0) + row, counter });
  const run = async (rows: NativeStepRow[], decode: boolean): Promise<void> => {
    const r = await step({ rows });
    for (const row of r.rows) {
      if (row.error) throw new Error(`step failed: ${row.error}`);
      seqs.find((x) => x.id === row.requestId)!.last = row.token!;
    }
    o.onTimings?.(r.timings, decode);
  };
  await run(
    seqs.map((s, i) => {
      const tokens = Int32Array.from({ length: o.prompt }, (_, k) => o.promptToken(i, k, info.vocabSize));
      return { requestId: s.id, tokens, positions: Int32Array.from(tokens, (_, k) => k), blockTable: s.table, contextLen: 0, sample: sample(i, 0) };
    }),
    false,
  );
  for (const s of seqs) s.ctx = o.prompt;
  const t0 = performance.now();
  for (let k = 0; k < o.steps; k++) {
    await run(
      seqs.map((s, i) => ({
        requestId: s.id,
        tokens: Int32Array.of(s.last),
        positions: Int32Array.of(s.ctx),
        blockTable: s.table,
        contextLen: s.ctx,
        sample: sample(i, k + 1),
      })),
      true,
    );
    for (const s of seqs) s.ctx++;
  }
  return performance.now() - t0;
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
