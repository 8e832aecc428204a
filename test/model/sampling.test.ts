// Sampling through the step contract: seeded draws independent of batch neighbours, top-k=1 = greedy,
// grammar bitmask, penalties, logprobs.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NativeModel, NativeSampleParams } from '../../src/native/types.js';
import { addon } from '../helpers/addon.js';
import { fixtureNames, loadFixture } from '../helpers/fixtures.js';
import { GREEDY, runSequences } from '../helpers/runner.js';

const name = fixtureNames().find((n) => n === 'qwen2-f32') ?? fixtureNames()[0]!;

describe(`sampling (${name})`, () => {
  const fx = loadFixture(name);
  const [a, b] = [fx.ref.prompts[0]!, fx.ref.prompts[1]!];
  const vocab = fx.ref.vocab_size;
  let model: NativeModel;
  beforeAll(() => {
    model = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 8 << 20, precision: 'exact' });
  });
  afterAll(() => model.close());

  it('same seed gives the same tokens regardless of batch neighbours and their seeds', async () => {
    const s = { temperature: 0.9, topP: 0.95, topK: 50, seed: 1234 };
    const solo = (await runSequences(model, [{ id: 'x', prompt: a.ids, maxTokens: 20, sample: s }])).get('x')!.tokens;
    const mixed = await runSequences(model, [
      { id: 'n1', prompt: b.ids, maxTokens: 20, sample: { temperature: 1.2, seed: 99 } },
      { id: 'x', prompt: a.ids, maxTokens: 20, sample: s, startStep: 2, chunk: 9 },
      { id: 'n2', prompt: a.ids, maxTokens: 5 },
    ]);
    expect(mixed.get('x')!.tokens).toEqual(solo);
    const other = (await runSequences(model, [{ id: 'x', prompt: a.ids, maxTokens: 20, sample: { ...s, seed: 4321 } }])).get('x')!;
    expect(other.tokens).not.toEqual(solo); // the seed matters (20 draws at T=0.9 colliding is ~impossible)
  });

  it('pure temperature sampling (no truncation) is also reproducible', async () => {
    const s = { temperature: 1.0, seed: 7 };
    const r1 = (await runSequences(model, [{ id: 'x', prompt: a.ids, maxTokens: 12, sample: s }])).get('x')!.tokens;
    const r2 = (await runSequences(model, [
      { id: 'y', prompt: b.ids, maxTokens: 3 },
      { id: 'x', prompt: a.ids, maxTokens: 12, sample: s },
    ])).get('x')!.tokens;
    expect(r2).toEqual(r1);
  });

  it('top-k = 1 equals greedy', async () => {
    const out = (await runSequences(model, [{ id: 'x', prompt: a.ids, maxTokens: 16, sample: { temperature: 1.5, topK: 1, seed: 5 } }])).get('x')!;
    expect(out.tokens).toEqual(a.greedy.slice(0, 16));
  });

  it('min-p = 1 keeps only the top token (greedy)', async () => {
    const out = (await runSequences(model, [{ id: 'x', prompt: a.ids, maxTokens: 8, sample: { temperature: 1, minP: 1, seed: 3 } }])).get('x')!;
    expect(out.tokens).toEqual(a.greedy.slice(0, 8));
  });

  it('a grammar bitmask restricts the sampled tokens, greedy and random', async () => {
    const allowed = [5, 17, 300, vocab - 1];
    const mask = new Int32Array(Math.ceil(vocab / 32));
    for (const t of allowed) mask[t >> 5]! |= 1 << (t & 31);
    for (const sample of [{ bitmask: mask }, { temperature: 1, seed: 11, bitmask: mask }]) {
      const out = (await runSequences(model, [{ id: 'x', prompt: a.ids, maxTokens: 10, sample }])).get('x')!;
      expect(out.errors).toEqual([]);
      for (const t of out.tokens) expect(allowed).toContain(t);
    }
  });

  it('a bitmask that allows nothing fails only that row', async () => {
    const res = await model.step({
      rows: [
        { requestId: 'bad', tokens: Int32Array.from(a.ids), positions: Int32Array.from(a.ids, (_, i) => i), blockTable: Int32Array.from([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]), contextLen: 0,
          sample: { temperature: 0, topP: 1, topK: 0, minP: 0, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, seed: 0, counter: 0, logprobs: -1, bitmask: new Int32Array(Math.ceil(vocab / 32)) } },
        { requestId: 'good', tokens: Int32Array.from(b.ids), positions: Int32Array.from(b.ids, (_, i) => i), blockTable: Int32Array.from([10, 11, 12, 13, 14, 15, 16, 17, 18, 19]), contextLen: 0,
          sample: { temperature: 0, topP: 1, topK: 0, minP: 0, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, seed: 0, counter: 0, logprobs: -1 } },
      ],
    });
    expect(res.rows[0]!.error).toMatch(/bitmask allows no token/);
    expect(res.rows[1]!.error).toBeUndefined();
    expect(res.rows[1]!.token).toBe(b.greedy[0]);
  });

  it('penalties change greedy output: presence penalty stops repeats, repetition penalty differs', async () => {
    const base = a.greedy.slice(0, 24);
    expect(new Set(base).size).toBeLessThan(base.length); // the reference continuation repeats tokens
    const pres = (await runSequences(model, [{ id: 'x', prompt: a.ids, maxTokens: 24, sample: { presencePenalty: 100 } }])).get('x')!.tokens;
    expect(new Set(pres).size).toBe(pres.length);
    const freq = (await runSequences(model, [{ id: 'x', prompt: a.ids, maxTokens: 24, sample: { frequencyPenalty: 100 } }])).get('x')!.tokens;
    expect(new Set(freq).size).toBe(freq.length);
    const rep = (await runSequences(model, [{ id: 'x', prompt: a.ids, maxTokens: 24, sample: { repetitionPenalty: 3 } }])).get('x')!.tokens;
    expect(rep).not.toEqual(base);
  });

  it('logprobs: sampled token first among top-k, sorted, probabilities sum to at most 1, match raw log-softmax', async () => {
    const out = (await runSequences(model, [{ id: 'x', prompt: a.ids, maxTokens: 6, sample: { logprobs: 5 }, logitRows: 6 }])).get('x')!;
    expect(out.logprobs).toHaveLength(6);
    for (let i = 0; i < 6; i++) {
      const lp = out.logprobs[i]!;
      const top = lp.top!;
      expect(top).toHaveLength(5);
      expect(top[0]!.token).toBe(lp.token);
      expect(top[0]!.logprob).toBeCloseTo(lp.logprob, 6);
      for (let k = 1; k < 5; k++) expect(top[k]!.logprob).toBeLessThanOrEqual(top[k - 1]!.logprob);
      const mass = top.reduce((s, t) => s + Math.exp(t.logprob), 0);
      expect(mass).toBeLessThanOrEqual(1 + 1e-5);
      expect(lp.logprob).toBeLessThanOrEqual(0);
      // Without penalties or mask the reported distribution is the raw log-softmax of the logits.
      const row = out.logits[i]!;
      let mx = -Infinity;
      for (const v of row) mx = Math.max(mx, v);
      let z = 0;
      for (const v of row) z += Math.exp(v - mx);
      expect(lp.logprob).toBeCloseTo(row[lp.token]! - mx - Math.log(z), 4);
    }
    const zero = (await runSequences(model, [{ id: 'x', prompt: a.ids, maxTokens: 2, sample: { logprobs: 0 } }])).get('x')!;
    expect(zero.logprobs[0]!.top ?? []).toEqual([]);
  });

  it('draws follow softmax(logits/T) and respect top-k / top-p / min-p sets (2000 seeded rows)', async () => {
    const big = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 64 << 20, precision: 'exact' });
    try {
      const tok = a.ids[0]!;
      const one = (i: number, sample?: Partial<NativeSampleParams>) => ({
        requestId: `r${i}`,
        tokens: Int32Array.from([tok]),
        positions: Int32Array.from([0]),
        blockTable: Int32Array.from([i]),
        contextLen: 0,
        ...(sample ? { sample: { ...GREEDY, ...sample } } : { wantLogits: true }),
      });
      const logits = (await big.step({ rows: [one(0)] })).rows[0]!.logits!;
      const T = 1.5;
      let mx = -Infinity;
      for (const v of logits) mx = Math.max(mx, v / T);
      const w = Array.from(logits, (v) => Math.exp(v / T - mx));
      const z = w.reduce((x, y) => x + y, 0);
      const prob = w.map((x) => x / z);
      const order = prob.map((p, i) => [p, i] as const).sort((x, y) => y[0] - x[0]);
      const N = 2000;
      const draw = async (sample: Partial<NativeSampleParams>) => {
        const rows = Array.from({ length: N }, (_, i) => one(i, { ...sample, seed: 1000 + i }));
        return (await big.step({ rows })).rows.map((r) => r.token!);
      };
      // Plain temperature: the empirical frequency of the 5 likeliest tokens within 4 sigma.
      const plain = await draw({ temperature: T });
      for (const [p, t] of order.slice(0, 5)) {
        const f = plain.filter((x) => x === t).length / N;
        expect(Math.abs(f - p)).toBeLessThanOrEqual(4 * Math.sqrt((p * (1 - p)) / N) + 1e-3);
      }
      const topk = new Set(order.slice(0, 3).map(([, t]) => t));
      for (const t of await draw({ temperature: T, topK: 3 })) expect(topk.has(t)).toBe(true);
      let cum = 0;
      const nucleus = new Set<number>();
      for (const [p, t] of order) {
        if (cum >= 0.5) break;
        nucleus.add(t);
        cum += p;
      }
      const nuc = await draw({ temperature: T, topP: 0.5 });
      for (const t of nuc) expect(nucleus.has(t)).toBe(true);
      expect(new Set(nuc).size).toBe(nucleus.size); // 2000 draws hit every member of a small nucleus
      const minp = new Set(order.filter(([p]) => p >= 0.2 * order[0]![0]).map(([, t]) => t));
      for (const t of await draw({ temperature: T, minP: 0.2 })) expect(minp.has(t)).toBe(true);
    } finally {
      big.close();
    }
  });

  it('penalty arithmetic matches HF (repetition) and OpenAI (presence/frequency), seen through logprobs', async () => {
    const prompt = a.ids.slice(0, 10);
    const output = [a.greedy[0]!, a.greedy[1]!, a.greedy[1]!, 7];
    const ctx = [...prompt, ...output];
    const m2 = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 8 << 20, precision: 'exact' });
    try {
      const base = {
        requestId: 'x',
        tokens: Int32Array.from(ctx),
        positions: Int32Array.from(ctx, (_, i) => i),
        blockTable: Int32Array.from([0, 1]),
        contextLen: 0,
      };
      const raw = (await m2.step({ rows: [{ ...base, wantLogits: true }] })).rows[0]!.logits!.slice(-vocab);
      const params = { repetitionPenalty: 1.7, presencePenalty: 0.6, frequencyPenalty: 0.35 };
      const res = (await m2.step({
        rows: [{ ...base, sample: { ...GREEDY, ...params, logprobs: vocab > 20 ? 20 : vocab, promptTokens: Int32Array.from(prompt), outputTokens: Int32Array.from(output) } }],
      })).rows[0]!;
      const want = Array.from(raw);
      for (const t of new Set(ctx)) want[t] = want[t]! > 0 ? want[t]! / params.repetitionPenalty : want[t]! * params.repetitionPenalty;
      const counts = new Map<number, number>();
      for (const t of output) counts.set(t, (counts.get(t) ?? 0) + 1);
      for (const [t, c] of counts) want[t] = want[t]! - params.presencePenalty - params.frequencyPenalty * c;
      let mx = -Infinity;
      for (const v of want) mx = Math.max(mx, v);
      const lz = mx + Math.log(want.reduce((s2, v) => s2 + Math.exp(v - mx), 0));
      const best = want.indexOf(mx);
      expect(res.token).toBe(best);
      expect(res.logprob!).toBeCloseTo(mx - lz, 4);
      for (const alt of res.topLogprobs!) expect(alt.logprob).toBeCloseTo(want[alt.token]! - lz, 4);
    } finally {
      m2.close();
    }
  });
});
