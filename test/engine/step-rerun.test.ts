// A step that throws for its whole batch is rerun without the rows that make it fail (issue 38): only
// those rows' requests fail, their neighbours finish with exactly their solo outputs (greedy and
// seeded), the reruns are bounded, and constrained rows of a rerun still get their late masks.
import { describe, expect, it } from 'vitest';
import type { EngineOptions } from '../../src/engine/engine.js';
import type { RequestGrammar } from '../../src/engine/grammar/request-grammar.js';
import type { SamplingParams } from '../../src/engine/sampling-params.js';
import type { NativeStepPlan } from '../../src/native/types.js';
import { collect, makeEngine, params, randomPrompts } from './helpers.js';

interface Job {
  id: string;
  prompt: number[];
  params: SamplingParams;
}

const jobs = (n: number, seed: number): Job[] =>
  randomPrompts(n, 2, 14, seed).map((prompt, i) => ({
    id: `r${i}`,
    prompt,
    params: params({ maxTokens: 5 + (i % 7), ...(i % 3 === 1 ? { temperature: 0.8, seed: 40 + i } : {}) }),
  }));

/** Each job run alone on a fault-free engine: what it must produce whatever it is batched with. */
async function soloRuns(list: Job[]): Promise<Map<string, number[]>> {
  const { engine } = makeEngine({ stepMs: 1 });
  const out = new Map<string, number[]>();
  for (const j of list) out.set(j.id, (await collect(engine.submit({ id: j.id, promptIds: j.prompt, params: j.params }))).tokens);
  return out;
}

/** An engine whose step throws whenever `poisoned` says a row of the plan is bad; counts native calls. */
function faultyEngine(poisoned: (row: NativeStepPlan['rows'][number]) => boolean, opts: Partial<EngineOptions> = {}) {
  let calls = 0;
  const made = makeEngine({ stepMs: 1 }, {
    maxNumSeqs: 64,
    maxBatchedTokens: 512,
    faults: {
      step: (plan) => {
        calls++;
        const bad = plan.rows.find(poisoned);
        if (bad) throw new Error(`injected fault for ${bad.requestId}`);
      },
    },
    ...opts,
  });
  return { ...made, calls: () => calls };
}

