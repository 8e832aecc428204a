// Length invariance, which speculative verification relies on: a token's logits are bit-identical
// whether it is a row of its own (a decode) or the first of a multi-token row (a draft being verified),
// on every fixture, under both precisions.
import { expect, it } from 'vitest';
import { addon, nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT, fixtureNames } from '../helpers/fixtures.js';
it.skipIf(!nativeAvailable())('a decode row and the first token of a multi-token row give the same logits, bit for bit', async () => {
  for (const name of fixtureNames().filter((n) => !n.includes('embedding'))) {
   for (const precision of ['fast', 'exact'] as const) {
    const model = addon().loadModel(`${FIXTURE_ROOT}/${name}`, { threads: 2, kvCacheBytes: 8 << 20, blockSize: 16, precision });
    const prompt = [17, 250, 3, 999, 42, 42, 7, 128, 600, 5, 77, 300, 4, 5, 6, 7, 8, 9, 10, 11];
    const ctx = prompt.length - 1;
    const blockTable = Int32Array.from([0, 1, 2]);
    await model.step({ rows: [{ requestId: 'p', tokens: Int32Array.from(prompt.slice(0, ctx)), positions: Int32Array.from({ length: ctx }, (_, i) => i), blockTable, contextLen: 0 }] });
    const one = (await model.step({ rows: [{ requestId: 'r', tokens: Int32Array.of(prompt[ctx]!), positions: Int32Array.of(ctx), blockTable, contextLen: ctx, wantLogits: true }] })).rows[0]!.logits!;

    for (const n of [2, 3, 5, 9]) {
      const toks = Int32Array.from({ length: n }, (_, i) => (i === 0 ? prompt[ctx]! : 100 + i));
      const multi = (await model.step({ rows: [{ requestId: 'r', tokens: toks, positions: Int32Array.from({ length: n }, (_, i) => ctx + i), blockTable, contextLen: ctx, wantLogits: true }] })).rows[0]!.logits!;
      expect(multi.subarray(0, one.length), `${name} ${precision} n=${n}`).toEqual(one);
    }
    model.close();
   }
  }
}, 120000);
