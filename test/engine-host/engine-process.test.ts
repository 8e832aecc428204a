// `rapid serve --engine-process child` over real HTTP, a real fixture checkpoint and real child
// processes: outputs equal the in-process server's (text, json_schema, an image); a format refused
// in the child is still a 400; a native abort in the child mid-step (RAPID_TEST_ABORT_AFTER_STEPS)
// fails all 16 in-flight streams within 2 s, /health is 503 until the restarted child serves (within
// 5 s) and its outputs equal a fresh server's; a crash loop backs off and says so.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import type { HostModel } from '../../src/engine-host/engine-host.js';
import type { RemoteEngine } from '../../src/engine-host/remote-engine.js';
import { TEST_ABORT_AFTER_STEPS, TEST_ABORT_MIN_LIVE, TEST_ABORT_ON_START } from '../../src/engine-host/test-faults.js';
import { nativeAvailable } from '../helpers/addon.js';
import { loadFixture } from '../helpers/fixtures.js';
import { VLM_FIXTURES, vlmFixtureReady, withDataUris } from '../helpers/vlm-engine.js';
import { post } from '../server/helpers.js';

const MODEL = 'm';
const PROMPTS = Array.from({ length: 16 }, (_, i) => `river stone cloud ${i} market engine yellow`);
const SERVE = { port: 0, threads: 1, kvCacheMemory: 8 << 20, blockSize: 16, maxNumSeqs: 16, servedModelName: MODEL } as const;
// Long enough that no stream ends before all 16 are admitted on a loaded machine (the child aborts only then).
const STREAM_TOKENS = 128;
const SCHEMA = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer' } }, required: ['name', 'age'], additionalProperties: false };

type ChildServer = RunningServer<RemoteEngine, HostModel>;

async function complete(url: string, prompt: string, maxTokens = 8): Promise<string> {
  const r = await post(url, '/v1/completions', { model: MODEL, prompt, temperature: 0, max_tokens: maxTokens });
  expect(r.status, r.text).toBe(200);
  return r.json().choices[0].text as string;
}

async function chat(url: string, body: Record<string, unknown>): Promise<{ status: number; json: () => any }> {
  return post(url, '/v1/chat/completions', { model: MODEL, temperature: 0, ...body });
}

/** A streamed completion: when its last text chunk came, and when (and whether) it ended with an error event. */
async function stream(url: string, prompt: string, times: { lastData: number }): Promise<{ error: string | null; at: number }> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt, temperature: 0, max_tokens: STREAM_TOKENS, stream: true }),
  });
  if (res.status !== 200) return { error: `status ${res.status}`, at: performance.now() };
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let text = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    const chunk = dec.decode(value, { stream: true });
    text += chunk;
    if (chunk.includes('"error"')) {
      const at = performance.now();
      await reader.cancel().catch(() => undefined);
      return { error: /"message":"([^"]*)"/.exec(text.slice(text.lastIndexOf('"error"')))?.[1] ?? 'error', at };
    }
    if (chunk.includes('"text":"')) times.lastData = performance.now();
  }
  return { error: null, at: performance.now() };
}

async function health(url: string): Promise<{ status: number; body: { status: string; reason?: string } }> {
  const r = await fetch(`${url}/health`);
  return { status: r.status, body: (await r.json()) as { status: string; reason?: string } };
}

/** Polls /health until it is 200; returns when (performance.now()) and the 503 reasons seen meanwhile. */
async function untilHealthy(url: string, limitMs: number): Promise<{ at: number; reasons: string[] }> {
  const reasons: string[] = [];
  const deadline = performance.now() + limitMs;
  while (performance.now() < deadline) {
    const h = await health(url);
    if (h.status === 200) return { at: performance.now(), reasons };
    reasons.push(h.body.reason ?? '');
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`not healthy within ${limitMs} ms; reasons: ${[...new Set(reasons)].join(' | ')}`);
}

