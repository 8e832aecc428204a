// The Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) with the unmodified
// @anthropic-ai/sdk over real HTTP: plain and system messages, an image on a VLM fixture, streaming
// with finalMessage(), forced tool calls and a tool_result round trip, stop_sequences, x-api-key
// auth; bad input is a 400 naming the field, in Anthropic's error shape. A scripted model gives
// exact output for thinking blocks and parsed (tool_choice auto) calls.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { fixtureServeOptions } from '../helpers/openai-chat.js';
import { VLM_FIXTURES, vlmFixtureReady } from '../helpers/vlm-engine.js';
import { schemaViolation } from '../grammar/json-schema-check.mjs';
import { Engine } from '../../src/engine/engine.js';
import { createServer, type RapidServer } from '../../src/server/server.js';
import { byteTextStream } from '../engine/helpers.js';
import { byteModel, post, raw } from './helpers.js';
import { SCRIPT_EOS, ScriptedModel } from './scripted-model.js';

const KEY = 'sk-local-test';
const MODEL = 'fixture-qwen2-q4';

const WEATHER: Anthropic.Tool = {
  name: 'get_weather',
  description: 'weather in a city',
  input_schema: { type: 'object', properties: { city: { enum: ['Oslo', 'Lima'] }, days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['city', 'days'], additionalProperties: false },
};

// SDK 1.x dropped temperature from its types (the API still takes it): greedy for exact comparisons.
const GREEDY: object = { temperature: 0 };

const textOf = (m: Anthropic.Message) => m.content.map((b) => (b.type === 'text' ? b.text : '')).join('');

describe.skipIf(!nativeAvailable())('/v1/messages with @anthropic-ai/sdk on qwen2-q4 (--api-key)', () => {
  let srv: RunningServer;
  let client: Anthropic;
  const logs: string[] = [];

  beforeAll(async () => {
    srv = await startServer(`${FIXTURE_ROOT}/qwen2-q4`, { ...fixtureServeOptions(MODEL), apiKey: KEY });
    client = new Anthropic({ baseURL: srv.url, apiKey: KEY, maxRetries: 0, timeout: 60_000 });
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('messages.create: a plain message and one with a system prompt', async () => {
    const m = await client.messages.create({ model: MODEL, max_tokens: 8, ...GREEDY, messages: [{ role: 'user', content: 'Hello' }] });
    expect(m.id).toMatch(/^msg_/);
    expect(m.type).toBe('message');
    expect(m.role).toBe('assistant');
    expect(m.model).toBe(MODEL);
    expect(m.content[0]!.type).toBe('text');
    expect(m.stop_reason === 'max_tokens' || m.stop_reason === 'end_turn').toBe(true);
    expect(m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0)).toBeGreaterThan(0);
    expect(m.usage.output_tokens).toBeGreaterThan(0);
    expect(m.usage.cache_creation_input_tokens).toBe(0);

    // The same conversation as a chat completion gives the same greedy text: the translation is faithful.
    const openai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60_000 });
    const sys = await client.messages.create({ model: MODEL, max_tokens: 8, ...GREEDY, system: [{ type: 'text', text: 'You are terse.' }], messages: [{ role: 'user', content: [{ type: 'text', text: 'Hello' }] }] });
    const chat = await openai.chat.completions.create({ model: MODEL, max_tokens: 8, ...GREEDY, messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Hello' }] });
    expect(textOf(sys)).toBe(chat.choices[0]!.message.content);
    expect(sys.usage.input_tokens + (sys.usage.cache_read_input_tokens ?? 0)).toBe(chat.usage!.prompt_tokens);

    const count = await client.messages.countTokens({ model: MODEL, system: 'You are terse.', messages: [{ role: 'user', content: 'Hello' }] });
    expect(count.input_tokens).toBe(chat.usage!.prompt_tokens);
  });

  it('messages.stream(): events build the same message as create, finalMessage() included', async () => {
    const body = { model: MODEL, max_tokens: 12, ...GREEDY, messages: [{ role: 'user' as const, content: 'Tell me a story' }] };
    const whole = await client.messages.create(body);
    const stream = client.messages.stream(body);
    const types: string[] = [];
    let streamed = '';
    stream.on('text', (t) => (streamed += t));
    for await (const ev of stream) types.push(ev.type);
    const final = await stream.finalMessage();
    expect(types[0]).toBe('message_start');
    expect(types.at(-1)).toBe('message_stop');
    expect(types).toContain('content_block_start');
    expect(types).toContain('content_block_delta');
    expect(types).toContain('message_delta');
    expect(final.id).toMatch(/^msg_/);
    expect(textOf(final)).toBe(textOf(whole));
    expect(streamed).toBe(textOf(whole));
    expect(final.stop_reason).toBe(whole.stop_reason);
    expect(final.usage.output_tokens).toBe(whole.usage.output_tokens);
  });

  it('tools with tool_choice any: a tool_use block with an object input, streamed and not; then a tool_result round trip', async () => {
    const body = { model: MODEL, max_tokens: 96, ...GREEDY, tools: [WEATHER], tool_choice: { type: 'any' as const }, messages: [{ role: 'user' as const, content: 'Weather in Oslo?' }] };
    const m = await client.messages.create(body);
    expect(m.stop_reason).toBe('tool_use');
    const use = m.content.find((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use')!;
    expect(use.id).toMatch(/^toolu_/);
    expect(use.name).toBe('get_weather');
    expect(typeof use.input).toBe('object');
    expect(schemaViolation(WEATHER.input_schema, use.input)).toBeNull();

    const streamed = await client.messages.stream({ ...body, tool_choice: { type: 'tool', name: 'get_weather' } }).finalMessage();
    const sUse = streamed.content.find((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use')!;
    expect(streamed.stop_reason).toBe('tool_use');
    expect(sUse.input).toEqual(use.input);

    const next = await client.messages.create({
      model: MODEL,
      max_tokens: 8,
      ...GREEDY,
      tools: [WEATHER],
      messages: [
        { role: 'user', content: 'Weather in Oslo?' },
        { role: 'assistant', content: [{ type: 'thinking', thinking: 'earlier', signature: '' }, { type: 'tool_use', id: use.id, name: use.name, input: use.input }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: [{ type: 'text', text: '{"temp": 3}' }] }] },
      ],
      tool_choice: { type: 'none' },
    });
    expect(next.content.some((b) => b.type === 'tool_use')).toBe(false);
    expect(textOf(next).length).toBeGreaterThan(0);

    // A tool_result for an id the assistant never used names the field.
    const bad = await post(srv.url, '/v1/messages', {
      model: MODEL,
      max_tokens: 8,
      messages: [
        { role: 'user', content: 'Weather in Oslo?' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: {} }] },
        { role: 'user', content: [{ type: 'text', text: 'here:' }, { type: 'tool_result', tool_use_id: 'toolu_2', content: 'x' }] },
      ],
    }, { 'x-api-key': KEY });
    expect(bad.status).toBe(400);
    expect(bad.json().error.message).toContain('messages[2].content[1].tool_use_id');
  });

  it('stop_sequences: stop_reason stop_sequence with the matched sequence, streamed and not', async () => {
    const base = { model: MODEL, max_tokens: 24, ...GREEDY, messages: [{ role: 'user' as const, content: 'Count for me' }] };
    const free = textOf(await client.messages.create(base));
    const stop = free.slice(6, 9);
    expect(stop.trim().length, `output ${JSON.stringify(free)}`).toBeGreaterThan(0);
    const cut = free.slice(0, free.indexOf(stop));
    const m = await client.messages.create({ ...base, stop_sequences: ['never-there', stop] });
    expect(m.stop_reason).toBe('stop_sequence');
    expect(m.stop_sequence).toBe(stop);
    expect(textOf(m)).toBe(cut);
    const s = await client.messages.stream({ ...base, stop_sequences: [stop] }).finalMessage();
    expect(s.stop_reason).toBe('stop_sequence');
    expect(s.stop_sequence).toBe(stop);
    expect(textOf(s)).toBe(cut);
  });

  it('output_config.format json_schema constrains the text; a schema it cannot enforce names the field', async () => {
    const schema = { type: 'object', properties: { city: { enum: ['Oslo', 'Lima'] }, n: { type: 'integer' } }, required: ['city', 'n'], additionalProperties: false };
    const m = await client.messages.create({ model: MODEL, max_tokens: 64, ...GREEDY, output_config: { format: { type: 'json_schema', schema } }, messages: [{ role: 'user', content: 'Pick a city' }] });
    expect(schemaViolation(schema, JSON.parse(textOf(m))), textOf(m)).toBeNull();
    const bad = await post(srv.url, '/v1/messages', { model: MODEL, max_tokens: 8, output_config: { format: { type: 'json_schema', schema: { type: 'nonsense' } } }, messages: [{ role: 'user', content: 'x' }] }, { 'x-api-key': KEY });
    expect(bad.status, bad.text).toBe(400);
    expect(bad.json().error.message).toContain('output_config.format');
  });

  it('x-api-key: a wrong key is a 401 authentication_error; Bearer works too', async () => {
    const wrong = new Anthropic({ baseURL: srv.url, apiKey: 'nope', maxRetries: 0 });
    const err = await wrong.messages.create({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.AuthenticationError);
    expect((err as InstanceType<typeof Anthropic.AuthenticationError>).status).toBe(401);
    expect((err as InstanceType<typeof Anthropic.AuthenticationError>).error).toMatchObject({ type: 'error', error: { type: 'authentication_error' } });
    const bearer = new Anthropic({ baseURL: srv.url, apiKey: null, authToken: KEY, maxRetries: 0 });
    const ok = await bearer.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });
    expect(ok.type).toBe('message');
  });

  it('bad input: a 400 naming the field, in Anthropic\'s error shape', async () => {
    const h = { 'x-api-key': KEY, 'anthropic-version': '2023-06-01' };
    const cases: [unknown, string][] = [
      [{ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }, 'max_tokens'],
      [{ model: MODEL, max_tokens: 0, messages: [{ role: 'user', content: 'hi' }] }, 'max_tokens'],
      [{ model: MODEL, max_tokens: 4, messages: [] }, 'messages'],
      [{ model: MODEL, max_tokens: 4, messages: [{ role: 'system', content: 'hi' }] }, 'messages[0].role'],
      [{ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'text', text: 5 }] }] }, 'messages[0].content[0].text'],
      [{ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }] }, 'messages[0].content[0]'],
      [{ model: MODEL, max_tokens: 4, stop_sequences: 'x', messages: [{ role: 'user', content: 'hi' }] }, 'stop_sequences'],
      [{ model: MODEL, max_tokens: 4, stop_sequences: Array(20).fill('x'), messages: [{ role: 'user', content: 'hi' }] }, 'stop_sequences'],
      [{ model: MODEL, max_tokens: 4, temperature: 'hot', messages: [{ role: 'user', content: 'hi' }] }, 'temperature'],
      [{ model: MODEL, max_tokens: 4, tools: [{ name: 'f' }], messages: [{ role: 'user', content: 'hi' }] }, 'tools[0].input_schema'],
      [{ model: MODEL, max_tokens: 4, tools: [{ name: 'bad name!', input_schema: { type: 'object' } }], messages: [{ role: 'user', content: 'hi' }] }, 'tools[0].name'],
      [{ model: MODEL, max_tokens: 4, tools: [WEATHER], tool_choice: { type: 'tool', name: 'nope' }, messages: [{ role: 'user', content: 'hi' }] }, 'tool_choice'],
      [{ model: MODEL, max_tokens: 4, tool_choice: { type: 'sometimes' }, messages: [{ role: 'user', content: 'hi' }] }, 'tool_choice.type'],
      [{ model: MODEL, max_tokens: 4, thinking: { type: 'maybe' }, messages: [{ role: 'user', content: 'hi' }] }, 'thinking.type'],
      [{ model: MODEL, max_tokens: 4, system: [{ type: 'image' }], messages: [{ role: 'user', content: 'hi' }] }, 'system[0]'],
    ];
    for (const [body, field] of cases) {
      const r = await post(srv.url, '/v1/messages', body, h);
      expect(r.status, `${field}: ${r.text}`).toBe(400);
      const j = r.json();
      expect(j.type).toBe('error');
      expect(j.error.type).toBe('invalid_request_error');
      expect(j.error.message, JSON.stringify(body)).toContain(field);
    }
    // Errors thrown before the handler (invalid JSON, unknown model, wrong method) take the shape too.
    const json = await post(srv.url, '/v1/messages', '{"model":', h);
    expect(json.status).toBe(400);
    expect(json.json()).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    const model = await post(srv.url, '/v1/messages', { model: 'claude-x', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }, h);
    expect(model.status).toBe(404);
    expect(model.json()).toMatchObject({ type: 'error', error: { type: 'not_found_error' } });
    const get = await raw(srv.url, '/v1/messages', { headers: h });
    expect(get.status).toBe(405);
    expect(get.json().type).toBe('error');
    // Unknown and Anthropic-only fields are accepted (and logged once), not refused.
    const extra = await post(srv.url, '/v1/messages', { model: MODEL, max_tokens: 2, metadata: { user_id: 'u' }, service_tier: 'auto', some_future_field: 1, messages: [{ role: 'user', content: 'hi' }] }, h);
    expect(extra.status, extra.text).toBe(200);
    expect(extra.json().type).toBe('message');
  });
});

