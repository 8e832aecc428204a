// `rapid serve --data-parallel 2` on the CPU: two real engine processes (qwen2-f32 fixture) behind
// one HTTP endpoint. Greedy outputs equal a single engine's; sessions that share a prompt prefix stay
// on one engine (prefix-cache hits) while distinct sessions spread over both; json_schema compiles in
// the engine that runs the request (a bad schema is still a 400); one engine killed: the other serves.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import type { DataParallelEngine } from '../../src/engine-host/data-parallel.js';
import type { EngineLike } from '../../src/engine/engine.js';
import type { HostModel } from '../../src/engine-host/engine-host.js';
import { nativeAvailable } from '../helpers/addon.js';
import { loadFixture } from '../helpers/fixtures.js';
import { post, raw } from '../server/helpers.js';

const MODEL = 'm';
const SERVE = { port: 0, threads: 1, kvCacheMemory: 8 << 20, blockSize: 16, maxNumSeqs: 16, servedModelName: MODEL } as const;
const SCHEMA = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer' } }, required: ['name', 'age'], additionalProperties: false };

const session = (s: number) => `Session ${s} notes: ${Array.from({ length: 40 }, (_, i) => `w${(s * 37 + i * 11) % 500}`).join(' ')}.`;

async function complete(url: string, prompt: string, maxTokens = 8): Promise<string> {
  const r = await post(url, '/v1/completions', { model: MODEL, prompt, temperature: 0, max_tokens: maxTokens });
  expect(r.status, r.text).toBe(200);
  return r.json().choices[0].text as string;
}

async function prefixHits(url: string): Promise<{ hits: number; queries: number }> {
  const m = (await raw(url, '/metrics')).text;
  return { hits: Number(/^rapid_prefix_cache_hits_total\{[^}]*\} (\d+)/m.exec(m)![1]), queries: Number(/^rapid_prefix_cache_queries_total\{[^}]*\} (\d+)/m.exec(m)![1]) };
}

describe.skipIf(!nativeAvailable())('--data-parallel 2 (two engine processes, qwen2-f32)', () => {
  const fx = loadFixture('qwen2-f32');
  let single: RunningServer;
  let dp: RunningServer<EngineLike, HostModel>;
  let engine: DataParallelEngine;

  beforeAll(async () => {
    [single, dp] = await Promise.all([startServer(fx.dir, SERVE), startServer(fx.dir, { ...SERVE, dataParallel: 2 })]);
    engine = dp.engine as DataParallelEngine;
  }, 120_000);
  afterAll(async () => {
    await Promise.all([single?.close(1000), dp?.close(1000)]);
  });

  it('answers as one engine does, keeps shared prefixes on one engine and spreads sessions', async () => {
    const before = await prefixHits(dp.url);
    const prompts = Array.from({ length: 4 }, (_, s) => Array.from({ length: 3 }, (_, q) => `${session(s)} Question ${q}:`)).flat();
    const got = await Promise.all(prompts.map((p) => complete(dp.url, p)));
    for (const [i, p] of prompts.entries()) expect(got[i]).toBe(await complete(single.url, p)); // greedy: same text
    // Second turn of every session, sequentially: each lands where its prefix is. (The first turns ran concurrently,
    // so how often they hit each other's blocks depends on timing: the hit rate is measured on the second turns.)
    const mid = await prefixHits(dp.url);
    expect(mid.queries).toBeGreaterThan(before.queries); // /metrics sums both engines
    const routedBefore = [...engine.routed];
    for (let s = 0; s < 4; s++) await complete(dp.url, `${session(s)} Question 9:`);
    expect(engine.routed.reduce((a, b) => a + b, 0) - routedBefore.reduce((a, b) => a + b, 0)).toBe(4);
    expect(Math.min(...engine.routed)).toBeGreaterThan(0); // both engines took work
    const after = await prefixHits(dp.url);
    expect((after.hits - mid.hits) / (after.queries - mid.queries)).toBeGreaterThan(0.5);
  });

  it('compiles json_schema in the chosen engine; a schema it refuses is a 400', async () => {
    const body = { model: MODEL, temperature: 0, max_tokens: 60, messages: [{ role: 'user', content: 'A person:' }], response_format: { type: 'json_schema', json_schema: { name: 'p', schema: SCHEMA } } };
    const r = await Promise.all([1, 2, 3, 4].map(() => post(dp.url, '/v1/chat/completions', body)));
    for (const x of r) {
      expect(x.status, x.text).toBe(200);
      if (x.json().choices[0].finish_reason === 'stop') expect(Object.keys(JSON.parse(x.json().choices[0].message.content)).sort()).toEqual(['age', 'name']);
    }
    const bad = await post(dp.url, '/v1/chat/completions', { ...body, response_format: { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'object', properties: { a: { $ref: '#/nope' } } } } } });
    expect(bad.status, bad.text).toBe(400);
  });

  it('keeps serving on the other engine when one engine process dies', async () => {
    const victim = engine.hostPids()[0]!;
    process.kill(victim, 'SIGKILL');
    await new Promise((r) => setTimeout(r, 200));
    for (let i = 0; i < 4; i++) expect((await complete(dp.url, `after the kill ${i} river`)).length).toBeGreaterThanOrEqual(0);
    expect((await raw(dp.url, '/health')).status).toBe(200);
  });
});
