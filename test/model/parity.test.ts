// Every fixture against transformers: logits at the prompt end and after each of the first greedy
// tokens, and 32 greedy tokens, for one-step prefill and prefill in chunks of 7.
// Tolerances (stated): exact precision: max |diff| <= 1e-3 * max(1, max|logit|) per row;
// fast precision (int8 activations for quantized matmuls; dense weights are unaffected):
// max |diff| <= 0.2 * max(1, max|logit|) (tiny random-weight models amplify int8 activation
// error: measured up to 0.14 for 4-bit, 0.05 for 8-bit), with greedy agreement reported, not required.
import { afterAll, describe, expect, it } from 'vitest';
import type { NativeModel } from '../../src/native/types.js';
import { addon } from '../helpers/addon.js';
import { fixtureNames, loadFixture, maxAbsDiff, refRow } from '../helpers/fixtures.js';
import { runSequences } from '../helpers/runner.js';

const EXACT_TOL = 1e-3;
const FAST_TOL = 0.2;
const names = fixtureNames();
const report: string[] = [];

afterAll(() => {
  if (report.length) console.log(`parity summary:\n${report.join('\n')}`);
});

describe.each(names)('%s', (name) => {
  const fx = loadFixture(name);

  for (const precision of ['exact', 'fast'] as const) {
    for (const chunk of [undefined, 7]) {
      const label = `${precision}${chunk ? ', prefill chunks of 7' : ', one-step prefill'}`;
      it(`matches transformers (${label})`, async () => {
        const model: NativeModel = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 8 << 20, precision });
        try {
          let worst = 0;
          let agree = 0;
          let total = 0;
          for (let p = 0; p < fx.ref.prompts.length; p++) {
            const pr = fx.ref.prompts[p]!;
            const out = (await runSequences(model, [
              { id: `p${p}`, prompt: pr.ids, maxTokens: pr.greedy.length, chunk, logitRows: pr.logits_rows },
            ])).get(`p${p}`)!;
            expect(out.errors).toEqual([]);
            const scale = Math.max(1, pr.max_abs_logit);
            const tol = (precision === 'exact' ? EXACT_TOL : FAST_TOL) * scale;
            // Logit rows are only comparable while our tokens follow the reference's.
            for (let j = 0; j < out.logits.length; j++) {
              if (j > 0 && out.tokens[j - 1] !== pr.greedy[j - 1]) break;
              const d = maxAbsDiff(out.logits[j]!, refRow(fx, p, j));
              worst = Math.max(worst, d / scale);
              expect(d, `prompt ${p} row ${j}`).toBeLessThanOrEqual(tol);
            }
            let k = 0;
            while (k < pr.greedy.length && out.tokens[k] === pr.greedy[k]) k++;
            agree += k;
            total += pr.greedy.length;
            if (precision === 'exact') expect(out.tokens, `prompt ${p} greedy`).toEqual(pr.greedy);
          }
          report.push(`${name} ${label}: max |diff|/max(1,|logit|) = ${worst.toExponential(2)}, greedy ${agree}/${total}`);
        } finally {
          model.close();
        }
      });
    }
  }
});
