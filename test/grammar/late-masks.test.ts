// Two-phase constrained steps on the fake runner: the step is launched with the constrained rows'
// bitmasks 'pending', the engine computes them while the forward runs and supplies them late; a
// stalled grammar times out only the constrained rows (typed error, no hang), a grammar that throws
// fails only its request, an abort or a completion during the forward withholds that row's mask,
// and a model without supplyMasks still gets its masks in the plan.
import { describe, expect, it } from 'vitest';
import { EngineRequestError } from '../../src/engine/engine-errors.js';
import { FakeModel } from '../helpers/fake-runner.js';
import type { GrammarNext, RequestGrammar } from '../../src/engine/grammar/request-grammar.js';
import type { NativeStepRow } from '../../src/native/types.js';
import { bytes, collect, makeEngine, params, sleep } from '../engine/helpers.js';

/** Allows every token; records when next() ran (steps already launched); can stall, throw or end. */
class ProbeGrammar implements RequestGrammar {
  accepted: number[] = [];
  disposed = 0;
  /** model.plans.length at each next(): the step this mask is for was already launched. */
  launchedAtNext: number[] = [];
  constructor(
    private readonly model: FakeModel,
    private readonly after: number,
    private readonly at: { stallMs?: number; throwAt?: number } = {},
  ) {}
  async next(): Promise<GrammarNext> {
    this.launchedAtNext.push(this.model.plans.length);
    const k = this.accepted.length;
    if (this.at.throwAt === k) throw new Error('matcher exploded');
    if (this.at.stallMs !== undefined && k === 2) await sleep(this.at.stallMs);
    if (k >= this.after) return { kind: 'complete' };
    const bitmask = new Int32Array(8).fill(-1);
    bitmask[7] = k; // the row's own signature, read back from the recorded plan
    return { kind: 'mask', bitmask };
  }
  accept(token: number): boolean {
    this.accepted.push(token);
    return true;
  }
  dispose(): void {
    this.disposed++;
  }
}

const rowsOf = (model: FakeModel, id: string): NativeStepRow[] => model.plans.flatMap((p) => p.rows.filter((r) => r.requestId === id && r.sample));

