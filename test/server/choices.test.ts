// n > 1 over real HTTP with the openai client: on a fixture checkpoint, n=3 with a seed gives three
// choices (indices 0..2) that repeat across calls, each equal to an n=1 request with that choice's
// derived seed, streamed and not, usage summed with the prompt counted once, the prompt shared
// through the prefix cache; on the fake engine, a failing choice fails the request and a client
// that goes away aborts every choice.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { choiceSeed } from '../../src/server/choices.js';
import { REQUEST_LIMITS } from '../../src/server/request-limits.js';
import { SAMPLING_LIMITS } from '../../src/engine/sampling-params.js';
import { nativeAvailable } from '../helpers/addon.js';
import { loadFixture } from '../helpers/fixtures.js';
import { fixtureServeOptions, servedClient } from '../helpers/openai-chat.js';
import { sleep } from '../engine/helpers.js';
import { post, startFakeServer } from './helpers.js';

type Chat = OpenAI.Chat.Completions.ChatCompletion;

describe('choiceSeed', () => {
  it('keeps choice 0 on the seed and wraps within the seed range', () => {
    expect(choiceSeed(42, 0)).toBe(42);
    expect(choiceSeed(42, 3)).toBe(45);
    expect(choiceSeed(SAMPLING_LIMITS.maxSeed, 0)).toBe(SAMPLING_LIMITS.maxSeed);
    expect(choiceSeed(SAMPLING_LIMITS.maxSeed, 1)).toBe(0);
    expect(choiceSeed(SAMPLING_LIMITS.maxSeed - 1, 3)).toBe(1);
  });
});

