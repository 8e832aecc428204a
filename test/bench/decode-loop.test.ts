// The decode loop the GPU/MoE benches time, through the Engine, without a model: every row of every step carries the sampling asked
// for (greedy by default; with a temperature, each row its own seed and the token index as counter), decode
// rows feed back the previous token at the next position, and a too-small KV pool is an error up front.
import { describe, expect, it } from 'vitest';
import { timeDecode } from '../../src/bench/decode-loop.js';
import type { NativeModel, NativeStepPlan, NativeStepResult } from '../../src/native/types.js';

/** A stand-in model: records each step's rows and answers token 1000 + step * 10 + row. */
function recorder(numBlocks: number): { model: NativeModel; steps: NativeStepPlan[] } {
  const steps: NativeStepPlan[] = [];
  const model = {
    info: () => ({ blockSize: 16, numBlocks, vocabSize: 50_000, contextLength: 4096, device: 'cpu' }),
    step: async (req: NativeStepPlan): Promise<NativeStepResult> => {
      steps.push(req);
      const k = steps.length - 1;
      return { rows: req.rows.map((r, i) => ({ requestId: r.requestId, token: 1000 + k * 10 + i })), timings: { forwardMs: 1 } } as unknown as NativeStepResult;
    },
  } as unknown as NativeModel;
  return { model, steps };
}

describe('timeDecode', () => {
  it('samples greedily by default and feeds each row its last token at the next position', async () => {
    const { model, steps } = recorder(64);
    await timeDecode(model, { concurrency: 2, steps: 3, prompt: 5, idPrefix: 't', promptToken: (i, k) => i * 100 + k });
    expect(steps).toHaveLength(4); // prefill + 3 decode steps
    expect(Array.from(steps[0]!.rows[1]!.tokens)).toEqual([100, 101, 102, 103, 104]);
    for (const [k, step] of steps.entries())
      for (const row of step.rows) expect(row.sample).toMatchObject({ temperature: 0, topP: 1, topK: 0, counter: k });
    expect(Array.from(steps[2]!.rows[1]!.tokens)).toEqual([1011]); // row 1's token from step 1
    expect(Array.from(steps[2]!.rows[1]!.positions)).toEqual([6]);
  });

  it('passes a temperature through with a distinct seed per row', async () => {
    const { model, steps } = recorder(64);
    await timeDecode(model, { concurrency: 3, steps: 2, prompt: 4, idPrefix: 't', promptToken: () => 7, sample: { temperature: 0.8, seed: 40 } });
    expect(steps[2]!.rows.map((r) => [r.sample?.temperature, r.sample?.seed, r.sample?.counter])).toEqual([
      [0.8, 40, 2],
      [0.8, 41, 2],
      [0.8, 42, 2],
    ]);
  });

  it('refuses a KV pool too small for the rows before stepping', async () => {
    const { model, steps } = recorder(3);
    await expect(timeDecode(model, { concurrency: 4, steps: 8, prompt: 16, idPrefix: 't', promptToken: () => 1 })).rejects.toThrow(/KV pool too small/);
    expect(steps).toHaveLength(0);
  });
});
