// Several models behind one server, over real HTTP on real fixture checkpoints: three models with a
// --max-loaded-bytes that fits two, requests round-robin across all three (each answer equals the
// single-model server's), unknown names, load/unload behind the API key, a hot swap under load,
// and a load failure that reaches every waiting request and leaves the model retryable.
import OpenAI from 'openai';
import { cpSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type ServeOptions } from '../../src/cli/commands/serve.js';
import { startServePool } from '../../src/cli/serve-pool.js';
import { endpointOptionsFrom } from '../../src/app/start-server.js';
import { weightFileBytes, type PoolModelSpec, type RunningPoolServer } from '../../src/app/pool-server.js';
import { embeddedModelDir } from '../../src/models/default-model.js';
import { nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT, loadFixture } from '../helpers/fixtures.js';
import { servedClient } from '../helpers/openai-chat.js';

const KV = 4 << 20;
const OPTS: Partial<ServeOptions> = { threads: 2, precision: 'exact', kvCacheMemory: KV, blockSize: 16, maxNumSeqs: 8 };
const MODELS = [
  { id: 'qwen3', dir: loadFixture('qwen3-f32').dir },
  { id: 'qwen2', dir: loadFixture('qwen2-f32').dir },
  { id: 'tiny-vlm', dir: embeddedModelDir('models/tiny-vlm') },
];
const PROMPTS = ['river stone cloud', 'seven silver gardens'];
const KEY = 'multi-secret';

const spec = (m: { id: string; dir: string }, extra: Partial<PoolModelSpec> = {}): PoolModelSpec => ({ spec: m.dir, dir: m.dir, names: [m.id], pin: false, options: endpointOptionsFrom(OPTS), ...extra });
const estimate = (dir: string) => weightFileBytes(dir) + KV;

async function answer(client: OpenAI, model: string, prompt: string): Promise<string> {
  const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: prompt }], temperature: 0, max_tokens: 8 });
  return r.choices[0]!.message.content ?? '';
}

const post = (url: string, path: string, body?: unknown, key?: string) =>
  fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });

const statuses = async (url: string, key?: string) => {
  const r = await fetch(`${url}/v1/models`, { headers: key ? { authorization: `Bearer ${key}` } : {} });
  const list = (await r.json()) as { data: { id: string; status: string; object: string }[] };
  return Object.fromEntries(list.data.map((c) => [c.id, c.status]));
};