describe.skipIf(!nativeAvailable())('n > 1 on qwen2-f32', () => {
  const fx = loadFixture('qwen2-f32');
  const model = 'fixture-qwen2-f32';
  const messages = [{ role: 'user' as const, content: 'Write a short line about rivers, stones and clouds in the north.' }];
  let srv: RunningServer;
  let client: OpenAI;

  beforeAll(async () => {
    srv = await startServer(fx.dir, fixtureServeOptions(model));
    client = servedClient(srv.url);
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('chat, non-streamed: three seeded choices, reproducible, each the n=1 run of its derived seed; usage summed', async () => {
    const body = { model, messages, n: 3, seed: 42, temperature: 1, max_tokens: 8 };
    const r1 = await client.chat.completions.create(body);
    const r2 = await client.chat.completions.create(body);
    expect(r1.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    const texts = r1.choices.map((c) => c.message.content);
    expect(r2.choices.map((c) => c.message.content)).toEqual(texts);
    expect(new Set(texts).size).toBeGreaterThan(1); // the choices differ
    const singles: Chat[] = [];
    for (let i = 0; i < 3; i++) singles.push(await client.chat.completions.create({ ...body, n: 1, seed: choiceSeed(42, i) }));
    expect(singles.map((s) => s.choices[0]!.message.content)).toEqual(texts);
    expect(r1.choices.map((c) => c.finish_reason)).toEqual(singles.map((s) => s.choices[0]!.finish_reason));
    const completion = singles.reduce((sum, s) => sum + s.usage!.completion_tokens, 0);
    expect(r1.usage!.prompt_tokens).toBe(singles[0]!.usage!.prompt_tokens);
    expect(r1.usage!.completion_tokens).toBe(completion);
    expect(r1.usage!.total_tokens).toBe(r1.usage!.prompt_tokens + completion);
  });

  it('chat, streamed: chunks carry their choice index, each choice finishes, usage once at the end', async () => {
    const body = { model, messages, n: 3, seed: 7, temperature: 1, max_tokens: 8 };
    const whole = await client.chat.completions.create(body);
    const run = async () => {
      const texts = ['', '', ''];
      const finishes: (string | null)[] = [null, null, null];
      const roles: number[] = [];
      let usage: OpenAI.CompletionUsage | undefined;
      const s = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
      for await (const c of s) {
        if (c.usage) usage = c.usage;
        for (const ch of c.choices) {
          expect(finishes[ch.index]).toBeNull(); // nothing after a choice's finish
          if (ch.delta.role) roles.push(ch.index);
          texts[ch.index] += ch.delta.content ?? '';
          if (ch.finish_reason) finishes[ch.index] = ch.finish_reason;
        }
      }
      return { texts, finishes, roles, usage };
    };
    const a = await run();
    const b = await run();
    expect(a.texts).toEqual(whole.choices.map((c) => c.message.content));
    expect(b.texts).toEqual(a.texts);
    expect(a.roles.sort()).toEqual([0, 1, 2]);
    expect(a.finishes).toEqual(whole.choices.map((c) => c.finish_reason));
    expect(a.usage).toMatchObject({ prompt_tokens: whole.usage!.prompt_tokens, completion_tokens: whole.usage!.completion_tokens });
  });

  it('completions: n=3 with logprobs, streamed and not; greedy choices are identical', async () => {
    const prompt = fx.ref.prompts[0]!.ids;
    const body = { model, prompt, n: 3, seed: 11, temperature: 0.9, max_tokens: 6, logprobs: 2 };
    const r = await client.completions.create(body);
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    for (const c of r.choices) expect(c.logprobs!.tokens!.join('')).toBe(c.text);
    const texts = ['', '', ''];
    const s = await client.completions.create({ ...body, stream: true });
    for await (const c of s) for (const ch of c.choices) texts[ch.index] += ch.text;
    expect(texts).toEqual(r.choices.map((c) => c.text));
    const greedy = await client.completions.create({ model, prompt, n: 2, temperature: 0, max_tokens: 6 });
    expect(greedy.choices[1]!.text).toBe(greedy.choices[0]!.text);
  });

  it('the choices share the prompt through the prefix cache', async () => {
    const prompt = fx.ref.prompts[1]!.ids; // several full blocks
    const full = Math.floor(prompt.length / 16) * 16;
    expect(full).toBeGreaterThanOrEqual(32);
    const before = srv.engine.stats().prefixCache.hitTokens;
    await client.completions.create({ model, prompt, n: 4, seed: 3, temperature: 1, max_tokens: 2 });
    // Choice 0 prefills; choices 1-3 reuse every full block but the last token's (at least one token computes).
    expect(srv.engine.stats().prefixCache.hitTokens - before).toBeGreaterThanOrEqual(3 * (full - 16));
  });

  it(`n outside [1, ${REQUEST_LIMITS.maxChoices}] or not an integer is a 400 naming n`, async () => {
    for (const n of [0, REQUEST_LIMITS.maxChoices + 1, 1.5, -2]) {
      for (const call of [
        () => client.chat.completions.create({ model, messages, n, max_tokens: 1 }),
        () => client.completions.create({ model, prompt: 'hi', n, max_tokens: 1 }),
      ]) {
        const err = await call().then(() => null, (e: unknown) => e);
        expect(err).toBeInstanceOf(OpenAI.BadRequestError);
        expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('n');
      }
    }
    const r = await post(srv.url, '/v1/chat/completions', { model, messages, n: '2' });
    expect(r.status).toBe(400);
    expect(r.json().error.param).toBe('n');
  });
});

describe('n > 1 on the fake engine: failures and disconnects', () => {
  it('a failing choice fails the request; the others are aborted', async () => {
    const s = await startFakeServer({ stepMs: 1 }, {
      faults: {
        sampler: (id) => {
          if (id.endsWith('-2')) throw new Error('injected sampler fault');
        },
      },
    });
    try {
      const body = { messages: [{ role: 'user', content: 'hello' }], n: 3, max_tokens: 40, temperature: 1, seed: 1 };
      const r = await post(s.url, '/v1/chat/completions', body);
      expect(r.status).toBe(500);
      expect(r.json().error.message).toMatch(/injected sampler fault/);
      const streamed = await post(s.url, '/v1/chat/completions', { ...body, stream: true });
      expect(streamed.status).toBe(200);
      const events = streamed.text.split('\n\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6));
      expect(events).not.toContain('[DONE]');
      const chunks = events.map((e) => JSON.parse(e));
      expect(chunks.some((c) => c.choices?.[0]?.index === 2 && c.choices[0].finish_reason === 'error')).toBe(true);
      expect(chunks[chunks.length - 1].error.message).toMatch(/injected sampler fault/);
      for (let t = 0; t < 100 && (s.engine.stats().running > 0 || s.engine.stats().waiting > 0); t++) await sleep(20);
      expect(s.engine.stats()).toMatchObject({ running: 0, waiting: 0 });
    } finally {
      await s.server.close(500);
    }
  });

  it('a client that goes away aborts every choice', async () => {
    const s = await startFakeServer({ msPerToken: 5 });
    try {
      const ac = new AbortController();
      const res = await fetch(`${s.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: 'hello' }], n: 4, max_tokens: 200, stream: true }),
        signal: ac.signal,
      });
      const reader = res.body!.getReader();
      let seen = '';
      while (!/"index":3/.test(seen)) seen += new TextDecoder().decode((await reader.read()).value);
      expect(s.engine.stats().running).toBeGreaterThan(0);
      ac.abort();
      for (let t = 0; t < 100 && (s.engine.stats().running > 0 || s.engine.stats().waiting > 0); t++) await sleep(20);
      expect(s.engine.stats()).toMatchObject({ running: 0, waiting: 0 });
    } finally {
      await s.server.close(500);
    }
  });
});
