// No request blocks others (issue 38): a real server over the qwen2-f32 fixture (context 32768) keeps
// answering /health while heavy or hostile requests are processed, and those get 400s that name the
// limit: 100,000 messages, 7 MB of content (refused by bytes before tokenizing), a 10,000-deep prompt
// array (refused before parsing), a chat template that loops (time limit at request time, and a
// template that always loops is reported when the model loads). Bounds are generous on purpose: the
// issue's 50 ms target is measured by bench, not asserted here.
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { nativeAvailable } from '../helpers/addon.js';
import { loadFixture } from '../helpers/fixtures.js';

// Before the fix these waits were 4-14 s; in this test they are 20-350 ms (the client and a spinning
// worker share this loaded 2-core machine with the server). bench/run.js event-loop measures the
// target (50 ms) from a separate client process.
const HEALTH_BOUND_MS = 1_000;
const SERVE = { port: 0, threads: 1, precision: 'fast' as const, kvCacheMemory: 8 << 20, blockSize: 16, maxBatchedTokens: 256 };

/**
 * Runs `work` while polling /health; returns its result and the longest wait (ms) of a poll: from
 * when it meant to send (after its 10 ms pause) to the answer. The client shares this process's
 * event loop, so a blocked server delays the pause too, and the wait catches every block.
 */
async function whileHealthPolled<T>(url: string, work: () => Promise<T>): Promise<{ result: T; worstHealthMs: number }> {
  let done = false;
  let worst = 0;
  const poll = (async () => {
    while (!done) {
      const due = performance.now() + 10;
      await new Promise((r) => setTimeout(r, 10));
      const res = await fetch(`${url}/health`);
      await res.text();
      worst = Math.max(worst, performance.now() - due);
    }
  })();
  let result: T;
  try {
    result = await work();
  } finally {
    done = true;
    await poll; // its last poll measures the wait that ended with the work
  }
  return { result, worstHealthMs: worst };
}

async function post(url: string, path: string, body: string | Buffer): Promise<{ status: number; json: { error?: { message: string; code: string | null } } }> {
  const res = await fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : new Uint8Array(body) });
  return { status: res.status, json: (await res.json()) as { error?: { message: string; code: string | null } } };
}

/** A copy of the fixture's model directory with another chat template. */
function withTemplate(fixtureDir: string, template: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'rapid-template-'));
  mkdirSync(dir, { recursive: true });
  for (const f of ['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json']) copyFileSync(join(fixtureDir, f), join(dir, f));
  const cfg = JSON.parse(readFileSync(join(fixtureDir, 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ ...cfg, chat_template: template }));
  return dir;
}

// 10^10 iterations within the range() limit: only the time limit stops it.
const LOOP = '{%- for i in range(100000) %}{%- for j in range(100000) %}{%- endfor %}{%- endfor %}';
// range(10^8) alone would allocate one array past a worker's heap (fatal to the process): refused at once.
const HUGE_RANGE = '{%- for i in range(100000000) %}{%- endfor %}';