describe.skipIf(!nativeAvailable())('an engine child per model (qwen2-f32)', () => {
  const fx = loadFixture('qwen2-f32');
  let inline: RunningServer;
  let expected: string[];
  /** 16 prompts whose greedy output runs to STREAM_TOKENS (no end token): all are in flight when the child aborts. */
  const longRunning: string[] = [];

  beforeAll(async () => {
    inline = await startServer(fx.dir, SERVE);
    expected = [];
    for (const p of PROMPTS.slice(0, 4)) expected.push(await complete(inline.url, p));
    for (let i = 0; longRunning.length < 16 && i < 200; i++) {
      const prompt = `paper north silver ${i} quiet seven garden`;
      const r = await post(inline.url, '/v1/completions', { model: MODEL, prompt, temperature: 0, max_tokens: STREAM_TOKENS });
      if (r.json().choices[0].finish_reason === 'length') longRunning.push(prompt);
    }
  });
  afterAll(async () => {
    await inline?.close(1000);
  });

  describe('serving', () => {
    let child: ChildServer;
    beforeAll(async () => {
      child = await startServer(fx.dir, { ...SERVE, engineProcess: 'child' });
    });
    afterAll(async () => {
      await child?.close(1000);
    });

    it('text outputs equal the in-process server\'s, one at a time and 16 together', async () => {
      for (const [i, p] of PROMPTS.slice(0, 4).entries()) expect(await complete(child.url, p)).toBe(expected[i]);
      const together = await Promise.all(PROMPTS.map((p) => complete(child.url, p, 12)));
      const solo = await Promise.all(PROMPTS.map((p) => complete(inline.url, p, 12)));
      expect(together).toEqual(solo);
      expect(child.engine.stats().requests.submitted).toBeGreaterThan(0); // the child's pushed stats
      expect((await health(child.url)).status).toBe(200);
    });

    it('json_schema output is compiled and enforced in the child, equal to in-process; a format it refuses is a 400', async () => {
      const body = { messages: [{ role: 'user', content: 'a person' }], max_tokens: 40, response_format: { type: 'json_schema', json_schema: { name: 'p', schema: SCHEMA, strict: true } } };
      const [c, i] = await Promise.all([chat(child.url, body), chat(inline.url, body)]);
      expect(c.status).toBe(200);
      const text = c.json().choices[0].message.content as string;
      expect(Object.keys(JSON.parse(text))).toEqual(['name', 'age']);
      expect(text).toBe(i.json().choices[0].message.content);
      // Budget closing finds no valid object within 2 tokens: refused by the child's grammar service before anything is queued.
      const tooShort = await chat(child.url, { ...body, max_tokens: 2 });
      expect(tooShort.status).toBe(400);
      expect(tooShort.json().error.message).toBe((await chat(inline.url, { ...body, max_tokens: 2 })).json().error.message);
      // A prompt beyond the KV pool (8 MiB: 8192 tokens): the engine's submit in the child refuses it, still a 400 with its message.
      const kvTokens = child.model.info.numBlocks * child.model.info.blockSize;
      const tooLong = { model: MODEL, prompt: Array.from({ length: kvTokens + 8 }, () => 1), max_tokens: 2 };
      const long = await post(child.url, '/v1/completions', tooLong);
      expect(long.status).toBe(400);
      expect(long.json().error.message).toMatch(/the KV cache holds/);
      expect(long.json().error.message).toBe((await post(inline.url, '/v1/completions', tooLong)).json().error.message);
    });
  });

  it('a native abort mid-step fails all 16 streams within 2 s; /health is 503, then 200 within 5 s; outputs equal a fresh server\'s', async () => {
    process.env[TEST_ABORT_AFTER_STEPS] = '4'; // the 4th step with all 16 in the child
    process.env[TEST_ABORT_MIN_LIVE] = '16';
    const lines: { at: number; line: string }[] = [];
    let child: ChildServer | undefined;
    try {
      child = await startServer(fx.dir, { ...SERVE, engineProcess: 'child' }, (line) => lines.push({ at: performance.now(), line }));
      const times = { lastData: 0 };
      expect(longRunning).toHaveLength(16);
      const results = await Promise.all(longRunning.map((p) => stream(child!.url, p, times)));
      for (const r of results) expect(r.error).toMatch(/engine process died \(signal SIGABRT\)/);
      const lastError = Math.max(...results.map((r) => r.at));
      expect(times.lastData).toBeGreaterThan(0); // they were streaming
      expect(lastError - times.lastData).toBeLessThan(2000);
      const died = lines.find((l) => /engine process died/.test(l.line))!;
      expect(died).toBeDefined();
      const h = await health(child.url);
      expect(h.status).toBe(503);
      expect(h.body.reason).toMatch(/engine process died \(signal SIGABRT\); restarting/);
      const back = await untilHealthy(child.url, 5000);
      expect(back.at - died.at).toBeLessThan(5000);
      for (const [i, p] of PROMPTS.slice(0, 4).entries()) expect(await complete(child.url, p)).toBe(expected[i]);
      const restart = child.engine.stats(); // the new child's own counters
      expect(restart.requests.error).toBe(0);
      const timing = lines.find((l) => /serving again/.test(l.line))?.line;
      console.log(`restart: ${timing}`);
    } finally {
      delete process.env[TEST_ABORT_AFTER_STEPS];
      delete process.env[TEST_ABORT_MIN_LIVE];
      await child?.close(1000);
    }
  });

  it('a crash loop backs off (0, 1, 2, 4 s), says so in the log and /health, then serves', async () => {
    process.env[TEST_ABORT_AFTER_STEPS] = '2';
    process.env[TEST_ABORT_ON_START] = '3';
    const lines: string[] = [];
    let child: ChildServer | undefined;
    try {
      child = await startServer(fx.dir, { ...SERVE, engineProcess: 'child' }, (line) => lines.push(line));
      const r = await stream(child.url, longRunning[0]!, { lastData: 0 });
      expect(r.error).toMatch(/SIGABRT/);
      const back = await untilHealthy(child.url, 15_000);
      const restarts = lines.filter((l) => /engine process died/.test(l));
      expect(restarts).toHaveLength(4);
      expect(restarts[0]).toMatch(/restarting \(1 in a row\)/);
      expect(restarts[1]).toMatch(/restarting in 1 s \(2 in a row\)/);
      expect(restarts[2]).toMatch(/restarting in 2 s \(3 in a row\)/);
      expect(restarts[3]).toMatch(/restarting in 4 s \(4 in a row\)/);
      expect(back.reasons.some((x) => /restarting in 4 s \(4 in a row\)/.test(x))).toBe(true);
      expect(await complete(child.url, PROMPTS[0]!)).toBe(expected[0]);
    } finally {
      delete process.env[TEST_ABORT_AFTER_STEPS];
      delete process.env[TEST_ABORT_ON_START];
      await child?.close(1000);
    }
  });
});