describe('grammar masks computed while the forward runs', () => {
  it('launches the step first, computes each mask after, and samples with exactly that mask', async () => {
    const solo = makeEngine({ stepMs: 2 });
    const want = await collect(solo.engine.submit({ promptIds: bytes('free text'), params: params({ maxTokens: 10 }) }));
    const { engine, model } = makeEngine({ stepMs: 2 });
    const g = new ProbeGrammar(model, 6);
    const [c, f] = await Promise.all([
      collect(engine.submit({ promptIds: bytes('json'), params: params({ maxTokens: 20 }), grammar: g, id: 'g' })),
      collect(engine.submit({ promptIds: bytes('free text'), params: params({ maxTokens: 10 }), id: 'free' })),
    ]);
    expect(c.done?.finishReason).toBe('stop');
    expect(c.tokens).toEqual(g.accepted);
    expect(c.tokens.length).toBe(6);
    expect(f.tokens).toEqual(want.tokens);
    // Every next() ran after the plan of the step it serves reached the model.
    const rows = rowsOf(model, 'g');
    expect(rows.length).toBe(7); // 6 sampled + the step where the grammar turned out complete
    g.launchedAtNext.forEach((n, k) => expect(model.plans.indexOf(model.plans.find((p) => p.rows.includes(rows[k]!))!)).toBe(n - 1));
    rows.slice(0, 6).forEach((r, k) => expect((r.sample!.bitmask as Int32Array)[7]).toBe(k));
    expect(rows[6]!.sample!.bitmask).toBe('pending'); // withheld: the request ended with "stop"
    expect(g.disposed).toBe(1);
    expect(engine.stats().requests.error).toBe(0);
  });

  it('a stalled grammar times out only the constrained rows, with a clear error; the engine goes on', async () => {
    const logs: string[] = [];
    const { engine, model } = makeEngine({ stepMs: 1 }, { maskTimeoutMs: 30, log: (m) => logs.push(m) });
    const solo = makeEngine({ stepMs: 1 });
    const want = await collect(solo.engine.submit({ promptIds: bytes('neighbour'), params: params({ maxTokens: 12 }) }));
    const stall = new ProbeGrammar(model, 50, { stallMs: 400 });
    const other = new ProbeGrammar(model, 50);
    const [s, o, f] = await Promise.all([
      collect(engine.submit({ promptIds: bytes('a'), params: params({ maxTokens: 40 }), grammar: stall })),
      collect(engine.submit({ promptIds: bytes('b'), params: params({ maxTokens: 40 }), grammar: other })),
      collect(engine.submit({ promptIds: bytes('neighbour'), params: params({ maxTokens: 12 }) })),
    ]);
    for (const r of [s, o]) {
      expect(r.error).toBeInstanceOf(EngineRequestError);
      expect(r.error?.code).toBe('grammar_failed');
      expect(r.error?.message).toMatch(/grammar bitmask for this row was not supplied within 30 ms/);
    }
    expect(stall.accepted.length).toBe(2);
    expect(f.tokens).toEqual(want.tokens);
    expect(engine.health().ok).toBe(true);
    // The stalled matcher finishes later: its masks are refused, never applied to a later step.
    await sleep(500);
    expect(logs.some((l) => /came after it stopped waiting/.test(l))).toBe(true);
    const again = new ProbeGrammar(model, 4);
    const r = await collect(engine.submit({ promptIds: bytes('c'), params: params({ maxTokens: 10 }), grammar: again }));
    expect(r.done?.finishReason).toBe('stop');
    expect(r.tokens.length).toBe(4);
  });

  it('a grammar that throws during the forward fails only its request', async () => {
    const { engine, model } = makeEngine({ stepMs: 1 });
    const bad = new ProbeGrammar(model, 50, { throwAt: 3 });
    const good = new ProbeGrammar(model, 5);
    const [b, g, f] = await Promise.all([
      collect(engine.submit({ promptIds: bytes('a'), params: params({ maxTokens: 40 }), grammar: bad })),
      collect(engine.submit({ promptIds: bytes('b'), params: params({ maxTokens: 40 }), grammar: good })),
      collect(engine.submit({ promptIds: bytes('c'), params: params({ maxTokens: 8 }) })),
    ]);
    expect(b.error?.code).toBe('grammar_failed');
    expect(b.error?.message).toMatch(/the grammar failed: matcher exploded/);
    expect(bad.accepted.length).toBe(3);
    expect(bad.disposed).toBe(1);
    expect(g.done?.finishReason).toBe('stop');
    expect(g.tokens.length).toBe(5);
    expect(f.done?.finishReason).toBe('length');
    expect(engine.stats().requests.error).toBe(1);
  });

  it('an abort while the masks are computed withholds that row; its neighbours are unaffected', async () => {
    const { engine, model } = makeEngine({ stepMs: 1 });
    let handle: { abort(): void } | null = null;
    const aborting = new (class extends ProbeGrammar {
      override async next(): Promise<GrammarNext> {
        if (this.accepted.length === 3) handle!.abort();
        return super.next();
      }
    })(model, 50);
    const good = new ProbeGrammar(model, 5);
    const h = engine.submit({ promptIds: bytes('a'), params: params({ maxTokens: 40 }), grammar: aborting, id: 'ab' });
    handle = h;
    const [a, g] = await Promise.all([collect(h), collect(engine.submit({ promptIds: bytes('b'), params: params({ maxTokens: 40 }), grammar: good }))]);
    expect(a.done?.finishReason).toBe('abort');
    expect(a.tokens.length).toBe(3);
    expect(g.tokens.length).toBe(5);
    expect(rowsOf(model, 'ab').at(-1)!.sample!.bitmask).toBe('pending');
    expect(engine.stats().requests.error).toBe(0);
  });

  it('a stale or repeated supply is refused', async () => {
    const model = new FakeModel({ stepMs: 20 });
    expect(model.supplyMasks(1, [])).toBe(false); // no step in flight
    const row = (id: string, bitmask?: Int32Array | 'pending'): NativeStepRow => ({
      requestId: id,
      tokens: Int32Array.of(97),
      positions: Int32Array.of(0),
      blockTable: Int32Array.of(id === 'a' ? 0 : 1),
      contextLen: 0,
      sample: { temperature: 0, topP: 1, topK: 0, minP: 0, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, seed: 0, counter: 0, logprobs: -1, ...(bitmask ? { bitmask } : {}) },
    });
    const work = model.step({ rows: [row('a', 'pending'), row('b')], pendingMasks: { stepId: 7, timeoutMs: 1000 } });
    expect(model.supplyMasks(6, [{ requestId: 'a', bitmask: new Int32Array(8).fill(-1) }])).toBe(false);
    expect(model.supplyMasks(7, [{ requestId: 'a', bitmask: new Int32Array(8).fill(-1) }])).toBe(true);
    expect(model.supplyMasks(7, [{ requestId: 'a', bitmask: new Int32Array(8) }])).toBe(false);
    const res = await work;
    expect(res.rows.map((r) => r.error)).toEqual([undefined, undefined]);
    expect(res.rows[0]!.token).toBeTypeOf('number');
    await expect(model.step({ rows: [row('a', 'pending')] })).rejects.toThrow(/pendingMasks is required/);
  });

  it('without supplyMasks (or with overlapMasks off) the masks travel in the plan, as before', async () => {
    for (const variant of ['no-supply', 'off'] as const) {
      const model = new FakeModel({ stepMs: 1 });
      if (variant === 'no-supply') Object.defineProperty(model, 'supplyMasks', { value: undefined });
      const { engine } = makeEngine({}, { model, overlapMasks: variant === 'no-supply' });
      const g = new ProbeGrammar(model, 5);
      const r = await collect(engine.submit({ promptIds: bytes('x'), params: params({ maxTokens: 20 }), grammar: g, id: 'g' }));
      expect(r.done?.finishReason).toBe('stop');
      expect(r.tokens.length).toBe(5);
      const rows = rowsOf(model, 'g');
      expect(rows.length).toBe(5); // the completing step is decided before it starts
      rows.forEach((row, k) => expect((row.sample!.bitmask as Int32Array)[7]).toBe(k));
      expect(model.plans.every((p) => p.pendingMasks === undefined)).toBe(true);
      // next() for step k ran before step k was launched.
      g.launchedAtNext.slice(0, 5).forEach((n, k) => expect(n).toBe(model.plans.indexOf(model.plans.find((p) => p.rows.includes(rows[k]!))!)));
    }
  });
});
