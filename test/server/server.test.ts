// The HTTP server over real sockets with the official openai client, on the fake runner: routes,
// SSE, logprobs, batch invariance, validation errors, auth, overload, faults, disconnects, shutdown.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bytes, sleep } from '../engine/helpers.js';
import { byteModel, MODEL_ID, post, raw, startFakeServer } from './helpers.js';

type Started = Awaited<ReturnType<typeof startFakeServer>>;

const chatPrompt = (content: string) => byteModel(256).encodeChat([{ role: 'user', content }]);
const text = (ids: number[]) => Buffer.from(ids.filter((t) => t !== 0)).toString('latin1');

async function streamChat(client: OpenAI, content: string, extra: Record<string, unknown> = {}) {
  const stream = await client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content }], stream: true, temperature: 0, max_tokens: 12, ...extra });
  let out = '';
  let finish: string | null = null;
  for await (const chunk of stream) {
    out += chunk.choices[0]?.delta.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  return { out, finish };
}

describe('server on the fake runner', () => {
  let s: Started;
  beforeAll(async () => {
    s = await startFakeServer({ stepMs: 1 }, { maxBatchedTokens: 64, maxNumSeqs: 32 });
  });
  afterAll(async () => {
    await s.server.close(100);
  });

  it('answers chat completions, streamed and not, identically', async () => {
    const expected = text(s.model.greedy(chatPrompt('hi there'), 12));
    const r = await s.client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'hi there' }], temperature: 0, max_tokens: 12 });
    expect(r.object).toBe('chat.completion');
    expect(r.choices[0]!.message.content).toBe(expected);
    expect(r.choices[0]!.finish_reason).toBe('length');
    expect(r.usage).toMatchObject({ prompt_tokens: chatPrompt('hi there').length, completion_tokens: 12, total_tokens: chatPrompt('hi there').length + 12 });
    const st = await streamChat(s.client, 'hi there');
    expect(st.out).toBe(expected);
    expect(st.finish).toBe('length');
  });

  it('streams the role first and a usage chunk when asked', async () => {
    const stream = await s.client.chat.completions.create({
      model: MODEL_ID,
      messages: [{ role: 'user', content: 'usage please' }],
      stream: true,
      stream_options: { include_usage: true },
      temperature: 0,
      max_tokens: 5,
    });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    const last = chunks[chunks.length - 1]!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({ completion_tokens: 5 });
  });

  it('answers completions from text or token ids, with logprobs', async () => {
    const prompt = 'once upon';
    const expected = text(s.model.greedy(bytes(prompt), 8));
    const a = await s.client.completions.create({ model: MODEL_ID, prompt, temperature: 0, max_tokens: 8, logprobs: 2 });
    expect(a.choices[0]!.text).toBe(expected);
    const lp = a.choices[0]!.logprobs!;
    expect(lp.tokens!.join('')).toBe(expected);
    expect(lp.token_logprobs!.length).toBe(8);
    expect(Object.keys(lp.top_logprobs![0]!).length).toBeGreaterThan(0);
    const b = await s.client.completions.create({ model: MODEL_ID, prompt: bytes(prompt), temperature: 0, max_tokens: 8 });
    expect(b.choices[0]!.text).toBe(expected);
    // Legacy default max_tokens is 16.
    const c = await s.client.completions.create({ model: MODEL_ID, prompt, temperature: 0 });
    expect(c.usage!.completion_tokens).toBe(16);
    // Streamed completions.
    const stream = await s.client.completions.create({ model: MODEL_ID, prompt, temperature: 0, max_tokens: 8, stream: true });
    let out = '';
    for await (const ch of stream) out += ch.choices[0]?.text ?? '';
    expect(out).toBe(expected);
    // Chat logprobs with alternatives.
    const d = await s.client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'x' }], temperature: 0, max_tokens: 4, logprobs: true, top_logprobs: 3 });
    const content = d.choices[0]!.logprobs!.content!;
    expect(content.length).toBe(4);
    expect(content.map((c) => c.token).join('')).toBe(d.choices[0]!.message.content);
    expect(content[0]!.top_logprobs.length).toBe(3);
    expect(content[0]!.bytes).toEqual([...Buffer.from(content[0]!.token)]);
  });

  it('keeps 32 concurrent streamed requests identical to their solo outputs', async () => {
    const prompts = Array.from({ length: 32 }, (_, i) => `prompt number ${i} ${'z'.repeat(i % 7)}`);
    const solo = prompts.map((p) => text(s.model.greedy(chatPrompt(p), 12)));
    const got = await Promise.all(prompts.map(async (p, i) => (await sleep(i % 5), streamChat(s.client, p))));
    got.forEach((g, i) => expect(g.out).toBe(solo[i]));
    // Neighbours leaving mid-stream (client aborts) change nothing for the others.
    const withLeavers = await Promise.all(
      prompts.map(async (p, i) => {
        await sleep(i % 3);
        if (i % 4 !== 1) return streamChat(s.client, p);
        const ac = new AbortController();
        const st = await s.client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: p }], stream: true, temperature: 0, max_tokens: 12 }, { signal: ac.signal });
        let n = 0;
        try {
          for await (const _ of st) if (++n === 2) ac.abort();
        } catch {
          // aborted
        }
        return null;
      }),
    );
    withLeavers.forEach((g, i) => {
      if (g !== null) expect(g.out).toBe(solo[i]);
    });
    const seeded = (p: string) => s.client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: p }], temperature: 0.9, seed: 42, max_tokens: 10 });
    const alone = (await seeded(prompts[3]!)).choices[0]!.message.content;
    const crowd = await Promise.all(prompts.slice(0, 12).map(seeded));
    expect(crowd[3]!.choices[0]!.message.content).toBe(alone);
  });

  it('isolates per-request temperature, stop and max_tokens in either order', async () => {
    const base = text(s.model.greedy(chatPrompt('iso'), 30));
    const stop = base.slice(4, 6);
    const reqs = [
      () => s.client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'iso' }], temperature: 0, max_tokens: 30, stop: [stop] }),
      () => s.client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'iso' }], temperature: 1.5, seed: 3, max_tokens: 30 }),
      () => s.client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'iso' }], temperature: 0, max_tokens: 3 }),
    ];
    for (const order of [[0, 1, 2], [2, 1, 0]]) {
      const res = await Promise.all(order.map((i) => reqs[i]!()));
      const byIdx = Object.fromEntries(order.map((i, k) => [i, res[k]!]));
      expect(byIdx[0]!.choices[0]!.message.content).toBe(base.slice(0, base.indexOf(stop)));
      expect(byIdx[0]!.choices[0]!.finish_reason).toBe('stop');
      expect(byIdx[2]!.choices[0]!.message.content).toBe(base.slice(0, 3));
      expect(byIdx[1]!.choices[0]!.message.content).not.toBe(base);
    }
  });

  it('serves /v1/models, /health, /health/ready, /v1/status and /metrics', async () => {
    const models = await s.client.models.list();
    expect(models.data.map((m) => m.id)).toEqual([MODEL_ID]);
    expect((await s.client.models.retrieve(MODEL_ID)).id).toBe(MODEL_ID);
    expect((await raw(s.url, '/health')).json()).toEqual({ status: 'ok' });
    expect((await raw(s.url, '/health/ready')).status).toBe(200);
    const st = (await raw(s.url, '/v1/status')).json();
    expect(st).toMatchObject({ model: MODEL_ID, running: 0, waiting: 0, healthy: true });
    expect(st.kv.numBlocks).toBe(256);
    const m = await raw(s.url, '/metrics');
    expect(m.headers.get('content-type')).toMatch(/text\/plain/);
    expect(m.text).toMatch(/rapid_generation_tokens_total\{model="fake-model"\} \d+/);
    expect(m.text).toMatch(/rapid_http_responses_total\{route="\/v1\/chat\/completions",status="200"\}/);
    expect(m.text).toMatch(/rapid_time_to_first_token_seconds_count\{model="[^"]+"\} \d+/);
    expect(m.text).toMatch(/rapid_steps_ahead_total\{model="fake-model"\} 0/);
  });

  it('rejects bad input with 4xx in the OpenAI error shape', async () => {
    const chat = (body: unknown) => post(s.url, '/v1/chat/completions', body);
    const msgs = [{ role: 'user', content: 'x' }];
    let r = await chat('{"model": ');
    expect(r.status).toBe(400);
    expect(r.json().error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_json' });
    r = await chat({ model: MODEL_ID, messages: msgs, temperature: 'hot' });
    expect(r.status).toBe(400);
    expect(r.json().error.param).toBe('temperature');
    r = await chat({ model: MODEL_ID, messages: msgs, max_tokens: -5 });
    expect(r.status).toBe(400);
    expect(r.json().error.param).toBe('max_tokens');
    r = await chat({ model: MODEL_ID, messages: msgs, verbosity: 5 }); // accepted and ignored, but typed
    expect(r.status).toBe(400);
    expect(r.json().error).toMatchObject({ param: 'verbosity', code: 'invalid_type' });
    r = await chat({ model: MODEL_ID, messages: 'hello' });
    expect(r.json().error.param).toBe('messages');
    r = await chat({ model: MODEL_ID, messages: [{ role: 'wizard', content: 'x' }] });
    expect(r.json().error.param).toBe('messages[0].role');
    r = await chat({ model: MODEL_ID, messages: msgs, n: 17 });
    expect(r.json().error.param).toBe('n');
    r = await chat({ model: MODEL_ID, messages: msgs, top_p: 0 });
    expect(r.json().error.param).toBe('top_p');
    r = await chat({ model: MODEL_ID, messages: [{ role: 'user', content: 'x'.repeat(300) }] });
    expect(r.status).toBe(400);
    expect(r.json().error.message).toMatch(/context is 256 tokens/);
    r = await post(s.url, '/v1/completions', { model: MODEL_ID, prompt: [1, 2, 999] });
    expect(r.status).toBe(400);
    expect(r.json().error.param).toBe('prompt');
    r = await post(s.url, '/v1/completions', { model: MODEL_ID, prompt: [1, 2.5] });
    expect(r.status).toBe(400);
    r = await chat({ model: 'nope', messages: msgs });
    expect(r.status).toBe(404);
    expect(r.json().error.code).toBe('model_not_found');
    await expect(s.client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] })).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    r = await chat({ model: MODEL_ID, messages: msgs, filler: 'x'.repeat(9 * 1024 * 1024) });
    expect(r.status).toBe(413);
    expect((await raw(s.url, '/v1/nothing')).status).toBe(404);
    r = await raw(s.url, '/v1/chat/completions');
    expect(r.status).toBe(405);
    expect(r.json().error.code).toBe('method_not_allowed');
    // The server still works.
    expect((await chat({ model: MODEL_ID, messages: msgs, max_tokens: 2 })).status).toBe(200);
  });

  it('frees the KV blocks of a client that disconnects mid-stream', async () => {
    const ac = new AbortController();
    const stream = await s.client.chat.completions.create(
      { model: MODEL_ID, messages: [{ role: 'user', content: 'long story' }], stream: true, max_tokens: 200, temperature: 0 },
      { signal: ac.signal },
    );
    let n = 0;
    try {
      for await (const _ of stream) if (++n === 3) ac.abort();
    } catch {
      // the client may end the iteration quietly or with an abort error
    }
    expect(n).toBeLessThan(50);
    const deadline = Date.now() + 2000;
    let st;
    do {
      await sleep(10);
      st = (await raw(s.url, '/v1/status')).json();
    } while ((st.running > 0 || st.kv.usedBlocks > 0) && Date.now() < deadline);
    expect(st.running).toBe(0);
    expect(st.kv.usedBlocks).toBe(0);
    expect(st.requests.abort).toBeGreaterThan(0);
  });

  it('aborts a non-streamed request whose client goes away', async () => {
    const before = (await raw(s.url, '/v1/status')).json().requests.abort;
    const ac = new AbortController();
    const pending = fetch(`${s.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'a long one', max_tokens: 250, temperature: 0 }),
      signal: ac.signal,
    }).catch(() => null);
    await sleep(30);
    ac.abort();
    await pending;
    const deadline = Date.now() + 2000;
    let st;
    do {
      await sleep(10);
      st = (await raw(s.url, '/v1/status')).json();
    } while (st.requests.abort === before && Date.now() < deadline);
    expect(st.requests.abort).toBe(before + 1);
    expect(st.kv.usedBlocks).toBe(0);
  });
});

describe('server: auth, overload, faults, keep-alive, shutdown', () => {
  it('requires the API key on every route but health', async () => {
    const s = await startFakeServer({}, {}, { apiKey: 'sekret' });
    try {
      expect((await raw(s.url, '/health')).status).toBe(200);
      expect((await raw(s.url, '/health/ready')).status).toBe(200);
      for (const path of ['/v1/models', '/v1/status', '/metrics']) {
        const r = await raw(s.url, path);
        expect(r.status).toBe(401);
        expect(r.json().error.code).toBe('invalid_api_key');
        expect((await raw(s.url, path, { headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
        expect((await raw(s.url, path, { headers: { authorization: 'Bearer sekret' } })).status).toBe(200);
      }
      expect((await post(s.url, '/v1/completions', { prompt: 'x' })).status).toBe(401);
      const ok = await s.client.completions.create({ model: MODEL_ID, prompt: 'x', max_tokens: 2 });
      expect(ok.choices[0]!.text.length).toBeGreaterThan(0);
      const bad = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'nope', maxRetries: 0 });
      await expect(bad.models.list()).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
    } finally {
      await s.server.close(100);
    }
  });

  it('answers 503 with Retry-After when the queue is full', async () => {
    const s = await startFakeServer({ stepMs: 20 }, { maxNumSeqs: 1, maxWaiting: 1 });
    try {
      const busy = [1, 2].map((i) => post(s.url, '/v1/completions', { prompt: `busy ${i}`, max_tokens: 5 }));
      await sleep(5);
      const r = await post(s.url, '/v1/completions', { prompt: 'one too many', max_tokens: 5 });
      expect(r.status).toBe(503);
      expect(r.headers.get('retry-after')).toBe('1');
      expect(r.json().error.code).toBe('overloaded');
      expect((await Promise.all(busy)).map((b) => b.status)).toEqual([200, 200]);
    } finally {
      await s.server.close(100);
    }
  });

  it('delivers injected faults to their clients within 2 s; the next request succeeds', async () => {
    const poisoned = new Set<string>();
    let hangNext = false;
    const s = await startFakeServer({ stepMs: 1 }, {
      stepTimeoutMs: 500,
      faults: {
        step: (plan) => {
          if (hangNext) {
            hangNext = false;
            return sleep(1200);
          }
          // Fail any step carrying a prompt that starts with "boom".
          for (const r of plan.rows) if (r.contextLen === 0 && text([...r.tokens]).includes('boom')) throw new Error('injected step fault');
        },
        sampler: (id) => {
          if (poisoned.has(id)) throw new Error('injected sampler fault');
        },
        detokenizer: (id, token) => {
          if (token === 'q'.charCodeAt(0) && id.startsWith('cmpl-')) throw new Error('injected detokenizer fault');
        },
      },
    });
    try {
      // Step fault, non-streamed: 500 with the code.
      let t0 = Date.now();
      const r = await post(s.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'boom' }], max_tokens: 4 });
      expect(Date.now() - t0).toBeLessThan(2000);
      expect(r.status).toBe(500);
      expect(r.json().error.code).toBe('step_failed');
      // Step fault, streamed: the stream ends with an error the client sees.
      t0 = Date.now();
      await expect(streamChat(s.client, 'boom again')).rejects.toThrow(/injected step fault/);
      expect(Date.now() - t0).toBeLessThan(2000);
      // The raw stream carries finish_reason "error" then the error event.
      const rs = await post(s.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'boom' }], stream: true });
      expect(rs.text).toMatch(/"finish_reason":"error"/);
      expect(rs.text).toMatch(/data: \{"error":\{"message":"[^"]*injected step fault/);
      expect(rs.text).not.toMatch(/\[DONE\]/);
      // Detokenizer fault on a legacy completion whose output contains "q".
      let prompt = '';
      for (let i = 0; ; i++) {
        if (text(s.model.greedy(bytes(`p${i}`), 16)).includes('q')) {
          prompt = `p${i}`;
          break;
        }
      }
      const d = await post(s.url, '/v1/completions', { prompt, max_tokens: 16, temperature: 0 });
      expect(d.status).toBe(500);
      expect(d.json().error.code).toBe('detokenizer_failed');
      // The next request succeeds and the server is healthy.
      expect((await streamChat(s.client, 'fine')).out.length).toBeGreaterThan(0);
      expect((await raw(s.url, '/health')).status).toBe(200);
      // Watchdog: the hung step fails its request with 503, /health turns 503, then recovers.
      hangNext = true;
      t0 = Date.now();
      const w = await post(s.url, '/v1/completions', { prompt: 'hang', max_tokens: 4 });
      expect(Date.now() - t0).toBeLessThan(2000);
      expect(w.status).toBe(503);
      expect(w.json().error.code).toBe('watchdog');
      const h = await raw(s.url, '/health');
      expect(h.status).toBe(503);
      expect((await post(s.url, '/v1/completions', { prompt: 'x', max_tokens: 2 })).status).toBe(503);
      for (let i = 0; i < 100 && (await raw(s.url, '/health')).status !== 200; i++) await sleep(50);
      expect((await raw(s.url, '/health')).status).toBe(200);
      // Greedy: a sampled token could be the "q" that the detokenizer fault above is keyed on.
      const after = await post(s.url, '/v1/completions', { prompt: 'after', max_tokens: 2, temperature: 0 });
      expect(after.status, after.text).toBe(200);
      const st = (await raw(s.url, '/v1/status')).json();
      expect(st).toMatchObject({ running: 0, waiting: 0, watchdogTrips: 1 });
      expect(st.kv.usedBlocks).toBe(0);
    } finally {
      await s.server.close(100);
    }
  });

  it('sends SSE keep-alive comments during a long prefill', async () => {
    const s = await startFakeServer({ msPerToken: 2 }, { maxBatchedTokens: 512 }, { keepAliveMs: 30 });
    try {
      const r = await post(s.url, '/v1/completions', { prompt: 'y'.repeat(120), max_tokens: 2, stream: true });
      expect(r.text).toMatch(/^: keep-alive$/m);
      expect(r.text).toMatch(/data: \[DONE\]/);
    } finally {
      await s.server.close(100);
    }
  });

  it('shuts down gracefully: in-flight requests finish, new ones are refused', async () => {
    const s = await startFakeServer({ stepMs: 3 });
    const inflight = streamChat(s.client, 'finish me', { max_tokens: 20 });
    await sleep(20);
    const closing = s.server.close(5000);
    await sleep(5);
    await expect(post(s.url, '/v1/completions', { prompt: 'late' })).rejects.toThrow();
    const done = await inflight;
    expect(done.finish).toBe('length');
    await closing;
  });
});
