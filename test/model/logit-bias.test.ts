// logit_bias through the step contract on the CPU backend: +100 forces a token, -100 bans the argmax,
// greedy and seeded rows alike; logprobs report the biased distribution; neighbours are unaffected; a
// grammar mask still wins; malformed bias lists fail only their row.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NativeModel, NativeSampleParams, NativeStepRow } from '../../src/native/types.js';
import { addon } from '../helpers/addon.js';
import { fixtureNames, loadFixture } from '../helpers/fixtures.js';
import { GREEDY, runSequences } from '../helpers/runner.js';

const name = fixtureNames().find((n) => n === 'qwen2-f32') ?? fixtureNames()[0]!;

function bias(entries: Array<[number, number]>): NonNullable<NativeSampleParams['logitBias']> {
  const sorted = [...entries].sort((x, y) => x[0] - y[0]);
  return { tokens: Int32Array.from(sorted, (e) => e[0]), values: Float32Array.from(sorted, (e) => e[1]) };
}

const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);

function logSoftmax(row: ArrayLike<number>): number[] {
  let mx = -Infinity;
  for (let i = 0; i < row.length; i++) mx = Math.max(mx, row[i]!);
  let z = 0;
  for (let i = 0; i < row.length; i++) z += Math.exp(row[i]! - mx);
  const lz = mx + Math.log(z);
  return Array.from(row, (v) => v - lz);
}

