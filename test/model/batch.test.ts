// Batch invariance: a request's greedy tokens do not depend on its neighbours — two prompts in one
// step, mixed prefill + decode rows, a neighbour joining mid-stream — under both precisions.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NativeModel } from '../../src/native/types.js';
import { addon } from '../helpers/addon.js';
import { fixtureNames, loadFixture } from '../helpers/fixtures.js';
import { BlockAllocator, GREEDY, runSequences } from '../helpers/runner.js';

// One dense and one quantized fixture per family keeps the run short; all fixtures pass parity.
const names = fixtureNames().filter((n) => n.endsWith('-f32') || n.endsWith('-q4'));

describe.each(names)('%s batch invariance', (name) => {
  const fx = loadFixture(name);
  const [a, b] = [fx.ref.prompts[0]!, fx.ref.prompts[1]!];
  for (const precision of ['exact', 'fast'] as const) {
    describe(precision, () => {
      let model: NativeModel;
      let soloA: number[];
      let soloB: number[];
      beforeAll(async () => {
        model = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 8 << 20, precision });
        soloA = (await runSequences(model, [{ id: 'a', prompt: a.ids, maxTokens: 16 }])).get('a')!.tokens;
        soloB = (await runSequences(model, [{ id: 'b', prompt: b.ids, maxTokens: 16 }])).get('b')!.tokens;
      });
      afterAll(() => model.close());

      it('two prompts prefilled and decoded in the same steps', async () => {
        const out = await runSequences(model, [
          { id: 'a', prompt: a.ids, maxTokens: 16 },
          { id: 'b', prompt: b.ids, maxTokens: 16 },
        ]);
        expect(out.get('a')!.tokens).toEqual(soloA);
        expect(out.get('b')!.tokens).toEqual(soloB);
      });

      it('a prefix shared through read-only KV blocks gives the same tokens as a cold run', async () => {
        // B = A's first 32 tokens (2 full blocks of 16) + its own suffix; B reads A's blocks.
        const info = model.info();
        const bs = info.blockSize;
        const long = fx.ref.prompts.reduce((x, y) => (y.ids.length > x.ids.length ? y : x)).ids;
        expect(long.length).toBeGreaterThan(2 * bs);
        const prefix = long.slice(0, 2 * bs);
        const suffix = b.ids.slice(0, 9);
        const alloc = new BlockAllocator(bs, info.numBlocks);
        const cold = (await runSequences(model, [{ id: 'b', prompt: [...prefix, ...suffix], maxTokens: 12 }], alloc)).get('b')!.tokens;
        const tableA: number[] = [];
        alloc.grow(tableA, prefix.length);
        await model.step({ rows: [{ requestId: 'a', tokens: Int32Array.from(prefix), positions: Int32Array.from(prefix, (_, i) => i), blockTable: Int32Array.from(tableA), contextLen: 0 }] });
        const tableB = [...tableA];
        const out: number[] = [];
        let toks = suffix;
        let ctx = prefix.length;
        for (let i = 0; i < 12; i++) {
          alloc.grow(tableB, ctx + toks.length);
          const r = (await model.step({
            rows: [{ requestId: 'b', tokens: Int32Array.from(toks), positions: Int32Array.from(toks, (_, j) => ctx + j), blockTable: Int32Array.from(tableB), contextLen: ctx, sample: { ...GREEDY, counter: i } }],
          })).rows[0]!;
          expect(r.error).toBeUndefined();
          out.push(r.token!);
          ctx += toks.length;
          toks = [r.token!];
        }
        expect(out).toEqual(cold);
      });

      it('mixed prefill chunks and decode rows, neighbour joining mid-stream', async () => {
        const out = await runSequences(model, [
          { id: 'a', prompt: a.ids, maxTokens: 16 },
          { id: 'b', prompt: b.ids, maxTokens: 16, chunk: 5, startStep: 3 },
          { id: 'a2', prompt: a.ids, maxTokens: 8, chunk: 11, startStep: 6 },
        ]);
        expect(out.get('a')!.tokens).toEqual(soloA);
        expect(out.get('b')!.tokens).toEqual(soloB);
        expect(out.get('a2')!.tokens).toEqual(soloA.slice(0, 8));
      });
    });
  }
});
