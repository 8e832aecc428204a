// Gemma 4 decode at batch 1 through the real addon on a random E2B-wide checkpoint (6 layers alternating sliding
// and full, 2 KV-shared with the double-wide MLP): the op path's gated MLP (ops::Backend::gated_mlp) runs gate, up and the GLU in one pool
// dispatch under --precision fast (one quantization of x), where exact keeps gate and up apart: fast takes exactly
// one dispatch per layer fewer. One thread (no dispatches) picks the same greedy tokens as two.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ensureGemma4Checkpoint, GEMMA4_E2B, type Gemma4Shape } from '../../src/bench/gemma4.js';
import type { NativeSampleParams, NativeStepRow } from '../../src/native/types.js';
import { addon } from '../helpers/addon.js';

const SHAPE: Gemma4Shape = { ...GEMMA4_E2B, layers: 6, fullEvery: 2, kvShared: 2, vocab: 2048 };
const GREEDY: NativeSampleParams = { temperature: 0, topP: 1, topK: 0, minP: 0, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, seed: 0, counter: 0, logprobs: -1 };
const PROMPT = [11, 22, 33, 44];

describe('Gemma 4 decode pool dispatches (random E2B-wide checkpoint, 6 layers)', () => {
  const root = mkdtempSync(join(tmpdir(), 'rapid-g4-dispatch-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('fast: gate/up and the GLU in one dispatch per layer; the same tokens on 1 and 2 threads', async () => {
    const { dir } = ensureGemma4Checkpoint(root, SHAPE);
    const run = async (precision: 'fast' | 'exact', threads: number) => {
      const model = addon().loadModel(dir, { threads, kvCacheBytes: 16 << 20, precision });
      try {
        const row = (ids: number[], at: number): NativeStepRow => ({
          requestId: 'a', tokens: Int32Array.from(ids), positions: Int32Array.from(ids, (_, i) => at + i),
          blockTable: Int32Array.from({ length: 4 }, (_, i) => i), contextLen: at, sample: GREEDY,
        });
        let res = await model.step({ rows: [row(PROMPT, 0)] });
        const tokens: number[] = [];
        const dispatches: number[] = [];
        for (let i = 0; i < 3; i++) {
          tokens.push(res.rows[0]!.token!);
          res = await model.step({ rows: [row([tokens[i]!], PROMPT.length + i)] });
          dispatches.push(res.timings.dispatches ?? -1);
        }
        return { tokens, dispatches };
      } finally {
        model.close();
      }
    };
    const fast = await run('fast', 2);
    const exact = await run('exact', 2);
    expect(new Set(fast.dispatches).size).toBe(1);
    expect(exact.dispatches.map((d, i) => d - fast.dispatches[i]!)).toEqual(Array(3).fill(SHAPE.layers));
    const one = await run('fast', 1);
    expect(one.tokens).toEqual(fast.tokens);
    expect(one.dispatches).toEqual([0, 0, 0]);
  }, 300_000);
});