describe('Engine: a step that throws is rerun without its failing rows', () => {
  it('a fault that follows one row fails only that request; neighbours equal their solo runs', async () => {
    const list = jobs(12, 3);
    const solo = await soloRuns(list);
    // r5 breaks its step from its third decode on: it has KV and output by then.
    const { engine, calls } = faultyEngine((r) => r.requestId === 'r5' && r.contextLen >= list[5]!.prompt.length + 2);
    const results = await Promise.all(list.map((j) => collect(engine.submit({ id: j.id, promptIds: j.prompt, params: j.params }))));
    results.forEach((r, i) => {
      if (i === 5) {
        expect(r.error!.code).toBe('step_failed');
        expect(r.error!.message).toMatch(/injected fault for r5/);
        expect(r.deltas.length).toBeGreaterThan(0);
      } else {
        expect(r.error, list[i]!.id).toBeUndefined();
        expect(r.tokens, list[i]!.id).toEqual(solo.get(list[i]!.id));
      }
    });
    const st = engine.stats();
    // One failed step of 12 rows, then bisection down to r5: at most 2 reruns per halving.
    expect(st.stepFailures).toBeGreaterThanOrEqual(1);
    expect(st.stepFailures).toBeLessThanOrEqual(1 + 4);
    expect(calls()).toBeLessThan(60);
    expect(st.kv.usedBlocks).toBe(0);
    expect(engine.health().ok).toBe(true);
  });

  it('two rows that each break the step both fail alone', async () => {
    const list = jobs(16, 8);
    const solo = await soloRuns(list);
    const bad = new Set(['r2', 'r11']);
    const { engine } = faultyEngine((r) => bad.has(r.requestId) && r.sample !== undefined);
    const results = await Promise.all(list.map((j) => collect(engine.submit({ id: j.id, promptIds: j.prompt, params: j.params }))));
    results.forEach((r, i) => {
      const id = list[i]!.id;
      if (bad.has(id)) expect(r.error?.message, id).toMatch(new RegExp(`injected fault for ${id}`));
      else expect(r.tokens, id).toEqual(solo.get(id));
    });
    expect(engine.stats().kv.usedBlocks).toBe(0);
  });

  it('a step that fails whatever its rows fails them after a bounded number of reruns; the loop goes on', async () => {
    let broken = true;
    const { engine, model, calls } = faultyEngine(() => broken);
    const list = jobs(40, 13);
    const results = await Promise.all(list.map((j) => collect(engine.submit({ id: j.id, promptIds: j.prompt, params: j.params }))));
    for (const r of results) expect(r.error?.code).toBe('step_failed');
    // The first step and at most 16 reruns; none of the 40 requests is left waiting.
    expect(calls()).toBeLessThanOrEqual(1 + 16);
    expect(engine.stats().kv.usedBlocks).toBe(0);
    broken = false;
    const ok = await collect(engine.submit({ promptIds: list[0]!.prompt, params: params({ maxTokens: 4 }) }));
    expect(ok.tokens).toEqual(model.greedy(list[0]!.prompt, 4));
  });

  it('a request aborted while its failed step is rerun leaves it; the rest finish unchanged', async () => {
    const list = jobs(10, 17);
    const solo = await soloRuns(list);
    let aborted = false;
    const made = faultyEngine((r) => {
      if (r.requestId !== 'r6' || r.contextLen < list[6]!.prompt.length + 1) return false;
      if (!aborted) {
        aborted = true;
        made.engine.abort('r1'); // mid-failure: its blocks are freed before any rerun
      }
      return true;
    });
    const results = await Promise.all(list.map((j) => collect(made.engine.submit({ id: j.id, promptIds: j.prompt, params: j.params }))));
    expect(aborted).toBe(true);
    results.forEach((r, i) => {
      const id = list[i]!.id;
      if (id === 'r6') expect(r.error?.message).toMatch(/injected fault for r6/);
      else if (id === 'r1') expect(r.done?.finishReason).toBe('abort');
      else expect(r.tokens, id).toEqual(solo.get(id));
    });
    expect(made.engine.stats().kv.usedBlocks).toBe(0);
  });

  it('constrained rows of a rerun get their late masks; their grammars see each token once', async () => {
    const list = jobs(8, 21).map((j) => ({ ...j, params: { ...j.params, temperature: 0 } }));
    const solo = await soloRuns(list);
    const accepted = new Map<string, number[]>();
    const grammar = (id: string): RequestGrammar => ({
      next: async () => ({ kind: 'mask', bitmask: new Int32Array(8).fill(-1) }),
      accept: (t) => (accepted.get(id) ?? accepted.set(id, []).get(id)!).push(t) > 0,
      dispose: () => undefined,
    });
    const { engine, model } = faultyEngine((r) => r.requestId === 'r3' && r.contextLen > 0);
    const results = await Promise.all(
      list.map((j, i) => collect(engine.submit({ id: j.id, promptIds: j.prompt, params: j.params, grammar: i % 2 === 0 ? grammar(j.id) : undefined }))),
    );
    results.forEach((r, i) => {
      const id = list[i]!.id;
      if (id === 'r3') return expect(r.error?.message).toMatch(/injected fault for r3/);
      expect(r.error, `${id}: ${r.error?.message}`).toBeUndefined();
      expect(r.tokens, id).toEqual(solo.get(id));
      if (i % 2 === 0) expect(accepted.get(id), id).toEqual(r.tokens);
    });
    // Reruns went through the two-phase path: their constrained rows were planned 'pending'.
    expect(model.plans.some((p) => p.pendingMasks !== undefined && p.rows.length < list.length)).toBe(true);
  });
});