describe(`logit bias (${name})`, () => {
  const fx = loadFixture(name);
  const [a, b] = [fx.ref.prompts[0]!, fx.ref.prompts[1]!];
  const vocab = fx.ref.vocab_size;
  let model: NativeModel;
  beforeAll(() => {
    model = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 8 << 20, precision: 'exact' });
  });
  afterAll(() => model.close());

  const row = (id: string, ids: number[], blocks: number[], sample?: Partial<NativeSampleParams>): NativeStepRow => ({
    requestId: id,
    tokens: Int32Array.from(ids),
    positions: Int32Array.from(ids, (_, i) => i),
    blockTable: Int32Array.from(blocks),
    contextLen: 0,
    ...(sample ? { sample: { ...GREEDY, ...sample } } : { wantLogits: true }),
  });

  it('+100 forces a token on every step, greedy and seeded; -100 bans the argmax', async () => {
    const forced = a.greedy.includes(5) ? 6 : 5;
    for (const s of [{}, { temperature: 1, seed: 3 }, { temperature: 0.8, topP: 0.9, topK: 40, seed: 9 }]) {
      const out = (await runSequences(model, [{ id: 'x', prompt: a.ids, maxTokens: 8, sample: { ...s, logitBias: bias([[forced, 100]]) } }])).get('x')!;
      expect(out.errors).toEqual([]);
      expect(out.tokens).toEqual(Array(8).fill(forced));
    }
    const logits = (await model.step({ rows: [row('l', a.ids, range(0, 16))] })).rows[0]!.logits!.slice(-vocab);
    const top = a.greedy[0]!;
    let second = top === 0 ? 1 : 0;
    for (let i = 0; i < vocab; i++) if (i !== top && logits[i]! > logits[second]!) second = i;
    const banned = (await runSequences(model, [{ id: 'x', prompt: a.ids, maxTokens: 1, sample: { logitBias: bias([[top, -100]]) } }])).get('x')!;
    expect(banned.tokens).toEqual([second]);
  });

  it('logprobs are those of the biased distribution (a forced token has logprob ~0)', async () => {
    const out = (await runSequences(model, [{ id: 'x', prompt: a.ids, maxTokens: 1, sample: { logprobs: 5, logitBias: bias([[7, 100]]) } }])).get('x')!;
    expect(out.tokens).toEqual([7]);
    expect(out.logprobs[0]!.logprob).toBeGreaterThan(-1e-3);

    const logits = (await model.step({ rows: [row('l', a.ids, range(0, 16))] })).rows[0]!.logits!.slice(-vocab);
    const entries: Array<[number, number]> = [[a.greedy[0]!, -2.5], [11, 3.25], [vocab - 1, 1.5]];
    const res = (await runSequences(model, [{ id: 'y', prompt: a.ids, maxTokens: 1, sample: { logprobs: 10, logitBias: bias(entries) } }])).get('y')!;
    const want = Array.from(logits);
    for (const [t, v] of entries) want[t] = want[t]! + v;
    const lp = logSoftmax(want);
    const best = want.indexOf(Math.max(...want));
    expect(res.tokens).toEqual([best]);
    expect(res.logprobs[0]!.logprob).toBeCloseTo(lp[best]!, 4);
    for (const alt of res.logprobs[0]!.top!) expect(alt.logprob).toBeCloseTo(lp[alt.token]!, 4);
  });

  it('a bias on a penalised token adds to its penalty', async () => {
    const prompt = a.ids.slice(0, 10);
    const output = [a.greedy[0]!, a.greedy[1]!, a.greedy[1]!];
    const ctx = [...prompt, ...output];
    const raw = (await model.step({ rows: [row('l', ctx, [0, 1])] })).rows[0]!.logits!.slice(-vocab);
    const params = { presencePenalty: 0.5, frequencyPenalty: 0.25 };
    const entries: Array<[number, number]> = [[a.greedy[1]!, 4], [3, -1]];
    const res = (await model.step({
      rows: [row('x', ctx, [0, 1], { ...params, logprobs: 5, outputTokens: Int32Array.from(output), logitBias: bias(entries) })],
    })).rows[0]!;
    const want = Array.from(raw);
    const counts = new Map<number, number>();
    for (const t of output) counts.set(t, (counts.get(t) ?? 0) + 1);
    for (const [t, c] of counts) want[t] = want[t]! - params.presencePenalty - params.frequencyPenalty * c;
    for (const [t, v] of entries) want[t] = want[t]! + v;
    const lp = logSoftmax(want);
    expect(res.token).toBe(want.indexOf(Math.max(...want)));
    for (const alt of res.topLogprobs!) expect(alt.logprob).toBeCloseTo(lp[alt.token]!, 4);
  });

  it('neighbours are unaffected and a biased seeded row is the same alone or batched', async () => {
    const s = { temperature: 0.9, seed: 77, logitBias: bias([[a.greedy[0]!, -100], [20, 2], [21, 2]]) };
    const solo = (await runSequences(model, [{ id: 'x', prompt: a.ids, maxTokens: 12, sample: s }])).get('x')!.tokens;
    const mixed = await runSequences(model, [
      { id: 'n1', prompt: b.ids, maxTokens: 12 },
      { id: 'x', prompt: a.ids, maxTokens: 12, sample: s, startStep: 1, chunk: 5 },
      { id: 'n2', prompt: a.ids, maxTokens: 12 },
    ]);
    expect(mixed.get('x')!.tokens).toEqual(solo);
    expect(solo[0]).not.toBe(a.greedy[0]);
    expect(mixed.get('n1')!.tokens).toEqual(b.greedy.slice(0, 12));
    expect(mixed.get('n2')!.tokens).toEqual(a.greedy.slice(0, 12));
  });

  it('the grammar mask wins: +100 cannot unmask a token', async () => {
    const allowed = [5, 17, 300 % vocab];
    const mask = new Int32Array(Math.ceil(vocab / 32));
    for (const t of allowed) mask[t >> 5]! |= 1 << (t & 31);
    const out = (await runSequences(model, [{ id: 'x', prompt: a.ids, maxTokens: 6, sample: { bitmask: mask, logitBias: bias([[9, 100], [17, 50]]) } }])).get('x')!;
    expect(out.errors).toEqual([]);
    expect(out.tokens).toEqual(Array(6).fill(17));
  });

  it('a malformed bias fails its row alone, naming logitBias', async () => {
    const bad: Array<[string, NativeSampleParams['logitBias']]> = [
      ['outside the vocabulary', { tokens: Int32Array.from([vocab]), values: Float32Array.from([1]) }],
      ['strictly ascending', { tokens: Int32Array.from([9, 3]), values: Float32Array.from([1, 1]) }],
      ['same length', { tokens: Int32Array.from([3]), values: Float32Array.from([1, 2]) }],
      ['finite', { tokens: Int32Array.from([3]), values: Float32Array.from([NaN]) }],
    ];
    for (const [msg, logitBias] of bad) {
      const res = await model.step({ rows: [row('bad', a.ids, range(0, 16), { logitBias }), row('good', b.ids, range(16, 32), {})] });
      expect(res.rows[0]!.error).toMatch(/logitBias/);
      expect(res.rows[0]!.error).toContain(msg);
      expect(res.rows[1]!.error).toBeUndefined();
      expect(res.rows[1]!.token).toBe(b.greedy[0]);
    }
  });
});