describe.skipIf(!nativeAvailable())('no request blocks others (qwen2-f32 over HTTP)', () => {
  const fx = loadFixture('qwen2-f32');
  const original = (JSON.parse(readFileSync(join(fx.dir, 'tokenizer_config.json'), 'utf8')) as { chat_template: string }).chat_template;
  // Loops only for a chat whose first message is "loop": the smoke render at load passes.
  const dir = withTemplate(fx.dir, `{%- if messages[0]['content'] == 'loop' %}${LOOP}{%- endif %}${original}`);
  let srv: RunningServer;

  beforeAll(async () => {
    srv = await startServer(dir, { ...SERVE, servedModelName: 'qwen2' });
  });
  afterAll(async () => {
    await srv?.close(1000);
    rmSync(dir, { recursive: true, force: true });
  });

  it('refuses 100,000 messages with a 400 naming the limit before parsing, /health answering meanwhile', async () => {
    // Bytes built up front: the client shares this event loop, and its work must not count.
    const body = Buffer.from(JSON.stringify({ messages: Array.from({ length: 100_000 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `message ${i}` })), max_tokens: 1 }));
    const { result, worstHealthMs } = await whileHealthPolled(srv.url, () => post(srv.url, '/v1/chat/completions', body));
    console.log(`100,000 messages: ${result.status}, slowest /health ${worstHealthMs.toFixed(1)} ms`);
    expect(result.status).toBe(400);
    expect(result.json.error?.code).toBe('json_too_large');
    expect(result.json.error?.message).toMatch(/maxJsonObjects/);
    expect(worstHealthMs).toBeLessThan(HEALTH_BOUND_MS);
  });

  it('refuses more messages or content parts than the named limits', async () => {
    const msgs = Array.from({ length: 5_000 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `m${i}` }));
    const many = await post(srv.url, '/v1/chat/completions', JSON.stringify({ messages: msgs, max_tokens: 1 }));
    expect(many.status).toBe(400);
    expect(many.json.error?.code).toBe('too_many_messages');
    expect(many.json.error?.message).toMatch(/at most 4096 .*maxMessages/);
    const content = Array.from({ length: 9_000 }, () => ({ type: 'text', text: 'x' }));
    const body = { messages: [{ role: 'user', content }], max_tokens: 1 };
    const partsRes = await post(srv.url, '/v1/chat/completions', JSON.stringify(body));
    expect(partsRes.status).toBe(400);
    expect(partsRes.json.error?.code).toBe('too_many_content_parts');
  });

  it('refuses 7 MB of content by its bytes before tokenizing, /health answering meanwhile', async () => {
    const body = Buffer.from(JSON.stringify({ messages: [{ role: 'user', content: 'lorem ipsum dolor sit amet '.repeat(260_000) }], max_tokens: 1 }));
    const { result, worstHealthMs } = await whileHealthPolled(srv.url, () => post(srv.url, '/v1/chat/completions', body));
    console.log(`7 MB content: ${result.status}, slowest /health ${worstHealthMs.toFixed(1)} ms`);
    expect(result.status).toBe(400);
    expect(result.json.error?.code).toBe('context_length_exceeded');
    expect(result.json.error?.message).toMatch(/bytes of UTF-8.*context is 32768 tokens/);
    expect(worstHealthMs).toBeLessThan(HEALTH_BOUND_MS);
  });

  it('refuses 7 MB of completion prompt the same way', async () => {
    const body = Buffer.from(JSON.stringify({ prompt: 'lorem ipsum dolor sit amet '.repeat(260_000), max_tokens: 1 }));
    const { result, worstHealthMs } = await whileHealthPolled(srv.url, () => post(srv.url, '/v1/completions', body));
    expect(result.status).toBe(400);
    expect(result.json.error?.code).toBe('context_length_exceeded');
    expect(worstHealthMs).toBeLessThan(HEALTH_BOUND_MS);
  });

  it('refuses a prompt over the context by tokens when its bytes could fit', async () => {
    // ~33k tokens of single letters: under the byte bound, over 32768 tokens.
    const res = await post(srv.url, '/v1/completions', JSON.stringify({ prompt: 'a b c d '.repeat(8_500), max_tokens: 1 }));
    expect(res.status).toBe(400);
    expect(res.json.error?.code).toBe('context_length_exceeded');
    expect(res.json.error?.message).toMatch(/the prompt is \d+ tokens; this model's context is 32768 tokens/);
  });

  it('refuses 7 MB of token ids (3.5M values) before parsing them', async () => {
    const body = Buffer.from(`{"prompt": [${'1,'.repeat(3_500_000)}1], "max_tokens": 1}`);
    const { result, worstHealthMs } = await whileHealthPolled(srv.url, () => post(srv.url, '/v1/completions', body));
    expect(result.status).toBe(400);
    expect(result.json.error?.code).toBe('json_too_large');
    expect(result.json.error?.message).toMatch(/maxJsonValues/);
    expect(worstHealthMs).toBeLessThan(HEALTH_BOUND_MS);
  });

  it('refuses a prompt array nested 10,000 deep with a 400 (not a stack overflow)', async () => {
    const body = `{"prompt": ${'['.repeat(10_000)}1${']'.repeat(10_000)}, "max_tokens": 1}`;
    const { result, worstHealthMs } = await whileHealthPolled(srv.url, () => post(srv.url, '/v1/completions', body));
    expect(result.status).toBe(400);
    expect(result.json.error?.code).toBe('json_too_deep');
    expect(result.json.error?.message).toMatch(/128/);
    expect(worstHealthMs).toBeLessThan(HEALTH_BOUND_MS);
    const chat = `{"messages": [{"role": "user", "content": "hi", "x": ${'{"a":'.repeat(5_000)}1${'}'.repeat(5_000)}}]}`;
    expect((await post(srv.url, '/v1/chat/completions', chat)).status).toBe(400);
  });

  it('stops a chat template that loops at the prompt time limit (400), other requests served meanwhile', { timeout: 30_000 }, async () => {
    const hang = JSON.stringify({ messages: [{ role: 'user', content: 'loop' }], max_tokens: 1 });
    const ok = JSON.stringify({ messages: [{ role: 'user', content: 'hello' }], max_tokens: 2, temperature: 0 });
    const { result, worstHealthMs } = await whileHealthPolled(srv.url, async () => {
      const hung = post(srv.url, '/v1/chat/completions', hang);
      await new Promise((r) => setTimeout(r, 200));
      const t0 = performance.now();
      const other = await post(srv.url, '/v1/chat/completions', ok);
      const otherMs = performance.now() - t0;
      return { hung: await hung, other, otherMs };
    });
    console.log(`looping template: ${result.hung.status} (${result.hung.json.error?.code}); a chat meanwhile ${result.other.status} in ${result.otherMs.toFixed(0)} ms; slowest /health ${worstHealthMs.toFixed(1)} ms`);
    expect(result.hung.status).toBe(400);
    expect(result.hung.json.error?.code).toMatch(/prompt_time_limit|prompt_too_large/);
    expect(result.other.status).toBe(200);
    expect(result.otherMs).toBeLessThan(4_000); // served by the other worker, before the limit ends the loop
    expect(worstHealthMs).toBeLessThan(HEALTH_BOUND_MS);
    // The worker was replaced: chats still work.
    expect((await post(srv.url, '/v1/chat/completions', ok)).status).toBe(200);
  });
});

describe.skipIf(!nativeAvailable())('a chat template that hangs or throws is reported at load', () => {
  const fx = loadFixture('qwen2-f32');

  it('names the template and the time limit when it loops on every chat', { timeout: 30_000 }, async () => {
    const dir = withTemplate(fx.dir, `${LOOP}hello`);
    try {
      await expect(startServer(dir, SERVE)).rejects.toThrow(/chat template of .* did not finish rendering a one-message chat within \d+ ms.*range/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses range(100000000) in a template at load, naming the range limit', async () => {
    const dir = withTemplate(fx.dir, `${HUGE_RANGE}hello`);
    try {
      await expect(startServer(dir, SERVE)).rejects.toThrow(/range\(\) of 100000000 items is over the chat template limit/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('names the template error when it throws on a one-message chat', async () => {
    const dir = withTemplate(fx.dir, "{{ raise_exception('this template is broken') }}");
    try {
      await expect(startServer(dir, SERVE)).rejects.toThrow(/chat template of .* fails on a one-message chat: .*this template is broken/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
