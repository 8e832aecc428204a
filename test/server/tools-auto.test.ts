// tool_choice "auto" end to end over real HTTP with the official openai client: a scripted native
// model writes each family's tool-call text through the real Engine, server and parsers, streamed
// and not; parallel_tool_calls=false; tool results round-trip and bad conversations get 400s.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.js';
import { createServer, type RapidServer } from '../../src/server/server.js';
import { prepareToolMessages } from '../../src/server/tools.js';
import { detectToolFormat } from '../../src/server/tool-parsers/registry.js';
import { ChatTemplate, selectChatTemplate, type ChatMessage } from '../../src/template/chat-template.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import { byteTextStream } from '../engine/helpers.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { SCRIPT_EOS, ScriptedModel } from './scripted-model.js';
import { byteModel, post } from './helpers.js';

const HERMES_TWO =
  'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>\n<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>';
const SCRIPTS: Record<string, string> = {
  two: HERMES_TWO,
  plain: 'Just text, with a < sign and <tool but no call.',
  unicode: '<tool_call>\n{"name": "say", "arguments": {"text": "grüße 🌍"}}\n</tool_call>',
  mistral: 'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Lima", "days": 1}[TOOL_CALLS]ping[ARGS]{"ok": true}',
  gemma: '<start_function_call>call:get_weather{city:<escape>Oslo<escape>,days:3}<end_function_call>',
  think: '<think>\nI should call.\n</think>\n\n<tool_call>\n{"name": "ping", "arguments": {"ok": true}}\n</tool_call>',
  long: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>',
};

const TOOLS: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
    },
  },
  { type: 'function', function: { name: 'ping', parameters: { type: 'object', properties: { ok: { type: 'boolean' } } } } },
  { type: 'function', function: { name: 'say', parameters: { type: 'object', properties: { text: { type: 'string' } } } } },
];

async function serve(toolFormat: string, reasoning = false): Promise<{ server: RapidServer; client: OpenAI; url: string; streams: unknown[] }> {
  const model = new ScriptedModel(SCRIPTS);
  const streams: unknown[] = []; // the options each request's detokenizer was made with
  const newTextStream = (o?: { keepSpecialTokens?: boolean }) => (streams.push(o), byteTextStream());
  const engine = new Engine({ model, newTextStream, stopTokenIds: [SCRIPT_EOS], enablePrefixCache: false });
  const server = createServer({ engine, model: { ...byteModel(engine.contextLength), toolFormat, reasoning } });
  const { url } = await server.listen(0, '127.0.0.1');
  return { server, url, streams, client: new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 20_000 }) };
}

const ask = (content: string, extra: Omit<Partial<OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming>, 'stream'> = {}) => ({
  model: 'fake-model',
  messages: [{ role: 'user' as const, content }],
  tools: TOOLS,
  max_tokens: 400,
  temperature: 0,
  ...extra,
});

function callsOf(m: { tool_calls?: unknown[] | null }): { name: string; args: unknown }[] {
  return ((m.tool_calls ?? []) as { id: string; type: string; function: { name: string; arguments: string } }[]).map((c) => {
    expect(c.id).toMatch(/^call_/);
    expect(c.type).toBe('function');
    return { name: c.function.name, args: JSON.parse(c.function.arguments) };
  });
}

