// The KV cache's element types (--kv-cache-dtype, docs/kv-cache.md), on the real addon and fixtures:
// - the native suite (native/test/kv_cache_test.cpp): store/load round-trip bounds, F16C == portable,
//   attention over a 16-bit/int8 pool bit-identical to f32 attention over the same rounded values;
// - parity per dtype under exact precision (f32 activations, so the KV type is the only change):
//   logits vs transformers within the stated tolerance, greedy agreement reported (the table in the docs);
// - batch invariance and prefix-cache exactness per dtype; capacity per dtype; the defaults.
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { KvCacheDtype, NativeModel } from '../../src/native/types.js';
import { addon } from '../helpers/addon.js';
import { fixtureNames, loadFixture, maxAbsDiff, refRow } from '../helpers/fixtures.js';
import { buildAndRunNativeSuite, hasCompiler, nativeSources, NATIVE_SRC } from '../helpers/native-suite.js';
import { runSequences } from '../helpers/runner.js';

const DTYPES: readonly KvCacheDtype[] = ['f32', 'f16', 'bf16', 'int8'];
// max |logit diff| / max(1, max|logit|) vs transformers, exact precision. f32 is the parity suite's 1e-3;
// the others are the measured worst over these fixtures (docs/kv-cache.md) with about 2x headroom.
const TOL: Record<KvCacheDtype, number> = { f32: 1e-3, f16: 3e-3, bf16: 2e-2, int8: 4e-2 };
const dense = fixtureNames().filter((n) => n.endsWith('-f32') && !n.includes('embedding'));
const report: string[] = [];

afterAll(() => {
  if (report.length) console.log(`KV dtype parity (exact precision):\n${report.join('\n')}`);
});

describe.skipIf(!hasCompiler)('KV conversion suite', () => {
  it('builds warning-free; round trips, F16C, attention equivalence hold', () => {
    const layers = ['attention.cpp', 'attention_tile.cpp', 'vec_math.cpp'].map((f) => join(NATIVE_SRC, 'layers', f));
    buildAndRunNativeSuite('kv_cache_test', [...nativeSources('kv'), ...layers, join(NATIVE_SRC, 'cpu', 'threadpool.cpp')]);
  }, 240_000);
});

describe.each(dense)('%s', (name) => {
  const fx = loadFixture(name);
  it.each(DTYPES)('kv %s: logits match transformers within its tolerance (exact precision)', async (dtype) => {
    const model: NativeModel = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 8 << 20, precision: 'exact', kvCacheDtype: dtype });
    try {
      expect(model.info().kvCacheDtype).toBe(dtype);
      let worst = 0;
      let agree = 0;
      let total = 0;
      for (let p = 0; p < fx.ref.prompts.length; p++) {
        const pr = fx.ref.prompts[p]!;
        const out = (await runSequences(model, [{ id: `p${p}`, prompt: pr.ids, maxTokens: pr.greedy.length, chunk: 7, logitRows: pr.logits_rows }])).get(`p${p}`)!;
        expect(out.errors).toEqual([]);
        const scale = Math.max(1, pr.max_abs_logit);
        for (let j = 0; j < out.logits.length; j++) {
          if (j > 0 && out.tokens[j - 1] !== pr.greedy[j - 1]) break; // comparable while the tokens agree
          const d = maxAbsDiff(out.logits[j]!, refRow(fx, p, j)) / scale;
          worst = Math.max(worst, d);
          expect(d, `prompt ${p} row ${j}`).toBeLessThanOrEqual(TOL[dtype]);
        }
        let k = 0;
        while (k < pr.greedy.length && out.tokens[k] === pr.greedy[k]) k++;
        agree += k;
        total += pr.greedy.length;
      }
      report.push(`| ${name} | ${dtype} | ${worst.toExponential(2)} | ${agree}/${total} |`);
      if (dtype === 'f32') expect(agree).toBe(total);
    } finally {
      model.close();
    }
  }, 120_000);
});

describe.each(['qwen3-f32', 'gemma3-q4'])('%s batch invariance per dtype', (name) => {
  const fx = loadFixture(name);
  const [a, b] = [fx.ref.prompts[0]!, fx.ref.prompts[1]!];
  it.each(DTYPES)('kv %s: tokens alone = tokens batched, joining mid-stream, chunked', async (dtype) => {
    const model = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 8 << 20, kvCacheDtype: dtype });
    try {
      const run = async (specs: Parameters<typeof runSequences>[1]) => {
        const out = await runSequences(model, specs);
        for (const o of out.values()) expect(o.errors).toEqual([]);
        return out;
      };
      const soloA = (await run([{ id: 'a', prompt: a.ids, maxTokens: 16 }])).get('a')!.tokens;
      const soloB = (await run([{ id: 'b', prompt: b.ids, maxTokens: 16 }])).get('b')!.tokens;
      const both = await run([
        { id: 'a', prompt: a.ids, maxTokens: 16, chunk: 5 },
        { id: 'b', prompt: b.ids, maxTokens: 16, startStep: 3 },
      ]);
      expect(both.get('a')!.tokens).toEqual(soloA);
      expect(both.get('b')!.tokens).toEqual(soloB);
    } finally {
      model.close();
    }
  }, 120_000);
});

describe('capacity and defaults', () => {
  const dir = loadFixture('qwen3-f32').dir;
  const info = (o: Parameters<ReturnType<typeof addon>['loadModel']>[1]) => {
    const m = addon().loadModel(dir, { threads: 1, kvCacheBytes: 8 << 20, ...o });
    try {
      return m.info();
    } finally {
      m.close();
    }
  };

  it('one budget holds 2x f32 tokens in 16 bits and >= 3.5x in int8', () => {
    const blocks = Object.fromEntries(DTYPES.map((d) => [d, info({ kvCacheDtype: d }).numBlocks])) as Record<KvCacheDtype, number>;
    expect(blocks.f16).toBe(2 * blocks.f32);
    expect(blocks.bf16).toBe(2 * blocks.f32);
    expect(blocks.int8).toBeGreaterThanOrEqual(3.5 * blocks.f32);
  });

  it('defaults: f16 on the CPU, f32 under exact precision unless named', () => {
    expect(info({}).kvCacheDtype).toBe('f16');
    expect(info({ precision: 'exact' }).kvCacheDtype).toBe('f32');
    expect(info({ precision: 'exact', kvCacheDtype: 'int8' }).kvCacheDtype).toBe('int8');
  });

  it('an unknown dtype is refused naming the accepted ones', () => {
    expect(() => info({ kvCacheDtype: 'fp8' as KvCacheDtype })).toThrow(/'f32', 'f16', 'bf16' or 'int8', got 'fp8'/);
  });
});