const VLM = join(VLM_FIXTURES, 'qwen2_5_vl-f32');

describe.skipIf(!nativeAvailable() || !vlmFixtureReady(VLM))('an image request through the engine child (qwen2_5_vl-f32)', () => {
  let child: ChildServer;
  let inline: RunningServer;
  beforeAll(async () => {
    const opts = { port: 0, precision: 'exact', maxBatchedTokens: 16, servedModelName: MODEL } as const;
    [child, inline] = await Promise.all([startServer(VLM, { ...opts, engineProcess: 'child' }), startServer(VLM, opts)]);
  });
  afterAll(async () => {
    await Promise.all([child?.close(1000), inline?.close(1000)]);
  });

  it('the pixels cross to the child; the text equals the in-process server\'s', async () => {
    const { readFileSync } = await import('node:fs');
    const ref = JSON.parse(readFileSync(join(VLM, 'reference.json'), 'utf8')) as { cases: { name: string; messages: unknown[]; greedy: number[] }[] };
    const c = ref.cases.find((x) => x.name === 'one_image')!;
    const body = { messages: withDataUris(c.messages as Parameters<typeof withDataUris>[0]), max_tokens: 16 };
    const [a, b] = await Promise.all([chat(child.url, body), chat(inline.url, body)]);
    expect(a.status).toBe(200);
    const text = a.json().choices[0].message.content as string;
    expect(text).toBe(b.json().choices[0].message.content);
    expect(text).toBe(inline.model.text.tokenizer.decode(c.greedy, { skipSpecialTokens: true }));
  });
});
