// The native verification of a draft row keeps the target distribution: with a deterministic draft d
// (q a point mass) a draft token is kept with probability p(d), and on rejection the token is drawn from
// p with d removed, renormalised. Checked on the real addon and the qwen2-f32 fixture: a fixed count of
// seeded draws against p from the same position's logits (temperature 1, top-k 4: a 4-token
// distribution), by chi-square at p = 0.001. Also: malformed draft rows fail alone, with the reason.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NativeModel, NativeSampleParams } from '../../src/native/types.js';
import { addon, nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';

const DRAWS = 3000;
const CHI2_P001 = { 2: 13.82, 3: 16.27 } as const;

function chiSquare(observed: number[], expected: number[]): number {
  return observed.reduce((x, o, i) => x + (o - expected[i]!) ** 2 / expected[i]!, 0);
}

describe.skipIf(!nativeAvailable())('draft verification (native)', () => {
  let model: NativeModel;
  const prompt = [17, 250, 3, 999, 42, 42, 7, 128, 600, 5, 77, 300];
  const ctx = prompt.length - 1;
  const blockTable = Int32Array.from([0]);
  const sample = (seed: number, extra: Partial<NativeSampleParams> = {}): NativeSampleParams => ({
    temperature: 1, topP: 1, topK: 4, minP: 0, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, seed, counter: 0, logprobs: -1, ...extra,
  });
  beforeAll(async () => {
    model = addon().loadModel(`${FIXTURE_ROOT}/qwen2-f32`, { threads: 2, kvCacheBytes: 8 << 20, blockSize: 16 });
    const r = await model.step({ rows: [{ requestId: 'p', tokens: Int32Array.from(prompt.slice(0, ctx)), positions: Int32Array.from({ length: ctx }, (_, i) => i), blockTable, contextLen: 0 }] });
    expect(r.rows[0]!.error).toBeUndefined();
  });
  afterAll(() => model?.close());

  it('keeps d with probability p(d); a rejection draws from p without d', async () => {
    const last = prompt[ctx]!;
    const ref = (await model.step({ rows: [{ requestId: 'r', tokens: Int32Array.of(last), positions: Int32Array.of(ctx), blockTable, contextLen: ctx, wantLogits: true }] })).rows[0]!;
    const logits = ref.logits!;
    const top = Array.from(logits.keys()).sort((a, b) => logits[b]! - logits[a]! || a - b).slice(0, 4);
    const w = top.map((t) => Math.exp(logits[t]! - logits[top[0]!]!));
    const z = w.reduce((a, b) => a + b, 0);
    const p = w.map((x) => x / z);
    const d = top[1]!; // a likely but not certain draft
    const counts = [0, 0, 0, 0];
    let kept = 0;
    const rejected = [0, 0, 0, 0];
    for (let seed = 0; seed < DRAWS; seed++) {
      const r = (await model.step({
        rows: [{ requestId: 'v', tokens: Int32Array.of(last, d), positions: Int32Array.of(ctx, ctx + 1), blockTable, contextLen: ctx, draft: 1, sample: sample(seed) }],
      })).rows[0]!;
      expect(r.error).toBeUndefined();
      expect(r.accepted === 0 || r.accepted === 1).toBe(true);
      const first = r.accepted === 1 ? d : r.token!;
      const i = top.indexOf(first);
      expect(i).toBeGreaterThanOrEqual(0);
      counts[i]!++;
      if (r.accepted === 1) kept++;
      else rejected[i]!++;
    }
    expect(chiSquare(counts, p.map((x) => x * DRAWS))).toBeLessThan(CHI2_P001[3]);
    // Kept with probability p(d): a binomial within 4 standard deviations.
    const sd = Math.sqrt(DRAWS * p[1]! * (1 - p[1]!));
    expect(Math.abs(kept - DRAWS * p[1]!)).toBeLessThan(4 * sd);
    // Rejections never emit d, and follow p over the other three, renormalised.
    expect(rejected[1]).toBe(0);
    const others = [0, 2, 3];
    const rest = others.reduce((a, i) => a + p[i]!, 0);
    const nRej = DRAWS - kept;
    expect(chiSquare(others.map((i) => rejected[i]!), others.map((i) => (p[i]! / rest) * nRej))).toBeLessThan(CHI2_P001[2]);
  }, 120_000);

  it('the token a draft row emits is the one a plain decode samples with the same seed and counter', async () => {
    const last = prompt[ctx]!;
    for (let seed = 0; seed < 50; seed++) {
      const plain = (await model.step({ rows: [{ requestId: 'a', tokens: Int32Array.of(last), positions: Int32Array.of(ctx), blockTable, contextLen: ctx, sample: sample(seed, { counter: 3 }) }] })).rows[0]!;
      const drafted = (await model.step({
        rows: [{ requestId: 'b', tokens: Int32Array.of(last, 5, 6), positions: Int32Array.of(ctx, ctx + 1, ctx + 2), blockTable, contextLen: ctx, draft: 2, sample: sample(seed, { counter: 3 }) }],
      })).rows[0]!;
      if (drafted.accepted === 0) expect(drafted.token).toBe(plain.token);
      else expect(plain.token).toBe(5);
    }
  });

  it('a malformed draft row fails alone, saying why', async () => {
    const last = prompt[ctx]!;
    const base = { tokens: Int32Array.of(last, 5), positions: Int32Array.of(ctx, ctx + 1), blockTable, contextLen: ctx };
    const r = await model.step({
      rows: [
        { requestId: 'lp', ...base, draft: 1, sample: sample(1, { logprobs: 2 }) },
        { requestId: 'big', ...base, draft: 2, sample: sample(1) },
        { requestId: 'nosample', ...base, draft: 1 },
      ],
    });
    expect(r.rows[0]!.error).toMatch(/draft: a row with a draft takes no logprobs/);
    expect(r.rows[1]!.error).toMatch(/draft must be in \[0, 2\)/);
    expect(r.rows[2]!.error).toMatch(/draft: a row with a draft samples/);
  });
});
