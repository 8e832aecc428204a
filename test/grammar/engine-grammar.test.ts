// The engine's side of structured output with scripted grammars on the fake runner: masks travel
// only on constrained rows, keyed by request id; a complete grammar ends with "stop", a dead one or
// a rejected token with a typed error (HTTP 500 code grammar_failed), max_tokens mid-object with
// "length"; every matcher is freed on finish, abort and failure.
import { describe, expect, it } from 'vitest';
import type { GrammarNext, RequestGrammar } from '../../src/engine/grammar/request-grammar.js';
import type { GrammarProvider } from '../../src/engine/grammar/grammar-service.js';
import { EngineRequestError } from '../../src/engine/engine-errors.js';
import { bytes, collect, makeEngine, params, sleep } from '../engine/helpers.js';
import { post, startFakeServer } from '../server/helpers.js';

/** Allows everything for `complete` tokens then reports complete (or dead, or rejects a token). */
class ScriptedGrammar implements RequestGrammar {
  accepted: number[] = [];
  disposed = 0;
  nextCalls = 0;
  constructor(
    private readonly vocab: number,
    private readonly after: number,
    private readonly end: 'complete' | 'dead' | 'reject' = 'complete',
    private readonly tag = 0,
  ) {}
  async next(): Promise<GrammarNext> {
    this.nextCalls++;
    if (this.accepted.length >= this.after && this.end !== 'reject') return { kind: this.end };
    const bitmask = new Int32Array(Math.ceil(this.vocab / 32)).fill(-1);
    bitmask[0] = this.tag; // a per-request signature the test reads back from the plan
    return { kind: 'mask', bitmask };
  }
  accept(token: number): boolean {
    if (this.end === 'reject' && this.accepted.length >= this.after) return false;
    this.accepted.push(token);
    return true;
  }
  dispose(): void {
    this.disposed++;
  }
}

