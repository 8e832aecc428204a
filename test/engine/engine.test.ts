// The engine loop on the fake runner: batch and seeded-sampling invariance, preemption, prefix
// cache, stops, cancellation, failure semantics (step, sampler, detokenizer, watchdog), shutdown.
import { describe, expect, it } from 'vitest';
import { EngineUnavailableError } from '../../src/errors/request-errors.js';
import { InvalidRequestError } from '../../src/errors/request-errors.js';
import { bytes, collect, makeEngine, params, randomPrompts, sleep, type Collected } from './helpers.js';

describe('Engine: correctness under batching', () => {
  it('greedy outputs of 32 concurrent requests equal their solo outputs', async () => {
    const { engine, model } = makeEngine({ numBlocks: 512 }, { maxBatchedTokens: 24, maxNumSeqs: 16 });
    const prompts = randomPrompts(32, 3, 40);
    const results = await Promise.all(prompts.map((p, i) => collect(engine.submit({ promptIds: p, params: params({ maxTokens: 8 + (i % 9) }) }))));
    results.forEach((r, i) => {
      expect(r.error).toBeUndefined();
      expect(r.tokens).toEqual(model.greedy(prompts[i]!, 8 + (i % 9)));
      expect(r.done!.finishReason).toBe('length');
    });
    // It really batched: some step mixed prefill chunks and decodes, none exceeded the budget.
    const sizes = model.plans.map((p) => p.rows.reduce((s, r) => s + r.tokens.length, 0));
    expect(Math.max(...sizes)).toBeLessThanOrEqual(24);
    expect(model.plans.some((p) => p.rows.some((r) => r.tokens.length > 1) && p.rows.some((r) => r.tokens.length === 1))).toBe(true);
    expect(Math.max(...model.plans.map((p) => p.rows.length))).toBeLessThanOrEqual(16);
    expect(engine.stats().kv.usedBlocks).toBe(0);
  });

  it('is invariant to random join times, and seeded sampling is too', async () => {
    const { engine, model } = makeEngine({ numBlocks: 512, stepMs: 1 }, { maxBatchedTokens: 16 });
    const prompts = randomPrompts(16, 2, 30, 7);
    const solo: Collected[] = [];
    for (const p of prompts) solo.push(await collect(engine.submit({ promptIds: p, params: params({ temperature: 0.8, seed: p.length, maxTokens: 12 }) })));
    const mixed = await Promise.all(
      prompts.map(async (p, i) => {
        await sleep((i * 37) % 23);
        return collect(engine.submit({ promptIds: p, params: params({ temperature: 0.8, seed: p.length, maxTokens: 12 }) }));
      }),
    );
    mixed.forEach((r, i) => expect(r.tokens).toEqual(solo[i]!.tokens));
    // Different seeds give different samples (the fake really samples).
    const other = await collect(engine.submit({ promptIds: prompts[0]!, params: params({ temperature: 0.8, seed: 999, maxTokens: 12 }) }));
    expect(other.tokens).not.toEqual(solo[0]!.tokens);
    // Greedy with staggered joins.
    const greedy = await Promise.all(
      prompts.map(async (p, i) => {
        await sleep((i * 13) % 17);
        return collect(engine.submit({ promptIds: p, params: params({ maxTokens: 10 }) }));
      }),
    );
    greedy.forEach((r, i) => expect(r.tokens).toEqual(model.greedy(prompts[i]!, 10)));
  });

  it('counts the steps the device reports it ran ahead (stats().stepsAhead)', async () => {
    const { engine, model } = makeEngine();
    const step = model.step.bind(model);
    let calls = 0;
    // Every second step reports that its forward had started before it was asked for (CUDA's step ahead).
    model.step = async (plan) => {
      const r = await step(plan);
      return ++calls % 2 === 0 ? { ...r, timings: { ...r.timings, ahead: true } } : r;
    };
    const r = await collect(engine.submit({ promptIds: [1, 2, 3], params: params({ maxTokens: 6 }) }));
    expect(r.tokens).toHaveLength(6);
    expect(engine.stats().steps).toBe(calls);
    expect(engine.stats().stepsAhead).toBe(Math.floor(calls / 2));
  });

  it('preempts and recomputes when the pool is full, without changing outputs', async () => {
    // 24 blocks of 4 = 96 slots for 12 requests wanting up to 40 tokens each.
    const { engine, model } = makeEngine({ numBlocks: 24, blockSize: 4 }, { maxBatchedTokens: 32, maxNumSeqs: 12 });
    const prompts = randomPrompts(12, 8, 20, 3);
    const results = await Promise.all(prompts.map((p) => collect(engine.submit({ promptIds: p, params: params({ maxTokens: 20 }) }))));
    results.forEach((r, i) => expect(r.tokens).toEqual(model.greedy(prompts[i]!, 20)));
    expect(engine.stats().preemptions).toBeGreaterThan(0);
    expect(results.some((r) => r.done!.preemptions > 0)).toBe(true);
    expect(engine.stats().kv.usedBlocks).toBe(0);
  });

  it('a prefix-cache hit gives the same output as a cold run', async () => {
    const { engine, model } = makeEngine({ blockSize: 4 }, { maxBatchedTokens: 64 });
    const prompt = randomPrompts(1, 30, 30, 11)[0]!;
    const cold = await collect(engine.submit({ promptIds: prompt, params: params({ maxTokens: 10 }) }));
    expect(cold.done!.usage.cachedTokens).toBe(0);
    const warm = await collect(engine.submit({ promptIds: prompt, params: params({ maxTokens: 10 }) }));
    expect(warm.done!.usage.cachedTokens).toBe(28); // 7 full blocks; the 30th token is computed
    expect(warm.tokens).toEqual(cold.tokens);
    // A longer prompt sharing the prefix (plus the cold run's output as context) hits too.
    const longer = [...prompt, ...cold.tokens, 1, 2, 3];
    const ext = await collect(engine.submit({ promptIds: longer, params: params({ maxTokens: 10 }) }));
    expect(ext.done!.usage.cachedTokens).toBeGreaterThanOrEqual(36);
    expect(ext.tokens).toEqual(model.greedy(longer, 10));
    const st = engine.stats().prefixCache;
    expect(st.hitTokens).toBeGreaterThan(0);
    // With the cache off, nothing is reused.
    const off = makeEngine({ blockSize: 4 }, { enablePrefixCache: false });
    await collect(off.engine.submit({ promptIds: prompt, params: params({ maxTokens: 4 }) }));
    const again = await collect(off.engine.submit({ promptIds: prompt, params: params({ maxTokens: 4 }) }));
    expect(again.done!.usage.cachedTokens).toBe(0);
  });

  it('stops on eos, stop strings (held back across tokens) and max_tokens; isolates per-request params', async () => {
    const { engine, model } = makeEngine({ eosEvery: 9 });
    const prompt = bytes('hello');
    const full = model.greedy(prompt, 60);
    const ended = await collect(engine.submit({ promptIds: prompt, params: params({ maxTokens: 60 }) }));
    expect(ended.tokens).toEqual(full);
    if (full[full.length - 1] === 0) expect(ended.done!.finishReason).toBe('stop');
    const text = Buffer.from(full.filter((t) => t !== 0)).toString();
    // A stop string made of generated text: output is truncated before it.
    const stop = text.slice(3, 5);
    const [stopped, plain] = await Promise.all([
      collect(engine.submit({ promptIds: prompt, params: params({ maxTokens: 60, stop: [stop] }) })),
      collect(engine.submit({ promptIds: prompt, params: params({ maxTokens: 2 }) })),
    ]);
    expect(stopped.done!.finishReason).toBe('stop');
    expect(stopped.text).toBe(text.slice(0, text.indexOf(stop)));
    expect(plain.tokens).toEqual(full.slice(0, 2));
    expect(plain.done!.finishReason).toBe(full[1] === 0 ? 'stop' : 'length');
  });

  it('caps output at the context length', async () => {
    const { engine } = makeEngine({ contextLength: 20 });
    const r = await collect(engine.submit({ promptIds: randomPrompts(1, 15, 15)[0]!, params: params({ maxTokens: 100 }) }));
    expect(r.tokens.length).toBe(5);
    expect(r.done!.finishReason).toBe('length');
  });

  it('rejects prompts that cannot run before admission', () => {
    const { engine } = makeEngine({ contextLength: 20, vocabSize: 256, numBlocks: 3, blockSize: 4 });
    expect(() => engine.submit({ promptIds: [], params: params() })).toThrow(InvalidRequestError);
    expect(() => engine.submit({ promptIds: new Array(20).fill(97), params: params() })).toThrow(/context is 20 tokens/);
    expect(() => engine.submit({ promptIds: [97, 256], params: params() })).toThrow(/outside the vocabulary/);
    expect(() => engine.submit({ promptIds: new Array(12).fill(97), params: params() })).toThrow(/KV cache holds 12/);
  });

  it('refuses work beyond the waiting queue with a retryable error', async () => {
    const { engine } = makeEngine({ stepMs: 5 }, { maxNumSeqs: 1, maxWaiting: 2 });
    const hs = [97, 98].map((t) => engine.submit({ promptIds: [t], params: params() }));
    expect(engine.stats().waiting).toBe(2);
    expect(() => engine.submit({ promptIds: [100], params: params() })).toThrow(EngineUnavailableError);
    await Promise.all(hs.map(collect));
  });
});