describe.skipIf(!nativeAvailable())('several models behind one server', () => {
  /** Each model's answer to each prompt from its own single-model server. */
  const expected = new Map<string, string>();
  let srv: RunningPoolServer;
  let client: OpenAI;
  let budget: number;

  beforeAll(async () => {
    for (const m of MODELS) {
      const one = await startServer(m.dir, { ...OPTS, port: 0, servedModelName: m.id });
      const c = servedClient(one.url);
      for (const p of PROMPTS) expected.set(`${m.id} ${p}`, await answer(c, m.id, p));
      await one.close(1000);
    }
    const sizes = MODELS.map((m) => estimate(m.dir)).sort((a, b) => b - a);
    budget = sizes[0]! + sizes[1]! + (1 << 20); // the two largest fit, all three do not
    expect(budget).toBeLessThan(sizes[0]! + sizes[1]! + sizes[2]!);
    srv = await startServePool(MODELS.map((m) => spec(m)), { port: 0, apiKey: KEY, maxLoadedBytes: budget, modelLoadTimeout: 60, shutdownGrace: 10 }, (l) => process.env.RAPID_TEST_LOG && console.log(new Date().toISOString(), l));
    client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60_000 });
  }, 240_000);
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('lists every configured model as available before any request', async () => {
    expect(await statuses(srv.url, KEY)).toEqual({ qwen3: 'available', qwen2: 'available', 'tiny-vlm': 'available' });
    const one = await fetch(`${srv.url}/v1/models/qwen2`, { headers: { authorization: `Bearer ${KEY}` } });
    expect(await one.json()).toMatchObject({ id: 'qwen2', object: 'model', owned_by: 'rapid', status: 'available' });
  });

  it('serves requests round-robin across three models within a budget of two: none fails, each answer is the single server\'s', async () => {
    const jobs = Array.from({ length: 18 }, (_, i) => ({ model: MODELS[i % 3]!.id, prompt: PROMPTS[Math.floor(i / 3) % 2]! }));
    let maxLoaded = 0;
    let maxUsed = 0;
    const watch = setInterval(() => {
      maxLoaded = Math.max(maxLoaded, srv.pool.loaded().length);
      maxUsed = Math.max(maxUsed, srv.pool.usedBytes());
    }, 5);
    // Four at a time: two models busy while the third waits for one of them to go idle.
    const results: { model: string; prompt: string; text: string }[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (next < jobs.length) {
          const j = jobs[next++]!;
          results.push({ ...j, text: await answer(client, j.model, j.prompt) });
        }
      }),
    ).finally(() => clearInterval(watch));
    expect(maxUsed).toBeLessThanOrEqual(budget);
    expect(results).toHaveLength(18);
    for (const r of results) expect(r.text, `${r.model}: ${r.prompt}`).toBe(expected.get(`${r.model} ${r.prompt}`));
    expect(maxLoaded).toBeLessThanOrEqual(2);
    expect(Object.values(await statuses(srv.url, KEY)).filter((s) => s === 'loaded').length).toBeLessThanOrEqual(2);
  }, 240_000);

  it('labels each loaded model\'s metrics', async () => {
    const text = await (await fetch(`${srv.url}/metrics`, { headers: { authorization: `Bearer ${KEY}` } })).text();
    const labels = [...text.matchAll(/^rapid_requests_running\{model="([^"]+)"\}/gm)].map((m) => m[1]);
    expect(labels.length).toBeGreaterThanOrEqual(1);
    for (const l of labels) expect(MODELS.map((m) => m.id)).toContain(l);
    expect(text.match(/^# HELP rapid_requests_running /gm)).toHaveLength(1);
  });

  it('answers an unknown model with a 404 naming the served ones', async () => {
    const r = await post(srv.url, '/v1/chat/completions', { model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] }, KEY);
    expect(r.status).toBe(404);
    const body = (await r.json()) as { error: { message: string; code: string } };
    expect(body.error.code).toBe('model_not_found');
    expect(body.error.message).toContain("'gpt-4o'");
    for (const m of MODELS) expect(body.error.message).toContain(`'${m.id}'`);
    expect((await post(srv.url, '/v1/models/gpt-4o/load', undefined, KEY)).status).toBe(404);
  });

  it('loads and unloads behind the API key', async () => {
    expect((await post(srv.url, '/v1/models/qwen2/unload')).status).toBe(401);
    expect((await post(srv.url, '/v1/models/qwen2/load', undefined, 'wrong')).status).toBe(401);
    const loaded = await post(srv.url, '/v1/models/qwen2/load', undefined, KEY);
    expect(loaded.status).toBe(200);
    expect(await loaded.json()).toMatchObject({ id: 'qwen2', status: 'loaded' });
    expect((await statuses(srv.url, KEY)).qwen2).toBe('loaded');
    const unloaded = await post(srv.url, '/v1/models/qwen2/unload', undefined, KEY);
    expect(unloaded.status).toBe(200);
    expect(await unloaded.json()).toMatchObject({ id: 'qwen2', status: 'available' });
    expect((await statuses(srv.url, KEY)).qwen2).toBe('available');
    expect((await post(srv.url, '/v1/models/qwen2/load', { spec: 42 }, KEY)).status).toBe(400);
    expect((await post(srv.url, '/v1/models/qwen2/load', { model: 'x' }, KEY)).status).toBe(400);
    // And the next request loads it again.
    expect(await answer(client, 'qwen2', PROMPTS[0]!)).toBe(expected.get(`qwen2 ${PROMPTS[0]}`));
  }, 120_000);

  it('unload drains the requests in flight first', async () => {
    const inflight = Array.from({ length: 4 }, (_, i) => answer(client, 'qwen3', PROMPTS[i % 2]!));
    await new Promise((r) => setTimeout(r, 30));
    const unloaded = await post(srv.url, '/v1/models/qwen3/unload', undefined, KEY);
    expect(unloaded.status).toBe(200);
    const texts = await Promise.all(inflight);
    texts.forEach((t, i) => expect(t).toBe(expected.get(`qwen3 ${PROMPTS[i % 2]}`)));
  }, 120_000);

  it('swaps an engine under load without dropping a request', async () => {
    await post(srv.url, '/v1/models/tiny-vlm/unload', undefined, KEY); // room for two qwen engines side by side
    expect(await answer(client, 'qwen3', PROMPTS[0]!)).toBe(expected.get(`qwen3 ${PROMPTS[0]}`));
    let stop = false;
    const load = Array.from({ length: 3 }, async () => {
      const outs: string[] = [];
      while (!stop) outs.push(await answer(client, 'qwen3', PROMPTS[0]!));
      return outs;
    });
    await new Promise((r) => setTimeout(r, 100));
    // Reload in place, then swap to another checkpoint under the same name.
    const reload = await post(srv.url, '/v1/models/qwen3/load', {}, KEY);
    expect(reload.status).toBe(200);
    const swap = await post(srv.url, '/v1/models/qwen3/load', { spec: MODELS[1]!.dir }, KEY);
    expect(swap.status).toBe(200);
    expect(await swap.json()).toMatchObject({ id: 'qwen3', status: 'loaded', spec: MODELS[1]!.dir });
    stop = true;
    const outs = (await Promise.all(load)).flat();
    expect(outs.length).toBeGreaterThan(3);
    const allowed = [expected.get(`qwen3 ${PROMPTS[0]}`), expected.get(`qwen2 ${PROMPTS[0]}`)];
    for (const o of outs) expect(allowed).toContain(o);
    // A spec that is no model is a 400; the name keeps serving what it served.
    const bad = await post(srv.url, '/v1/models/qwen3/load', { spec: '/nonexistent/model' }, KEY);
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { message: string; code: string } }).error).toMatchObject({ code: 'invalid_spec', message: expect.stringContaining("cannot load '/nonexistent/model' as 'qwen3'") });
    // From now on the name serves the new checkpoint.
    expect(await answer(client, 'qwen3', PROMPTS[0]!)).toBe(expected.get(`qwen2 ${PROMPTS[0]}`));
    await post(srv.url, '/v1/models/qwen3/load', { spec: MODELS[0]!.dir }, KEY);
    expect(await answer(client, 'qwen3', PROMPTS[0]!)).toBe(expected.get(`qwen3 ${PROMPTS[0]}`));
  }, 180_000);
});