describe('engine with grammars', () => {
  it('puts each mask on its own row only; unconstrained neighbours get none and are unchanged', async () => {
    const solo = makeEngine();
    const free = await collect(solo.engine.submit({ promptIds: bytes('hello there'), params: params({ maxTokens: 12 }) }));
    const { engine, model } = makeEngine();
    const gs = [1, 2, 3].map((t) => new ScriptedGrammar(256, 6, 'complete', t * 1000));
    const hs = gs.map((g, i) => engine.submit({ promptIds: bytes(`json ${i}`), params: params({ maxTokens: 20 }), grammar: g, id: `g${i}` }));
    const hf = engine.submit({ promptIds: bytes('hello there'), params: params({ maxTokens: 12 }), id: 'free' });
    const [a, b, c, f] = await Promise.all([...hs, hf].map((h) => collect(h)));
    for (const [r, g] of [[a, gs[0]], [b, gs[1]], [c, gs[2]]] as const) {
      expect(r!.done?.finishReason).toBe('stop');
      expect(r!.tokens).toEqual(g!.accepted);
      expect(r!.tokens.length).toBe(6);
      expect(g!.disposed).toBe(1);
    }
    expect(f.tokens).toEqual(free.tokens);
    // Masks are computed while each step's forward runs and supplied late (the fake writes them into
    // the recorded plan); the step in which a grammar turns out complete withholds that row's mask.
    let masked = 0;
    let withheld = 0;
    for (const plan of model.plans) {
      for (const row of plan.rows) {
        const bm = row.sample?.bitmask;
        if (row.requestId === 'free') expect(bm).toBeUndefined();
        else if (bm === 'pending') withheld++;
        else if (row.sample) {
          masked++;
          expect(bm![0]).toBe((Number(row.requestId.slice(1)) + 1) * 1000);
        }
      }
      if (plan.rows.some((r) => r.requestId !== 'free' && r.sample)) expect(plan.pendingMasks).toBeDefined();
    }
    expect(masked).toBe(18);
    expect(withheld).toBe(3);
  });

  it('a dead end fails only that request, with code grammar_failed', async () => {
    const { engine } = makeEngine();
    const g = new ScriptedGrammar(256, 3, 'dead');
    const [dead, free] = await Promise.all([
      collect(engine.submit({ promptIds: bytes('x'), params: params(), grammar: g })),
      collect(engine.submit({ promptIds: bytes('y'), params: params({ maxTokens: 8 }) })),
    ]);
    expect(dead.error).toBeInstanceOf(EngineRequestError);
    expect(dead.error?.code).toBe('grammar_failed');
    expect(dead.done).toBeUndefined();
    expect(g.disposed).toBe(1);
    expect(free.done?.finishReason).toBe('length');
    expect(engine.stats().requests.error).toBe(1);
  });

  it('a token the grammar rejects fails the request (never reported as success)', async () => {
    const { engine } = makeEngine();
    const g = new ScriptedGrammar(256, 2, 'reject');
    const r = await collect(engine.submit({ promptIds: bytes('x'), params: params(), grammar: g }));
    expect(r.error?.code).toBe('grammar_failed');
    expect(g.disposed).toBe(1);
  });

  it('max_tokens inside the object: "length"; exactly at completion: "stop"', async () => {
    const { engine } = makeEngine();
    const long = new ScriptedGrammar(256, 10);
    const exact = new ScriptedGrammar(256, 5);
    const [a, b] = await Promise.all([
      collect(engine.submit({ promptIds: bytes('a'), params: params({ maxTokens: 5 }), grammar: long })),
      collect(engine.submit({ promptIds: bytes('b'), params: params({ maxTokens: 5 }), grammar: exact })),
    ]);
    expect(a.done?.finishReason).toBe('length');
    expect(b.done?.finishReason).toBe('stop');
    expect(a.tokens.length).toBe(5);
    expect(b.tokens.length).toBe(5);
    expect(long.disposed + exact.disposed).toBe(2);
  });

  it('frees the matcher on abort, on a failed step, and when submit refuses the request', async () => {
    const { engine } = makeEngine({ stepMs: 2 });
    const g = new ScriptedGrammar(256, 1000);
    const h = engine.submit({ promptIds: bytes('a'), params: params({ maxTokens: 500 }), grammar: g });
    await sleep(20);
    h.abort();
    expect((await collect(h)).done?.finishReason).toBe('abort');
    expect(g.disposed).toBe(1);

    let fail = true;
    const bad = makeEngine({}, { faults: { step: () => { if (fail) throw new Error('boom'); } } });
    const g2 = new ScriptedGrammar(256, 3);
    const r2 = await collect(bad.engine.submit({ promptIds: bytes('a'), params: params(), grammar: g2 }));
    fail = false;
    expect(r2.error?.code).toBe('step_failed');
    expect(g2.disposed).toBe(1);

    const g3 = new ScriptedGrammar(256, 3);
    expect(() => engine.submit({ promptIds: [], params: params(), grammar: g3 })).toThrow();
    expect(g3.disposed).toBe(1);
  });

  it('over HTTP: a grammar dead end is a typed error (500, code grammar_failed), before and after the stream starts', async () => {
    const provider: GrammarProvider = { matcher: async () => new ScriptedGrammar(256, 3, 'dead') };
    const { server, url } = await startFakeServer({}, {}, { grammar: provider });
    try {
      const rf = { type: 'json_schema', json_schema: { name: 's', schema: { type: 'object' } } };
      const r = await post(url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], response_format: rf, max_tokens: 8 });
      expect(r.status).toBe(500);
      expect(r.json().error.code).toBe('grammar_failed');
      const s = await post(url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], response_format: rf, max_tokens: 8, stream: true });
      expect(s.text).toContain('"finish_reason":"error"');
      expect(s.text).toContain('grammar_failed');
      // Without a grammar provider, a json response_format is refused, not ignored.
      const { server: plain, url: url2 } = await startFakeServer();
      const p = await post(url2, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], response_format: { type: 'json_object' } });
      expect(p.status).toBe(400);
      await plain.close(100);
    } finally {
      await server.close(100);
    }
  });
});
