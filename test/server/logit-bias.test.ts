// logit_bias over real HTTP with the openai client on a fixture checkpoint: +100 forces a token in
// chat and completions (streamed and not, greedy and sampled), -100 bans the greedy token, logprobs
// report the biased distribution, and malformed maps get a 400 naming logit_bias.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { SAMPLING_LIMITS } from '../../src/engine/sampling-params.js';
import { nativeAvailable } from '../helpers/addon.js';
import { loadFixture } from '../helpers/fixtures.js';
import { fixtureServeOptions, servedClient } from '../helpers/openai-chat.js';

describe.skipIf(!nativeAvailable())('logit_bias on qwen2-f32', () => {
  const fx = loadFixture('qwen2-f32');
  const a = fx.ref.prompts[0]!;
  const vocab = fx.ref.vocab_size;
  const model = 'fixture-qwen2-f32';
  let srv: RunningServer;
  let client: OpenAI;
  let forced = -1; // a token whose text is plain and not a stop token
  const decode = (ids: number[]) => srv.model.text.tokenizer.decode(ids);

  beforeAll(async () => {
    srv = await startServer(fx.dir, fixtureServeOptions(model));
    client = servedClient(srv.url);
    for (let t = 100; t < vocab; t++) {
      const text = decode([t]);
      if (!srv.model.text.stopTokenIds.has(t) && /^[a-z]{2,}$/i.test(text) && !a.greedy.slice(0, 8).includes(t)) {
        forced = t;
        break;
      }
    }
    expect(forced).toBeGreaterThanOrEqual(0);
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('+100 forces a token in completions, greedy and seeded, streamed and not', async () => {
    const want = decode(Array(4).fill(forced));
    for (const extra of [{ temperature: 0 }, { temperature: 1, seed: 5 }]) {
      const r = await client.completions.create({ model, prompt: a.ids, max_tokens: 4, logit_bias: { [forced]: 100 }, ...extra });
      expect(r.choices[0]!.text).toBe(want);
      const s = await client.completions.create({ model, prompt: a.ids, max_tokens: 4, logit_bias: { [forced]: 100 }, stream: true, ...extra });
      let text = '';
      for await (const c of s) text += c.choices[0]?.text ?? '';
      expect(text).toBe(want);
    }
  });

  it('-100 bans the greedy token; an unbiased request is unchanged', async () => {
    const plain = await client.completions.create({ model, prompt: a.ids, max_tokens: 1, temperature: 0 });
    expect(plain.choices[0]!.text).toBe(decode([a.greedy[0]!]));
    const [banned, neighbour] = await Promise.all([
      client.completions.create({ model, prompt: a.ids, max_tokens: 1, temperature: 0, logit_bias: { [a.greedy[0]!]: -100 } }),
      client.completions.create({ model, prompt: a.ids, max_tokens: 3, temperature: 0 }),
    ]);
    expect(banned.choices[0]!.text).not.toBe(plain.choices[0]!.text);
    expect(neighbour.choices[0]!.text).toBe(decode(a.greedy.slice(0, 3)));
  });

  it('chat: a forced token, streamed and not, with logprobs of the biased distribution', async () => {
    const body = { model, messages: [{ role: 'user' as const, content: 'Say something.' }], max_tokens: 3, logit_bias: { [String(forced)]: 100 } };
    const r = await client.chat.completions.create({ ...body, logprobs: true, top_logprobs: 2 });
    expect(r.choices[0]!.message.content).toBe(decode([forced, forced, forced]));
    for (const lp of r.choices[0]!.logprobs!.content!) expect(lp.logprob).toBeGreaterThan(-1e-3);
    const s = await client.chat.completions.create({ ...body, stream: true, seed: 1, temperature: 0.7 });
    let text = '';
    for await (const c of s) text += c.choices[0]?.delta.content ?? '';
    expect(text).toBe(decode([forced, forced, forced]));
  });

  it('an empty map and null are no bias', async () => {
    for (const logit_bias of [{}, null]) {
      const r = await client.completions.create({ model, prompt: a.ids, max_tokens: 2, temperature: 0, logit_bias });
      expect(r.choices[0]!.text).toBe(decode(a.greedy.slice(0, 2)));
    }
  });

  it('bad maps get a 400 naming logit_bias', async () => {
    const tooMany = Object.fromEntries(Array.from({ length: SAMPLING_LIMITS.maxLogitBiasEntries + 1 }, (_, i) => [String(i), 1]));
    const bad: Array<[unknown, RegExp]> = [
      [{ abc: 1 }, /token ids/],
      [{ '-1': 1 }, /token ids/],
      [{ '1.5': 1 }, /token ids/],
      [{ [String(vocab)]: 1 }, /outside the vocabulary/],
      [{ '99999999999': 1 }, /token ids|outside the vocabulary/],
      [{ '5': 101 }, /\[-100, 100\]/],
      [{ '5': -100.5 }, /\[-100, 100\]/],
      [{ '5': 'x' }, /\[-100, 100\]/],
      [{ '5': 1, '05': 2 }, /twice/],
      [tooMany, /at most 300/],
      [[1, 2], /object/],
      ['x', /object/],
    ];
    for (const [logit_bias, msg] of bad) {
      for (const call of [
        () => client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1, logit_bias } as never),
        () => client.completions.create({ model, prompt: 'hi', max_tokens: 1, logit_bias } as never),
      ]) {
        const err = await call().then(() => null, (e: unknown) => e);
        expect(err, JSON.stringify(logit_bias).slice(0, 60)).toBeInstanceOf(OpenAI.BadRequestError);
        const e = err as InstanceType<typeof OpenAI.BadRequestError>;
        expect(e.message).toMatch(/logit_bias/);
        expect(e.message).toMatch(msg);
        expect(String(e.param)).toMatch(/^logit_bias/);
      }
    }
  });
});