describe.skipIf(!nativeAvailable())('a model that fails to load', () => {
  let tmp: string;
  let srv: RunningPoolServer;
  const logged: string[] = [];

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'rapid-multi-'));
    cpSync(MODELS[0]!.dir, join(tmp, 'm'), { recursive: true });
    srv = await startServePool([spec({ id: 'flaky', dir: join(tmp, 'm') })], { port: 0, modelLoadTimeout: 60 }, (l) => logged.push(l));
  });
  afterAll(async () => {
    await srv?.close(1000);
    rmSync(tmp, { recursive: true, force: true });
  });

  it('fails every waiting request with the reason, then loads on the next request once fixed', async () => {
    const weights = join(tmp, 'm', 'model.safetensors');
    renameSync(weights, `${weights}.bak`);
    writeFileSync(weights, 'not a checkpoint');
    const body = { model: 'flaky', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };
    const answers = await Promise.all(Array.from({ length: 3 }, () => post(srv.url, '/v1/chat/completions', body)));
    for (const r of answers) {
      expect(r.status).toBe(500);
      const e = (await r.json()) as { error: { message: string; code: string } };
      expect(e.error.code).toBe('model_load_failed');
      expect(e.error.message).toMatch(/the model 'flaky' failed to load: ./);
    }
    expect((await statuses(srv.url)).flaky).toBe('available');
    renameSync(`${weights}.bak`, weights);
    const oks = await Promise.all(Array.from({ length: 3 }, () => post(srv.url, '/v1/chat/completions', body)));
    for (const ok of oks) expect(ok.status).toBe(200);
    expect(logged.filter((l) => l.startsWith('loaded flaky')).length).toBe(1); // the three shared one load
    expect((await statuses(srv.url)).flaky).toBe('loaded');
  }, 120_000);
});

describe.skipIf(!nativeAvailable())('an embedding model beside a generating one', () => {
  let srv: RunningPoolServer;
  beforeAll(async () => {
    srv = await startServePool([spec(MODELS[0]!), spec({ id: 'embed', dir: join(FIXTURE_ROOT, 'qwen3-embedding-f32') })], { port: 0 });
  }, 60_000);
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('each route reaches the model the request names, and refuses the one that cannot serve it', async () => {
    const chat = await post(srv.url, '/v1/chat/completions', { model: 'embed', messages: [{ role: 'user', content: 'hi' }] });
    expect(chat.status).toBe(400);
    expect(((await chat.json()) as { error: { code: string } }).error.code).toBe('embedding_model');
    const emb = await post(srv.url, '/v1/embeddings', { model: 'embed', input: 'hello' });
    expect(emb.status).toBe(200);
    expect(((await emb.json()) as { data: { embedding: number[] }[] }).data[0]!.embedding.length).toBeGreaterThan(0);
    expect((await post(srv.url, '/v1/embeddings', { model: 'qwen3', input: 'hello' })).status).toBe(404);
    expect((await post(srv.url, '/v1/chat/completions', { model: 'qwen3', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })).status).toBe(200);
  }, 60_000);
});

describe.skipIf(!nativeAvailable())('waits for a model are bounded', () => {
  const [qwen3, qwen2, vlm] = MODELS as [(typeof MODELS)[0], (typeof MODELS)[0], (typeof MODELS)[0]];
  let srv: RunningPoolServer;

  beforeAll(async () => {
    // qwen3 is pinned and fills the budget; tiny-vlm alone is larger than it.
    srv = await startServePool([spec(qwen3, { pin: true }), spec(qwen2), spec(vlm)], { port: 0, maxLoadedBytes: estimate(qwen3.dir) + (1 << 20), modelLoadTimeout: 0.5 });
  }, 60_000);
  afterAll(async () => {
    await srv?.close(1000);
  });

  const chat = (model: string) => post(srv.url, '/v1/chat/completions', { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });

  it('loads a pinned model at startup and never evicts it: a request that needs its room gets a 503 saying why', async () => {
    expect((await statuses(srv.url)).qwen3).toBe('loaded');
    const r = await chat('qwen2');
    expect(r.status).toBe(503);
    const e = (await r.json()) as { error: { message: string; code: string } };
    expect(e.error.code).toBe('model_memory_budget');
    expect(e.error.message).toMatch(/no room to load 'qwen2'.*qwen3 \(pinned\)/);
    expect((await chat('qwen3')).status).toBe(200);
  });

  it('refuses at once a model larger than the whole budget', async () => {
    const r = await chat('tiny-vlm');
    expect(r.status).toBe(503);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe('model_too_large');
  });
});