describe('Engine: cancellation and failures', () => {
  it('abort ends the stream and frees the blocks before the next step', async () => {
    const { engine, model } = makeEngine({ stepMs: 2 }, { maxBatchedTokens: 8 });
    const keep = engine.submit({ promptIds: bytes('keep going'), params: params({ maxTokens: 40 }) });
    const h = engine.submit({ promptIds: randomPrompts(1, 30, 30)[0]!, params: params({ maxTokens: 200 }) });
    const got = collect(h);
    await sleep(15);
    const before = engine.stats().kv.usedBlocks;
    h.abort();
    expect(engine.stats().kv.usedBlocks).toBeLessThan(before);
    const r = await got;
    expect(r.done!.finishReason).toBe('abort');
    const nPlans = model.plans.length;
    await sleep(10);
    // No later step mentions the aborted request.
    expect(model.plans.slice(nPlans).some((p) => p.rows.some((row) => row.requestId === h.id))).toBe(false);
    const k = await collect(keep);
    expect(k.tokens).toEqual(model.greedy(bytes('keep going'), 40));
    expect(engine.stats().kv.usedBlocks).toBe(0);
    // generate() aborts through a signal too.
    const ac = new AbortController();
    const it = engine.generate({ promptIds: bytes('x'), params: params({ maxTokens: 500 }) }, ac.signal);
    setTimeout(() => ac.abort(), 10);
    const viaSignal = await collect(it);
    expect(viaSignal.done!.finishReason).toBe('abort');
  });

  it('a step that throws once is rerun without failing anyone; outputs are unchanged and the loop goes on', async () => {
    let stepNo = 0;
    const failed = new Set<string>();
    const { engine, model } = makeEngine({ stepMs: 1 }, {
      maxBatchedTokens: 6,
      faults: {
        step: (plan) => {
          if (++stepNo === 4) {
            for (const r of plan.rows) failed.add(r.requestId);
            throw new Error('injected forward failure');
          }
        },
      },
    });
    const prompts = randomPrompts(6, 3, 12, 5);
    const handles = prompts.map((p) => engine.submit({ promptIds: p, params: params({ maxTokens: 6 }) }));
    const results = await Promise.all(handles.map(collect));
    expect(failed.size).toBeGreaterThan(1);
    // The failure did not follow any row: the halves of the step ran, and everyone finished.
    results.forEach((r, i) => expect(r.tokens).toEqual(model.greedy(prompts[i]!, 6)));
    expect(engine.stats().stepFailures).toBe(1);
    expect(engine.stats().kv.usedBlocks).toBe(0);
    expect(engine.health().ok).toBe(true);
    const next = await collect(engine.submit({ promptIds: prompts[0]!, params: params({ maxTokens: 6 }) }));
    expect(next.tokens).toEqual(model.greedy(prompts[0]!, 6));
  });

  it('sampler and detokenizer faults fail only their request', async () => {
    const { engine, model } = makeEngine({}, {
      faults: {
        sampler: (id) => {
          if (id === 'bad-sampler') throw new Error('injected sampler fault');
        },
        detokenizer: (id) => {
          if (id === 'bad-detok') throw new Error('injected detokenizer fault');
        },
      },
    });
    const p = bytes('abc');
    const [a, b, c] = await Promise.all([
      collect(engine.submit({ id: 'bad-sampler', promptIds: p, params: params() })),
      collect(engine.submit({ id: 'bad-detok', promptIds: p, params: params() })),
      collect(engine.submit({ id: 'good', promptIds: p, params: params() })),
    ]);
    expect(a.error!.code).toBe('sampler_failed');
    expect(b.error!.code).toBe('detokenizer_failed');
    expect(c.tokens).toEqual(model.greedy(p, 16));
    expect(engine.stats().kv.usedBlocks).toBe(0);
  });

  it('a native row error fails that row only', async () => {
    const { engine, model } = makeEngine();
    const orig = model.step.bind(model);
    model.step = async (plan) => {
      const res = await orig(plan);
      for (const r of res.rows) if (r.requestId === 'x') r.error = 'native sampler exploded';
      return res;
    };
    const [x, y] = await Promise.all([
      collect(engine.submit({ id: 'x', promptIds: [97, 98], params: params() })),
      collect(engine.submit({ id: 'y', promptIds: [97, 98], params: params() })),
    ]);
    expect(x.error!.message).toMatch(/native sampler exploded/);
    expect(y.tokens.length).toBe(16);
  });

  it('KV of a row the native side failed never enters the prefix cache', async () => {
    const { engine, model } = makeEngine({ blockSize: 4 });
    const orig = model.step.bind(model);
    model.step = async (plan) => {
      const res = await orig(plan);
      for (const r of res.rows) if (r.requestId === 'broken') r.error = 'forward failed for this row';
      return res;
    };
    const prompt = randomPrompts(1, 13, 13, 21)[0]!;
    const bad = await collect(engine.submit({ id: 'broken', promptIds: prompt, params: params() }));
    expect(bad.error!.code).toBe('sampler_failed');
    const good = await collect(engine.submit({ promptIds: prompt, params: params({ maxTokens: 4 }) }));
    expect(good.done!.usage.cachedTokens).toBe(0);
    expect(good.tokens).toEqual(model.greedy(prompt, 4));
  });

  it('the watchdog fails a hung step within its bound, reports unhealthy, and recovers', async () => {
    let hang = true;
    const { engine, model } = makeEngine({}, {
      stepTimeoutMs: 100,
      faults: { step: () => (hang ? ((hang = false), sleep(1500)) : undefined) },
    });
    const t0 = performance.now();
    const r = await collect(engine.submit({ promptIds: [97], params: params() }));
    expect(performance.now() - t0).toBeLessThan(1000); // 100 ms bound; slack for a loaded machine
    expect(r.error!.code).toBe('watchdog');
    expect(engine.health().ok).toBe(false);
    expect(() => engine.submit({ promptIds: [97], params: params() })).toThrow(EngineUnavailableError);
    for (let i = 0; i < 100 && !engine.health().ok; i++) await sleep(50);
    expect(engine.health().ok).toBe(true);
    expect(engine.stats().watchdogTrips).toBe(1);
    const ok = await collect(engine.submit({ promptIds: [97], params: params() }));
    expect(ok.tokens).toEqual(model.greedy([97], 16));
  });

  it('every request ends under random aborts and faults', async () => {
    let n = 0;
    const { engine } = makeEngine({ numBlocks: 40, stepMs: 1 }, {
      maxBatchedTokens: 16,
      maxNumSeqs: 8,
      faults: {
        step: () => {
          if (++n % 17 === 0) throw new Error('periodic step fault');
        },
        sampler: (_id, token) => {
          if (token === 113) throw new Error('q is cursed');
        },
      },
    });
    const prompts = randomPrompts(40, 1, 30, 9);
    const handles = prompts.map((p, i) => engine.submit({ promptIds: p, params: params({ maxTokens: 5 + (i % 20), temperature: i % 2 ? 0.7 : 0 }) }));
    handles.forEach((h, i) => {
      if (i % 5 === 0) setTimeout(() => h.abort(), i);
    });
    const results = await Promise.race([Promise.all(handles.map(collect)), sleep(20_000).then(() => null)]);
    expect(results).not.toBeNull();
    for (const r of results!) expect(r.done !== undefined || r.error !== undefined).toBe(true);
    const st = engine.stats();
    expect(st.running + st.waiting).toBe(0);
    expect(st.kv.usedBlocks).toBe(0);
  });

  it('soak: thousands of requests leave no state behind', async () => {
    const { engine, model } = makeEngine({ numBlocks: 64, blockSize: 4 }, { maxBatchedTokens: 64, maxNumSeqs: 16, maxWaiting: 4096 });
    const prompts = randomPrompts(2000, 1, 12, 77);
    const results = await Promise.all(prompts.map((p, i) => collect(engine.submit({ promptIds: p, params: params({ maxTokens: 1 + (i % 5) }) }))));
    results.forEach((r, i) => expect(r.tokens).toEqual(model.greedy(prompts[i]!, 1 + (i % 5))));
    const st = engine.stats();
    expect(st.running + st.waiting).toBe(0);
    expect(st.kv.usedBlocks).toBe(0);
    expect(st.kv.cachedBlocks).toBeLessThanOrEqual(64);
    expect(st.requests.length).toBe(2000);
  });

  it('shutdown stops admitting, lets in-flight requests finish within the grace period, fails the rest', async () => {
    const { engine } = makeEngine({ stepMs: 5 }, { maxNumSeqs: 1 });
    const quick = engine.submit({ promptIds: [97], params: params({ maxTokens: 2 }) });
    const slow = engine.submit({ promptIds: [98], params: params({ maxTokens: 1000 }) });
    const results = Promise.all([collect(quick), collect(slow)]);
    await engine.shutdown(100);
    expect(() => engine.submit({ promptIds: [97], params: params() })).toThrow(EngineUnavailableError);
    const [q, s] = await results;
    expect(q.done!.finishReason).toBe('length');
    expect(s.error!.code).toBe('shutdown');
  });
});
