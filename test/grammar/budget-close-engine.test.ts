// Budget-aware closing inside the engine on a real fixture checkpoint (native addon, xgrammar):
// constrained requests with tight max_tokens, batched with free-text ones, greedy (speculative rows)
// and sampled, end within max_tokens in JSON that validates ("length" when the closing was forced);
// free-text neighbours are unchanged by it (batch invariance); opting out leaves replies cut.
import { Ajv } from 'ajv';
import { afterAll, describe, expect, it } from 'vitest';
import { grammarServiceFor } from '../../src/engine/grammar/grammar-service.js';
import { parseResponseFormat } from '../../src/server/response-format.js';
import { resolveSamplingParams } from '../../src/engine/sampling-params.js';
import { createTextEngine } from '../../src/engine/text-engine.js';
import { openTextModel, type TextModel } from '../../src/engine/text-model.js';
import { nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { collect } from '../engine/helpers.js';
import { SWEEP_SCHEMAS } from './sweep-schemas.js';

describe.skipIf(!nativeAvailable())('budget-aware closing in the engine (qwen2-q4)', () => {
  let model: TextModel | null = null;
  afterAll(() => model?.native.close());

  it('tight max_tokens: every constrained reply validates, neighbours unchanged', async () => {
    model = openTextModel(`${FIXTURE_ROOT}/qwen2-q4`, { threads: 2, precision: 'exact', kvCacheBytes: 32 << 20, blockSize: 16 });
    const service = grammarServiceFor(model.text, model.info.vocabSize);
    const ajv = new Ajv({ strict: false });
    const tok = model.text.tokenizer;
    const prompt = (i: number) => tok.encode(`item ${i}: describe it`);
    const formats = SWEEP_SCHEMAS.map((schema) => parseResponseFormat({ type: 'json_schema', json_schema: { name: 's', schema, strict: true } })!);
    // The shortest output of each schema: what a grammar with one token left at every step forces.
    const least = await Promise.all(
      formats.map(async (f) => {
        const g = await service.matcher(f);
        let n = 0;
        for (;;) {
          g.setTokensLeft?.(1);
          const next = await g.next();
          if (next.kind !== 'mask') break;
          const w = next.bitmask.findIndex((v) => v !== 0); // the one allowed token
          const bits = next.bitmask[w]!;
          g.accept(w * 32 + 31 - Math.clz32(bits & -bits));
          n++;
        }
        g.dispose();
        return n;
      }),
    );
    const run = async (budgetClose: boolean) => {
      const engine = createTextEngine(model!, { maxNumSeqs: 16, maxBatchedTokens: 256 });
      const jobs = Array.from({ length: 30 }, (_, i) => {
        const schema = i % 3 === 2 ? -1 : i % formats.length;
        return { i, schema, maxTokens: (schema >= 0 ? least[schema]! : 8) + (i % 7) * 3, temperature: i % 2 ? 0.9 : 0 };
      });
      const results = await Promise.all(
        jobs.map(async (j) => {
          const grammar = j.schema >= 0 ? await service.matcher(formats[j.schema]!, { budgetClose }) : undefined;
          const params = resolveSamplingParams({ maxTokens: j.maxTokens, temperature: j.temperature, seed: j.i }, { maxTokens: j.maxTokens });
          return collect(engine.submit({ promptIds: prompt(j.i), params, grammar, id: `r${j.i}` }));
        }),
      );
      await engine.shutdown(0);
      return { jobs, results };
    };
    const closed = await run(true);
    const cut = await run(false);
    let forced = 0;
    for (const [k, j] of closed.jobs.entries()) {
      const r = closed.results[k]!;
      const where = `job ${j.i} (schema ${j.schema}, max_tokens ${j.maxTokens}): ${r.text}`;
      expect(r.error, where).toBeUndefined();
      expect(r.tokens.length, where).toBeLessThanOrEqual(j.maxTokens);
      if (j.schema < 0) {
        expect(r.tokens, where).toEqual(cut.results[k]!.tokens); // a free-text neighbour is unchanged
        continue;
      }
      const validate = ajv.compile(SWEEP_SCHEMAS[j.schema]!);
      expect(parses(r.text), `${where} ${r.done?.finishReason}`).toBe(true);
      expect(validate(JSON.parse(r.text)), `${where} ${JSON.stringify(validate.errors)}`).toBe(true);
      expect(r.text).not.toContain('\uFFFD');
      if (r.done!.finishReason === 'length') forced++;
      else expect(r.done!.finishReason, where).toBe('stop');
    }
    // Without closing, the same requests are cut mid-JSON where closing ended them.
    const invalid = cut.jobs.filter((j, k) => j.schema >= 0 && !parses(cut.results[k]!.text)).length;
    expect(forced).toBeGreaterThan(3);
    expect(invalid).toBeGreaterThan(3);
  }, 240_000);
});

function parses(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}
