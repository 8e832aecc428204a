// The addon's two-phase step: rows whose bitmask is 'pending' run their forward at once and take the
// mask handed in through supplyMasks (before or after the forward ends) right before sampling. Only
// the pending rows fail when the mask does not come in time, is withheld, missing or the wrong
// width; stale or repeated supplies are refused; a plan without pendingMasks is a TypeError.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NativeModel, NativeSampleParams, NativeStepRow } from '../../src/native/types.js';
import { addon } from '../helpers/addon.js';
import { fixtureNames, loadFixture } from '../helpers/fixtures.js';

const name = fixtureNames().find((n) => n === 'qwen2-f32') ?? fixtureNames()[0]!;
const GREEDY: NativeSampleParams = { temperature: 0, topP: 1, topK: 0, minP: 0, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, seed: 0, counter: 0, logprobs: -1 };

describe(`late grammar masks (${name})`, () => {
  const fx = loadFixture(name);
  const [a, b] = [fx.ref.prompts[0]!, fx.ref.prompts[1]!];
  const vocab = fx.ref.vocab_size;
  const words = Math.ceil(vocab / 32);
  let model: NativeModel;
  let nextStep = 100;
  beforeAll(() => {
    model = addon().loadModel(fx.dir, { threads: 2, kvCacheBytes: 8 << 20, precision: 'exact' });
  });
  afterAll(() => model.close());

  /** A prefill row that samples its first token; `base` keeps rows' KV blocks apart. */
  const row = (id: string, ids: number[], base: number, bitmask?: Int32Array | 'pending'): NativeStepRow => ({
    requestId: id,
    tokens: Int32Array.from(ids),
    positions: Int32Array.from(ids, (_, i) => i),
    blockTable: Int32Array.from({ length: 10 }, (_, i) => base + i),
    contextLen: 0,
    sample: { ...GREEDY, ...(bitmask !== undefined ? { bitmask } : {}) },
  });
  const only = (...tokens: number[]) => {
    const m = new Int32Array(words);
    for (const t of tokens) m[t >> 5]! |= 1 << (t & 31);
    return m;
  };
  const pick = (greedy: number) => (greedy === 5 ? 17 : 5); // a token greedy would not choose

  it('a pending mask supplied while the forward runs constrains only its row', async () => {
    for (const when of ['at once', 'after a while'] as const) {
      const stepId = nextStep++;
      const work = model.step({ rows: [row('c', a.ids, 0, 'pending'), row('free', b.ids, 10)], pendingMasks: { stepId, timeoutMs: 10_000 } });
      if (when === 'after a while') await new Promise((r) => setTimeout(r, 30));
      expect(model.supplyMasks!(stepId, [{ requestId: 'c', bitmask: only(pick(a.greedy[0]!)) }])).toBe(true);
      const res = await work;
      expect(res.rows[0]!.error).toBeUndefined();
      expect(res.rows[0]!.token).toBe(pick(a.greedy[0]!));
      expect(res.rows[1]!.token).toBe(b.greedy[0]);
      expect(res.timings.maskWaitMs).toBeGreaterThanOrEqual(0);
    }
  });

  it('a mask that never comes fails only the pending row after the timeout; nothing hangs', async () => {
    const stepId = nextStep++;
    const res = await model.step({ rows: [row('c', a.ids, 0, 'pending'), row('free', b.ids, 10)], pendingMasks: { stepId, timeoutMs: 50 } });
    expect(res.rows[0]!.error).toMatch(/not supplied within 50 ms/);
    expect(res.rows[0]!.token).toBeUndefined();
    expect(res.rows[1]!.token).toBe(b.greedy[0]);
    // Too late: refused, and never applied to a later step.
    expect(model.supplyMasks!(stepId, [{ requestId: 'c', bitmask: only(5) }])).toBe(false);
    const later = await model.step({ rows: [row('c', a.ids, 0)] });
    expect(later.rows[0]!.token).toBe(a.greedy[0]);
  });

  it('withheld, missing and wrong-width masks fail their rows alone; stale and repeated supplies are refused', async () => {
    const stepId = nextStep++;
    const work = model.step({
      rows: [row('withheld', a.ids, 0, 'pending'), row('missing', b.ids, 10, 'pending'), row('narrow', a.ids, 20, 'pending'), row('ok', b.ids, 30, 'pending'), row('free', a.ids, 40)],
      pendingMasks: { stepId, timeoutMs: 10_000 },
    });
    expect(model.supplyMasks!(stepId - 1, [{ requestId: 'ok', bitmask: only(5) }])).toBe(false);
    const masks = [
      { requestId: 'withheld', bitmask: null },
      { requestId: 'narrow', bitmask: new Int32Array(words - 1).fill(-1) },
      { requestId: 'ok', bitmask: only(pick(b.greedy[0]!)) },
    ];
    expect(model.supplyMasks!(stepId, masks)).toBe(true);
    expect(model.supplyMasks!(stepId, masks)).toBe(false);
    const res = await work;
    const byId = new Map(res.rows.map((r) => [r.requestId, r]));
    expect(byId.get('withheld')!.error).toMatch(/withheld/);
    expect(byId.get('missing')!.error).toMatch(/no grammar bitmask was supplied/);
    expect(byId.get('narrow')!.error).toMatch(new RegExp(`bitmask has ${words - 1} words, expected ${words}`));
    expect(byId.get('ok')!.token).toBe(pick(b.greedy[0]!));
    expect(byId.get('free')!.token).toBe(a.greedy[0]);
  });

  it('malformed supplies throw; a pending row without plan.pendingMasks is a TypeError', async () => {
    await expect(model.step({ rows: [row('c', a.ids, 0, 'pending')] })).rejects.toThrow(/pendingMasks \{ stepId, timeoutMs \} is required/);
    await expect(model.step({ rows: [row('c', a.ids, 0, 'pending')], pendingMasks: { stepId: 1, timeoutMs: 0 } })).rejects.toThrow(/timeoutMs must be in/);
    expect(() => model.supplyMasks!(1, [{ requestId: 'c', bitmask: new Int32Array(0) }])).toThrow(/use null to withhold/);
    expect(() => model.supplyMasks!(1, [{ requestId: 'c', bitmask: null }, { requestId: 'c', bitmask: null }])).toThrow(/appears twice/);
    expect(model.supplyMasks!(1, [])).toBe(false); // no step in flight
  });
});