describe('tool_choice auto (hermes / Qwen format)', () => {
  let s: Awaited<ReturnType<typeof serve>>;
  beforeAll(async () => {
    s = await serve('hermes');
  });
  afterAll(async () => {
    await s.server.close(100);
  });

  it('non-streamed: parallel calls, content outside them, finish_reason tool_calls', async () => {
    const r = await s.client.chat.completions.create(ask('two'));
    const c = r.choices[0]!;
    expect(c.finish_reason).toBe('tool_calls');
    expect(c.message.content).toBe('Let me check.');
    expect(callsOf(c.message)).toEqual([
      { name: 'get_weather', args: { city: 'Oslo', days: 2 } },
      { name: 'ping', args: {} },
    ]);
    const ids = c.message.tool_calls!.map((t) => t.id);
    expect(new Set(ids).size).toBe(2);
  });

  it('streamed: content first, then OpenAI-shaped tool-call deltas the SDK accumulates', async () => {
    const stream = s.client.chat.completions.stream(ask('two'));
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    stream.on('chunk', (c) => chunks.push(c));
    const final = await stream.finalChatCompletion();
    const c = final.choices[0]!;
    expect(c.finish_reason).toBe('tool_calls');
    expect(c.message.content).toBe('Let me check.');
    expect(callsOf(c.message)).toEqual([
      { name: 'get_weather', args: { city: 'Oslo', days: 2 } },
      { name: 'ping', args: {} },
    ]);
    const deltas = chunks.flatMap((k) => k.choices[0]?.delta.tool_calls ?? []);
    const seen = new Set<number>();
    for (const d of deltas) {
      if (!seen.has(d.index)) {
        seen.add(d.index);
        expect(d.id).toMatch(/^call_/);
        expect(d.type).toBe('function');
        expect(d.function?.name).toBeTruthy();
      } else {
        expect(d.id).toBeUndefined();
        expect(d.function?.name).toBeUndefined();
      }
    }
    expect(deltas.length).toBeGreaterThan(4); // arguments arrive as fragments
    const content = chunks.map((k) => k.choices[0]?.delta.content ?? '').join('');
    expect(content).toBe('Let me check.');
  });

  it('a reply without a call is plain content (partial markers released), streamed or not', async () => {
    const r = await s.client.chat.completions.create(ask('plain'));
    expect(r.choices[0]!.finish_reason).toBe('stop');
    expect(r.choices[0]!.message.content).toBe(SCRIPTS.plain);
    expect(r.choices[0]!.message.tool_calls ?? []).toEqual([]);
    const st = await s.client.chat.completions.create({ ...ask('plain'), stream: true });
    let text = '';
    let finish: string | null = null;
    for await (const c of st) {
      text += c.choices[0]?.delta.content ?? '';
      expect(c.choices[0]?.delta.tool_calls).toBeUndefined();
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    expect(text).toBe(SCRIPTS.plain);
    expect(finish).toBe('stop');
  });

  it('parallel_tool_calls=false gives at most one call', async () => {
    const r = await s.client.chat.completions.create(ask('two', { parallel_tool_calls: false }));
    expect(callsOf(r.choices[0]!.message)).toEqual([{ name: 'get_weather', args: { city: 'Oslo', days: 2 } }]);
    const st = s.client.chat.completions.stream(ask('two', { parallel_tool_calls: false }));
    const final = await st.finalChatCompletion();
    expect(callsOf(final.choices[0]!.message)).toHaveLength(1);
  });

  it('multi-byte text inside arguments survives byte-wise decoding', async () => {
    const r = await s.client.chat.completions.create(ask('unicode'));
    expect(callsOf(r.choices[0]!.message)).toEqual([{ name: 'say', args: { text: 'grüße 🌍' } }]);
    const final = await s.client.chat.completions.stream(ask('unicode')).finalChatCompletion();
    expect(callsOf(final.choices[0]!.message)).toEqual([{ name: 'say', args: { text: 'grüße 🌍' } }]);
  });

  it('max_tokens inside a call: finish_reason length, and the cut text comes back as content', async () => {
    const r = await s.client.chat.completions.create(ask('long', { max_tokens: 30 }));
    expect(r.choices[0]!.finish_reason).toBe('length');
    expect(r.choices[0]!.message.tool_calls ?? []).toEqual([]);
    expect(r.choices[0]!.message.content).toBe(SCRIPTS.long!.slice(0, 30));
  });

  it('tool results round-trip; conversations that cannot render get a 400 saying what to fix', async () => {
    const call = { id: 'call_1', type: 'function' as const, function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } };
    const ok = await s.client.chat.completions.create({
      model: 'fake-model',
      tools: TOOLS,
      max_tokens: 5,
      messages: [
        { role: 'user', content: 'plain' },
        { role: 'assistant', content: null, tool_calls: [call] },
        { role: 'tool', tool_call_id: 'call_1', content: [{ type: 'text', text: '{"temp": 3}' }] },
        { role: 'user', content: 'plain' },
      ],
    });
    expect(ok.choices[0]!.message.content).toBe(SCRIPTS.plain!.slice(0, 5));
    const bad: [unknown[], RegExp][] = [
      [[{ role: 'user', content: 'x' }, { role: 'assistant', content: null, tool_calls: [{ ...call, function: { name: 'f', arguments: '{oops' } }] }], /tool_calls\[0\]\.function\.arguments must be a JSON object/],
      [[{ role: 'user', content: 'x' }, { role: 'assistant', content: null, tool_calls: [call] }, { role: 'tool', content: 'r' }], /tool_call_id is required/],
      [[{ role: 'user', content: 'x' }, { role: 'assistant', content: null, tool_calls: [call] }, { role: 'tool', tool_call_id: 'call_9', content: 'r' }], /"call_9" matches no call.*call_1/],
      [[{ role: 'tool', tool_call_id: 'call_1', content: 'r' }], /must follow an assistant message with tool_calls/],
      [[{ role: 'user', content: 'x' }, { role: 'assistant', content: null }], /needs content or tool_calls/],
    ];
    for (const [messages, msg] of bad) {
      const r = await post(s.url, '/v1/chat/completions', { messages, tools: TOOLS });
      expect(r.status, JSON.stringify(messages)).toBe(400);
      expect(r.json().error.message).toMatch(msg);
    }
    // auto needs no grammar: parameters outside the grammar's subset are fine; a forced call is refused.
    const odd = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { n: { type: 'integer', multipleOf: 5 } } } } }];
    expect((await post(s.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'plain' }], tools: odd, max_tokens: 3 })).status).toBe(200);
    const forced = await post(s.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'plain' }], tools: odd, tool_choice: 'required' });
    expect(forced.status).toBe(400);
    expect(forced.json().error.message).toMatch(/tools\[0\]\.function\.parameters.*"multipleOf" is not supported/);
    const p = await post(s.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], tools: TOOLS, parallel_tool_calls: 'no' });
    expect(p.status).toBe(400);
    expect(p.json().error.param).toBe('parallel_tool_calls');
  });
});

