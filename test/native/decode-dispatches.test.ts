// Decode at batch 1 through the real addon on a random Qwen2.5-0.5B-wide checkpoint (2 layers): the
// step reports its thread-pool dispatches, and the fused path (q/k/v in one pass, gate/up with the GLU)
// needs 5 per layer plus the head, for 4-bit and MLX 8-bit weights alike; --precision exact keeps the
// separate matmuls (8). One thread (no dispatches) picks the same greedy tokens as two. The interleaved
// copies (cpu/gemv_interleaved.h; 4-bit on AVX-512 VNNI and AVX2, 8-bit on AVX2) are built at load, and 16
// sequences at once keep the fusions.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ensureRandomCheckpoint, QWEN25_05B, type Qwen2Shape } from '../../src/bench/random-checkpoint.js';
import type { NativeModel, NativeSampleParams, NativeStepRow } from '../../src/native/types.js';
import { addon } from '../helpers/addon.js';

const SHAPE: Qwen2Shape = { ...QWEN25_05B, layers: 2, vocab: 2048 };
const GREEDY: NativeSampleParams = { temperature: 0, topP: 1, topK: 0, minP: 0, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, seed: 0, counter: 0, logprobs: -1 };
const PROMPT = [11, 22, 33, 44];

/** Prefills PROMPT, then decodes 4 tokens one step each; the decode steps' tokens and dispatches. */
async function decode(model: NativeModel): Promise<{ tokens: number[]; dispatches: number[] }> {
  const row = (ids: number[], at: number): NativeStepRow => ({
    requestId: 'a',
    tokens: Int32Array.from(ids),
    positions: Int32Array.from(ids, (_, i) => at + i),
    blockTable: Int32Array.from({ length: 4 }, (_, i) => i),
    contextLen: at,
    sample: GREEDY,
  });
  let res = await model.step({ rows: [row(PROMPT, 0)] });
  const tokens: number[] = [];
  const dispatches: number[] = [];
  for (let i = 0; i < 4; i++) {
    const tok = res.rows[0]!.token!;
    tokens.push(tok);
    res = await model.step({ rows: [row([tok], PROMPT.length + i)] });
    dispatches.push(res.timings.dispatches ?? -1);
  }
  return { tokens, dispatches };
}

describe('decode pool dispatches (random Qwen2.5-0.5B-wide checkpoint, 2 layers)', () => {
  const root = mkdtempSync(join(tmpdir(), 'rapid-dispatch-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it.each([4, 8] as const)('%d-bit: 5 dispatches per layer plus the head, the same tokens on 1 and 2 threads', async (bits) => {
    const { dir } = ensureRandomCheckpoint(root, SHAPE, { bits, groupSize: 64 });
    const run = async (precision: 'fast' | 'exact') => {
      const model = addon().loadModel(dir, { threads: 2, kvCacheBytes: 8 << 20, precision });
      try {
        return await decode(model);
      } finally {
        model.close();
      }
    };
    const fast = await run('fast');
    // Built at load, so no step pays for a copy (the 4-bit copies of avx512-vnni and avx2: cpu/gemv_interleaved.h).
    expect(fast.dispatches).toEqual(Array(4).fill(SHAPE.layers * 5 + 1));
    // Exact precision runs q, k, v, gate and up as separate dispatches; one row's GLU is too small to split.
    const exact = await run('exact');
    expect(exact.dispatches).toEqual(Array(4).fill(SHAPE.layers * 8 + 1));
    // Fast on one thread (no dispatches) gives the same tokens as on two.
    const model = addon().loadModel(dir, { threads: 1, kvCacheBytes: 8 << 20, precision: 'fast' });
    try {
      const one = await decode(model);
      expect(one.tokens).toEqual(fast.tokens);
      expect(one.dispatches).toEqual([0, 0, 0, 0]);
    } finally {
      model.close();
    }
  }, 120_000);

  // 16 sequences decoding together: with the interleaved GEMM (4-bit: avx512-vnni and avx2; 8-bit: avx2) q/k/v and gate/up+GLU
  // stay one pass each, as at batch 1 (plus one for down's activation quantization, 16 x 4864 values, split
  // over the pool): 6 per layer against exact's 9 (and the row-major GEMM's separate passes, 10).
  it.each([4, 8] as const)('%d-bit at 16 sequences: q/k/v and gate/up fused where the interleaved GEMM runs', async (bits) => {
    const { dir } = ensureRandomCheckpoint(root, SHAPE, { bits, groupSize: 64 });
    const rows = (at: number): NativeStepRow[] =>
      Array.from({ length: 16 }, (_, s) => ({
        requestId: `r${s}`,
        tokens: Int32Array.from(at === 0 ? [5 + s, ...PROMPT.slice(1)] : [3 + s]),
        positions: Int32Array.from(at === 0 ? PROMPT.map((_, i) => i) : [at]),
        blockTable: Int32Array.from([s]),
        contextLen: at,
        sample: GREEDY,
      }));
    const run = async (precision: 'fast' | 'exact') => {
      const model = addon().loadModel(dir, { threads: 2, kvCacheBytes: 32 << 20, precision });
      try {
        await model.step({ rows: rows(0) });
        const d: number[] = [];
        for (let i = 0; i < 3; i++) d.push((await model.step({ rows: rows(PROMPT.length + i) })).timings.dispatches ?? -1);
        return d;
      } finally {
        model.close();
      }
    };
    // 8-bit copies: avx2 only (avx512-vnni keeps its row-major 8-bit kernels and their GEMM).
    const fused = (bits === 4 ? ['avx512-vnni', 'avx2'] : ['avx2']).includes(addon().systemInfo().kernel);
    expect(await run('fast')).toEqual(Array(3).fill(SHAPE.layers * (fused ? 6 : 10) + 1));
    expect(await run('exact')).toEqual(Array(3).fill(SHAPE.layers * 9 + 1));
  }, 120_000);
});
