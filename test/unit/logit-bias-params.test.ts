// logit_bias in the library API: resolveSamplingParams turns OpenAI's map into the sampler's sorted
// sparse form (or none), and refuses bad maps naming logit_bias; the engine refuses ids past the
// vocabulary and sends the bias in every sampled row.
import { describe, expect, it } from 'vitest';
import { InvalidRequestError } from '../../src/errors/request-errors.js';
import { resolveLogitBias, resolveSamplingParams, SAMPLING_LIMITS } from '../../src/engine/sampling-params.js';
import { makeEngine } from '../engine/helpers.js';

describe('logit_bias in sampling params', () => {
  it('sorts the map by token id into typed arrays; an empty map is no bias', () => {
    const p = resolveSamplingParams({ logitBias: { '30': -100, '2': 5.5, '7': 100 } }, { maxTokens: 4, vocabSize: 64 });
    expect([...p.logitBias!.tokens]).toEqual([2, 7, 30]);
    expect([...p.logitBias!.values]).toEqual([5.5, 100, -100]);
    expect(resolveSamplingParams({ logitBias: {} }, { maxTokens: 4 }).logitBias).toBeUndefined();
    expect(resolveSamplingParams({}, { maxTokens: 4 }).logitBias).toBeUndefined();
  });

  it('refuses bad maps with an InvalidRequestError naming logit_bias', () => {
    const tooMany = Object.fromEntries(Array.from({ length: SAMPLING_LIMITS.maxLogitBiasEntries + 1 }, (_, i) => [String(i), 1]));
    for (const bad of [{ x: 1 }, { '-1': 1 }, { '1e3': 1 }, { '64': 1 }, { '3': 100.5 }, { '3': Number.NaN }, { '3': 1, '03': 1 }, tooMany]) {
      let err: unknown;
      try {
        resolveLogitBias(bad, 64);
      } catch (e) {
        err = e;
      }
      expect(err, JSON.stringify(bad).slice(0, 40)).toBeInstanceOf(InvalidRequestError);
      expect((err as InvalidRequestError).message).toMatch(/^logit_bias/);
      expect((err as InvalidRequestError).param).toMatch(/^logit_bias/);
    }
  });

  it('the engine refuses an id past its vocabulary and sends the bias in each sampled row', async () => {
    const { engine, model } = makeEngine({ contextLength: 64, numBlocks: 32, vocabSize: 128 });
    const tooBig = resolveSamplingParams({ logitBias: { '500': 1 }, maxTokens: 2 }, { maxTokens: 2 });
    expect(() => engine.submit({ promptIds: [1, 2, 3], params: tooBig })).toThrow(/logit_bias: token id 500 is outside the vocabulary \[0, 128\)/);
    const seen: unknown[] = [];
    const step = model.step.bind(model);
    model.step = (plan) => {
      for (const r of plan.rows) if (r.sample) seen.push(r.sample.logitBias);
      return step(plan);
    };
    const params = resolveSamplingParams({ logitBias: { '9': 3 }, maxTokens: 2, temperature: 0 }, { maxTokens: 2 });
    for await (const ev of engine.generate({ promptIds: [1, 2, 3], params })) if (ev.type === 'done') break;
    expect(seen.length).toBeGreaterThan(0);
    for (const b of seen) expect(b).toEqual({ tokens: Int32Array.from([9]), values: Float32Array.from([3]) });
    await engine.shutdown(100);
  });
});
