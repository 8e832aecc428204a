// POST /tokenize and /detokenize (vLLM's shapes) over real HTTP: on a fixture checkpoint the ids are
// the ones a chat completion is prompted with and round-trip to the text; bad input is a 400 naming
// the field, on the fake runner.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { fixtureServeOptions, servedClient } from '../helpers/openai-chat.js';
import { MODEL_ID, post, startFakeServer } from './helpers.js';

describe('tokenize and detokenize on the fake runner', () => {
  let s: Awaited<ReturnType<typeof startFakeServer>>;
  beforeAll(async () => {
    s = await startFakeServer({ stepMs: 1 });
  });
  afterAll(async () => {
    await s.server.close(100);
  });

  it('tokenizes a prompt and messages, and detokenizes', async () => {
    let r = await post(s.url, '/tokenize', { model: MODEL_ID, prompt: 'hi' });
    expect(r.json()).toEqual({ tokens: [104, 105], count: 2, max_model_len: 256 });
    r = await post(s.url, '/tokenize', { messages: [{ role: 'user', content: 'hi' }], return_token_strs: true });
    expect(r.json().count).toBe('user: hi\nassistant:'.length);
    expect(r.json().token_strs.join('')).toBe('user: hi\nassistant:');
    r = await post(s.url, '/detokenize', { model: MODEL_ID, tokens: [104, 105] });
    expect(r.json()).toEqual({ prompt: 'hi' });
  });

  it('refuses bad input with a 400 naming the field', async () => {
    const cases: [string, unknown, string | null, number?][] = [
      ['/detokenize', { tokens: [1, 256] }, 'tokens[1]'],
      ['/detokenize', { tokens: [1, -1] }, 'tokens[1]'],
      ['/detokenize', { tokens: [0.5] }, 'tokens[0]'],
      ['/detokenize', { tokens: 'abc' }, 'tokens'],
      ['/detokenize', {}, 'tokens'],
      ['/detokenize', { tokens: [1], extra: 1 }, 'extra'],
      ['/detokenize', [1, 2], null],
      ['/tokenize', {}, 'prompt'],
      ['/tokenize', { prompt: 'a', messages: [{ role: 'user', content: 'b' }] }, 'messages'],
      ['/tokenize', { prompt: 5 }, 'prompt'],
      ['/tokenize', { prompt: 'a', add_special_tokens: 'yes' }, 'add_special_tokens'],
      ['/tokenize', { prompt: 'a', add_generation_prompt: true }, 'add_generation_prompt'],
      ['/tokenize', { messages: [{ role: 'wizard', content: 'b' }] }, 'messages[0].role'],
      ['/tokenize', { messages: [{ role: 'user', content: 'b' }], add_special_tokens: true }, 'add_special_tokens'],
      ['/tokenize', { messages: [{ role: 'user', content: 'b' }], chat_template_kwargs: 3 }, 'chat_template_kwargs'],
      ['/tokenize', { model: 'nope', prompt: 'a' }, null, 404],
    ];
    for (const [path, body, param, status] of cases) {
      const r = await post(s.url, path, body);
      expect(r.status, `${path} ${JSON.stringify(body).slice(0, 80)}`).toBe(status ?? 400);
      expect(r.json().error.param, JSON.stringify(body).slice(0, 80)).toBe(param);
    }
    expect((await fetch(`${s.url}/tokenize`)).status).toBe(405);
    expect((await post(s.url, '/tokenize', { prompt: 'ok' })).status).toBe(200); // the server still works
  });
});

describe.skipIf(!nativeAvailable())('tokenize on qwen3-q4', () => {
  let srv: RunningServer;
  const model = 'fixture-qwen3-q4';
  beforeAll(async () => {
    srv = await startServer(`${FIXTURE_ROOT}/qwen3-q4`, fixtureServeOptions(model));
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('gives the ids a chat completion is prompted with, and they round-trip', async () => {
    const messages = [{ role: 'user' as const, content: 'Hello there, tokenizer!' }];
    const t = (await post(srv.url, '/tokenize', { model, messages })).json();
    const r = await servedClient(srv.url).chat.completions.create({ model, messages, max_tokens: 1 });
    expect(t.count).toBe(r.usage!.prompt_tokens);
    expect(t.max_model_len).toBe(srv.model.info.contextLength);
    const d = (await post(srv.url, '/detokenize', { model, tokens: t.tokens })).json();
    expect(d.prompt).toContain('Hello there, tokenizer!');
    expect(d.prompt).toMatch(/<\|im_start\|>assistant\n$/);
    const noGen = (await post(srv.url, '/tokenize', { model, messages, add_generation_prompt: false })).json();
    expect(noGen.count).toBeLessThan(t.count);
    expect(t.tokens.slice(0, noGen.count)).toEqual(noGen.tokens);
    const p = (await post(srv.url, '/tokenize', { prompt: 'Hello there, tokenizer!' })).json();
    expect((await post(srv.url, '/detokenize', { tokens: p.tokens })).json().prompt).toBe('Hello there, tokenizer!');
    const bad = await post(srv.url, '/detokenize', { tokens: [0, srv.model.info.vocabSize] });
    expect(bad.status).toBe(400);
    expect(bad.json().error.param).toBe('tokens[1]');
  });

  it('reasoning_effort "none" turns thinking off on a thinking model (the template says so)', async () => {
    const client = servedClient(srv.url);
    const messages = [{ role: 'user' as const, content: 'think?' }];
    const off = await client.chat.completions.create({ model, messages, max_tokens: 1, reasoning_effort: 'none' });
    const on = await client.chat.completions.create({ model, messages, max_tokens: 1, reasoning_effort: 'high' });
    const explicitOff = await client.chat.completions.create({ model, messages, max_tokens: 1, chat_template_kwargs: { enable_thinking: false } } as never);
    expect(off.usage!.prompt_tokens).toBe((explicitOff as { usage: { prompt_tokens: number } }).usage.prompt_tokens);
    expect(on.usage!.prompt_tokens).toBeLessThan(off.usage!.prompt_tokens); // the empty <think></think> block
  });
});