describe('tool_choice auto on a thinking model', () => {
  let s: Awaited<ReturnType<typeof serve>>;
  beforeAll(async () => {
    s = await serve('hermes', true);
  });
  afterAll(async () => {
    await s.server.close(100);
  });

  it('reasoning goes to reasoning_content, the call to tool_calls, nothing leaks into content', async () => {
    const r = await s.client.chat.completions.create(ask('think'));
    const m = r.choices[0]!.message as typeof r.choices[0]['message'] & { reasoning_content?: string };
    expect(r.choices[0]!.finish_reason).toBe('tool_calls');
    expect(m.reasoning_content).toContain('I should call.');
    expect(m.content).toBeNull();
    expect(callsOf(m)).toEqual([{ name: 'ping', args: { ok: true } }]);
    const st = await s.client.chat.completions.create({ ...ask('think'), stream: true });
    let reasoning = '';
    let content = '';
    const calls: { name: string; args: string }[] = [];
    let finish: string | null = null;
    for await (const c of st) {
      const d = c.choices[0]?.delta as { content?: string | null; reasoning_content?: string; tool_calls?: { index: number; function?: { name?: string; arguments?: string } }[] } | undefined;
      reasoning += d?.reasoning_content ?? '';
      content += d?.content ?? '';
      for (const t of d?.tool_calls ?? []) {
        calls[t.index] ??= { name: '', args: '' };
        calls[t.index]!.name += t.function?.name ?? '';
        calls[t.index]!.args += t.function?.arguments ?? '';
      }
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    expect(reasoning).toBe(m.reasoning_content);
    expect(content).toBe('');
    expect(calls.map((c) => ({ name: c.name, args: JSON.parse(c.args) }))).toEqual([{ name: 'ping', args: { ok: true } }]);
    expect(finish).toBe('tool_calls');
  });
});

describe.each([
  ['mistral', 'mistral', 'Sure.', [{ name: 'get_weather', args: { city: 'Lima', days: 1 } }, { name: 'ping', args: { ok: true } }]],
  ['gemma4', 'gemma', null, [{ name: 'get_weather', args: { city: 'Oslo', days: 3 } }]],
] as const)('tool_choice auto (%s format)', (format, key, content, calls) => {
  let s: Awaited<ReturnType<typeof serve>>;
  beforeAll(async () => {
    s = await serve(format);
  });
  afterAll(async () => {
    await s.server.close(100);
  });

  it('parses the family format, streamed and not', async () => {
    const r = await s.client.chat.completions.create(ask(key));
    expect(r.choices[0]!.finish_reason).toBe('tool_calls');
    expect(r.choices[0]!.message.content).toBe(content);
    expect(callsOf(r.choices[0]!.message)).toEqual(calls);
    const final = await s.client.chat.completions.stream(ask(key)).finalChatCompletion();
    expect(final.choices[0]!.finish_reason).toBe('tool_calls');
    expect(callsOf(final.choices[0]!.message)).toEqual(calls);
    // Their markers are special tokens: the detokenizer keeps them for tool requests only.
    expect(s.streams.at(-1)).toEqual({ keepSpecialTokens: true });
    await s.client.chat.completions.create({ model: 'fake-model', messages: [{ role: 'user', content: key }], max_tokens: 2 });
    expect(s.streams.at(-1)).toBeUndefined();
  });
});

describe('tool messages through the real Qwen chat templates', () => {
  const conversation = [
    { role: 'user', content: 'weather?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Oslo", "days": 2}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: [{ type: 'text', text: '{"temp": 3}' }] },
  ];

  it.each(['qwen2-q4', 'qwen3-q4'])('%s: arguments render as an object, the result as a tool_response', (name) => {
    const text = loadTokenizerDir(`${FIXTURE_ROOT}/${name}`);
    const picked = selectChatTemplate(text.chatTemplates)!;
    const rendered = new ChatTemplate(picked.source, picked.name).render({
      messages: prepareToolMessages(conversation as ChatMessage[]),
      tools: TOOLS,
      addGenerationPrompt: true,
      specialTokens: text.specialTokens,
    });
    expect(rendered).toContain('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>');
    expect(rendered).toContain('<tool_response>\n{"temp": 3}\n</tool_response>');
    expect(rendered).toContain('"name": "get_weather"'); // the tools list
    expect(detectToolFormat(picked.source)).toBe('hermes');
  });
});