const TINY_VLM = join(import.meta.dirname, '..', '..', 'models', 'tiny-vlm');

describe.skipIf(!nativeAvailable())('/v1/messages on the default model (tiny-vlm) with the SDK\'s defaults', () => {
  let srv: RunningServer;
  beforeAll(async () => {
    srv = await startServer(TINY_VLM, { port: 0, servedModelName: 'tiny-vlm' });
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('answers a fact, and questions on an image block, streamed and not', async () => {
    const client = new Anthropic({ baseURL: srv.url, apiKey: 'unused' });
    const fact = await client.messages.create({ model: 'tiny-vlm', max_tokens: 16, ...GREEDY, messages: [{ role: 'user', content: 'What is the capital of Japan?' }] });
    expect(textOf(fact).trim()).toBe('Tokyo');
    expect(fact.stop_reason).toBe('end_turn');
    const data = readFileSync(join(TINY_VLM, 'golden', 'g00_112x112.png')).toString('base64');
    const image: Anthropic.ImageBlockParam = { type: 'image', source: { type: 'base64', media_type: 'image/png', data } };
    const count = await client.messages.create({ model: 'tiny-vlm', max_tokens: 16, ...GREEDY, messages: [{ role: 'user', content: [image, { type: 'text', text: 'How many shapes can you see?' }] }] });
    expect(textOf(count).trim()).toBe('4');
    const bg = await client.messages.stream({ model: 'tiny-vlm', max_tokens: 16, ...GREEDY, messages: [{ role: 'user', content: [image, { type: 'text', text: 'What color is the background?' }] }] }).finalMessage();
    expect(textOf(bg).trim()).toBe('black');
  });
});

const VLM = join(VLM_FIXTURES, 'qwen2_5_vl-f32');

describe.skipIf(!vlmFixtureReady(VLM))('/v1/messages with an image block on qwen2_5_vl-f32', () => {
  let srv: RunningServer;
  beforeAll(async () => {
    srv = await startServer(VLM, { port: 0, precision: 'exact', maxBatchedTokens: 16, servedModelName: 'vlm' });
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('a base64 image block gives the same greedy text as the image as a chat completion', async () => {
    const data = readFileSync(join(VLM_FIXTURES, 'images', 'square_130x130.png')).toString('base64');
    const client = new Anthropic({ baseURL: srv.url, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
    const m = await client.messages.create({
      model: 'vlm',
      max_tokens: 8,
      ...GREEDY,
      messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data } }, { type: 'text', text: 'What is this?' }] }],
    });
    const openai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
    const chat = await openai.chat.completions.create({
      model: 'vlm',
      max_tokens: 8,
      ...GREEDY,
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${data}` } }, { type: 'text', text: 'What is this?' }] }],
    });
    expect(textOf(m)).toBe(chat.choices[0]!.message.content);
    expect(m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0)).toBe(chat.usage!.prompt_tokens);
    const count = await client.messages.countTokens({ model: 'vlm', messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data } }, { type: 'text', text: 'What is this?' }] }] });
    expect(count.input_tokens).toBe(chat.usage!.prompt_tokens);
    // A corrupt image names its block.
    const bad = await post(srv.url, '/v1/messages', { model: 'vlm', max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'text', text: 'see' }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }] });
    expect(bad.status).toBe(400);
    expect(bad.json().error.message).toContain('messages[0].content[1]');
  });
});

const THINK_AND_CALL =
  '<think>\nI should call.\n</think>\n\nLet me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>\n<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>';

describe('/v1/messages on a scripted thinking model with hermes tool calls', () => {
  let server: RapidServer;
  let client: Anthropic;
  let url: string;
  const logs: string[] = [];
  const tools: Anthropic.Tool[] = [WEATHER, { name: 'ping', input_schema: { type: 'object', properties: {} } }];

  beforeAll(async () => {
    // A BEL byte breaks the detokenizer: that request fails alone, mid-stream.
    const newTextStream = () => {
      const t = byteTextStream();
      const push = (id: number) => {
        if (id === 7) throw new Error('detokenizer broke');
        return t.push(id);
      };
      return { push, flush: () => t.flush() };
    };
    const engine = new Engine({ model: new ScriptedModel({ call: THINK_AND_CALL, plain: 'Just text.', fail: 'Some text\x07 then more', long: 'y'.repeat(1500) }), newTextStream, stopTokenIds: [SCRIPT_EOS], enablePrefixCache: false });
    server = createServer({ engine, model: { ...byteModel(engine.contextLength), toolFormat: 'hermes', reasoning: true }, log: (l) => logs.push(l), maxBodyBytes: 64 << 10, keepAliveMs: 20 });
    url = (await server.listen(0, '127.0.0.1')).url;
    client = new Anthropic({ baseURL: url, apiKey: 'unused', maxRetries: 0, timeout: 20_000 });
  });
  afterAll(async () => {
    await server.close(100);
  });

  const ask = { model: 'fake-model', max_tokens: 400, ...GREEDY, tools, thinking: { type: 'enabled' as const, budget_tokens: 1024 }, messages: [{ role: 'user' as const, content: 'call' }] };

  it('thinking, text and parsed calls are blocks in order, streamed and not, with stop_reason tool_use', async () => {
    const expected = [
      { type: 'thinking', thinking: '\nI should call.\n', signature: '' },
      { type: 'text', text: 'Let me check.' },
      { type: 'tool_use', name: 'get_weather', input: { city: 'Oslo', days: 2 } },
      { type: 'tool_use', name: 'ping', input: {} },
    ];
    const m = await client.messages.create(ask);
    expect(m.stop_reason).toBe('tool_use');
    expect(m.content).toMatchObject(expected);
    const stream = client.messages.stream(ask);
    const starts: string[] = [];
    stream.on('streamEvent', (e) => {
      if (e.type === 'content_block_start') starts.push(`${e.index}:${e.content_block.type}`);
    });
    const final = await stream.finalMessage();
    expect(final.stop_reason).toBe('tool_use');
    expect(final.content).toMatchObject(expected);
    expect(starts).toEqual(['0:thinking', '1:text', '2:tool_use', '3:tool_use']);
    const ids = final.content.flatMap((b) => (b.type === 'tool_use' ? [b.id] : []));
    expect(ids.every((id) => id.startsWith('toolu_'))).toBe(true);
    expect(new Set(ids).size).toBe(2);
  });

  it('disable_parallel_tool_use keeps one call; thinking disabled leaves the text as it is', async () => {
    const one = await client.messages.create({ ...ask, tool_choice: { type: 'auto', disable_parallel_tool_use: true } });
    expect(one.content.filter((b) => b.type === 'tool_use')).toHaveLength(1);
    const off = await client.messages.create({ ...ask, tools: [], tool_choice: { type: 'auto' }, thinking: { type: 'disabled' } });
    expect(off.content.some((b) => b.type === 'thinking')).toBe(false);
    expect(textOf(off)).toContain('<think>');
    // Without `thinking`, as Anthropic, no thinking: the switch is off and content[0] is text.
    const { thinking: _, ...noThinking } = ask;
    const plain = await client.messages.create(noThinking);
    expect(plain.content[0]!.type).toBe('text');
    const on = await client.messages.create({ ...ask, messages: [{ role: 'user', content: 'plain' }], thinking: { type: 'enabled', budget_tokens: 1024 } });
    expect(on.stop_reason).toBe('end_turn');
    expect(textOf(on)).toBe('Just text.');
  });

  it('count_tokens counts what messages.create prefills; ignored fields are logged once', async () => {
    const body = { model: 'fake-model', system: 'Be brief.', messages: [{ role: 'user' as const, content: 'plain' }] };
    const { input_tokens } = await client.messages.countTokens(body);
    const m = await client.messages.create({ ...body, max_tokens: 4, metadata: { user_id: 'x' } });
    expect(input_tokens).toBe(m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0));
    await client.messages.create({ ...body, max_tokens: 4, metadata: { user_id: 'y' } });
    expect(logs.filter((l) => l.includes('"metadata"'))).toHaveLength(1);
  });

  it('a failure mid-stream ends the stream with an error event; unstreamed it is a 500 in Anthropic\'s shape', async () => {
    const body = { model: 'fake-model', max_tokens: 100, messages: [{ role: 'user' as const, content: 'fail' }] };
    const stream = client.messages.stream(body);
    let text = '';
    stream.on('text', (t) => (text += t));
    const err = await stream.finalMessage().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.APIError);
    expect((err as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({ type: 'error', error: { type: 'api_error' } });
    expect(text).toBe('Some text');
    const r = await post(url, '/v1/messages', body);
    expect(r.status).toBe(500);
    expect(r.json()).toMatchObject({ type: 'error', error: { type: 'api_error', message: expect.stringContaining('detokenizer broke') } });
    expect((await client.messages.create({ ...body, messages: [{ role: 'user', content: 'plain' }] })).content).toMatchObject([{ type: 'text', text: 'Just text.' }]);
  });

  it('errors before the handler take the shape: 413, an unknown path under /v1/messages', async () => {
    const big = await post(url, '/v1/messages', { model: 'fake-model', max_tokens: 4, messages: [{ role: 'user', content: 'x'.repeat(100 << 10) }] });
    expect(big.status).toBe(413);
    expect(big.json()).toMatchObject({ type: 'error', error: { type: 'request_too_large' } });
    const nowhere = await post(url, '/v1/messages/batches', {});
    expect(nowhere.status).toBe(404);
    expect(nowhere.json()).toMatchObject({ type: 'error', error: { type: 'not_found_error' } });
  });

  it('a client that leaves mid-stream frees its request; the next one is served', async () => {
    const ac = new AbortController();
    const res = await fetch(`${url}/v1/messages`, { method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'fake-model', max_tokens: 1500, stream: true, messages: [{ role: 'user', content: 'long' }] }) });
    const reader = res.body!.getReader();
    let seen = '';
    while (!seen.includes('text_delta')) seen += new TextDecoder().decode((await reader.read()).value);
    const before = server.metrics.disconnects;
    ac.abort();
    const deadline = Date.now() + 5000;
    while (server.metrics.disconnects === before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(server.metrics.disconnects).toBe(before + 1);
    const status = (await (await fetch(`${url}/v1/status`)).json()) as { running: number };
    expect(status.running).toBe(0);
    expect(textOf(await client.messages.create({ model: 'fake-model', max_tokens: 20, messages: [{ role: 'user', content: 'plain' }] }))).toBe('Just text.');
  });

  it('a seeded storm of mutated bodies: every answer a 200 or a 4xx in Anthropic\'s shape, streams end', async () => {
    let seed = 7;
    const rand = (n: number) => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) % n);
    const values: unknown[] = [null, 0, -1, 1.5, 1e12, '', 'x', 'user', 'text', 'image', 'tool_use', true, [], [null], {}, { type: 'text' }, { type: 'image', source: { type: 'url' } }, { a: { b: { c: [] } } }];
    const valid = () => ({
      model: 'fake-model',
      max_tokens: 8,
      stream: false,
      system: [{ type: 'text', text: 'sys' }],
      tools: [{ name: 'ping', input_schema: { type: 'object', properties: {} } }],
      tool_choice: { type: 'auto' },
      thinking: { type: 'enabled', budget_tokens: 1024 },
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'call' }] },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'ping', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: [{ type: 'text', text: 'ok' }] }, { type: 'text', text: 'plain' }] },
      ],
    });
    /** Replaces one randomly chosen value anywhere in the body. */
    const mutate = (v: unknown): unknown => {
      if (Array.isArray(v) && v.length > 0 && rand(3) > 0) {
        const i = rand(v.length);
        return v.map((x, j) => (j === i ? mutate(x) : x));
      }
      if (v !== null && typeof v === 'object' && !Array.isArray(v) && rand(4) > 0) {
        const keys = Object.keys(v);
        if (keys.length > 0) {
          const k = keys[rand(keys.length)]!;
          return { ...v, [k]: mutate((v as Record<string, unknown>)[k]) };
        }
      }
      return values[rand(values.length)];
    };
    const v0 = await post(url, '/v1/messages', valid());
    expect(v0.status, v0.text).toBe(200);
    for (let i = 0; i < 200; i++) {
      const body = (i % 2 ? mutate(valid()) : mutate(mutate(valid()))) as Record<string, unknown>;
      const r = await post(url, i % 3 === 2 ? '/v1/messages/count_tokens' : '/v1/messages', body);
      const what = `${r.status} ${JSON.stringify(body)} -> ${r.text.slice(0, 300)}`;
      expect(r.status === 200 || (r.status >= 400 && r.status < 500), what).toBe(true);
      if (r.status !== 200) {
        expect(r.json(), what).toMatchObject({ type: 'error', error: { type: expect.any(String), message: expect.any(String) } });
      } else if (body.stream === true && i % 3 !== 2) {
        expect(r.text.trimEnd().endsWith('data: {"type":"message_stop"}') || r.text.includes('event: error'), what).toBe(true);
      }
    }
    expect((await raw(url, '/health')).status).toBe(200);
  });

  it('models.list() and models.retrieve() read the served model', async () => {
    const ids: string[] = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids).toEqual(['fake-model']);
    expect((await client.models.retrieve('fake-model')).id).toBe('fake-model');
  });

  it('a stream opens with message_start and a ping and ends with message_stop', async () => {
    const res = await fetch(`${url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...ask, stream: true }) });
    const text = await res.text();
    expect(text.startsWith('event: message_start\n')).toBe(true);
    expect(text).toContain('event: ping\ndata: {"type":"ping"}');
    expect(text.trimEnd().endsWith('event: message_stop\ndata: {"type":"message_stop"}')).toBe(true);
  });
});
