// Every field of OpenAI's current chat/completions request schema is accepted (the official Node
// SDK sends them over real HTTP): the applied ones act, the others are logged once per server;
// fields OpenAI does not define are accepted and logged unless --strict-requests; type errors are
// still 400s naming the field. Also the served model names, legacy functions and reasoning_effort.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/template/chat-template.js';
import { Command } from 'commander';
import { modelNames, registerServe } from '../../src/cli/commands/serve.js';
import { IGNORED_CHAT_FIELDS } from '../../src/server/openai-fields.js';
import { byteModel, MODEL_ID, post, raw, startFakeServer } from './helpers.js';

type Started = Awaited<ReturnType<typeof startFakeServer>>;
const msgs = [{ role: 'user' as const, content: 'hi' }];

/** A byte model that records what each chat prompt was rendered from. */
function recordingModel(reasoning: boolean) {
  const seen: { messages: ChatMessage[]; args: Record<string, unknown> | undefined }[] = [];
  const base = byteModel(256);
  const model = { ...base, reasoning, encodeChat: (messages: ChatMessage[], args?: Record<string, unknown>) => (seen.push({ messages, args }), base.encodeChat(messages)) };
  return { model, seen };
}

describe('lenient request fields', () => {
  let s: Started;
  const lines: string[] = [];
  const rec = recordingModel(true);
  beforeAll(async () => {
    s = await startFakeServer({ stepMs: 1 }, {}, { model: rec.model, log: (l) => lines.push(l) });
  });
  afterAll(async () => {
    await s.server.close(100);
  });

  it('accepts every field the issue lists through the openai SDK, and logs each ignored one once', async () => {
    const body: OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming = {
      model: MODEL_ID,
      messages: msgs,
      max_completion_tokens: 3,
      reasoning_effort: 'low',
      verbosity: 'low',
      prompt_cache_key: 'user-42',
      prompt_cache_retention: '24h',
      safety_identifier: 'hashed-user',
      modalities: ['text'],
      audio: { voice: 'alloy', format: 'wav' },
      prediction: { type: 'content', content: 'hello' },
      web_search_options: { search_context_size: 'low' },
      functions: [{ name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } }],
      function_call: 'auto',
      store: false,
      metadata: { app: 'test' },
      service_tier: 'auto',
      user: 'u1',
      parallel_tool_calls: true,
      stream_options: { include_usage: true, include_obfuscation: false }, // with stream false: no effect
    };
    for (let i = 0; i < 2; i++) {
      const r = await s.client.chat.completions.create(body);
      expect(r.choices[0]!.finish_reason).toBe('length');
      expect(r.usage?.completion_tokens).toBe(3);
    }
    const st = await s.client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true, include_obfuscation: true } });
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const c of st) usage = c.usage ?? usage;
    expect(usage?.completion_tokens).toBe(3);
    for (const f of ['verbosity', 'prompt_cache_key', 'prompt_cache_retention', 'safety_identifier', 'modalities', 'audio', 'prediction', 'web_search_options', 'store', 'metadata', 'service_tier', 'user', 'stream_options.include_obfuscation']) {
      expect(lines.filter((l) => l.includes(`"${f}"`)), f).toHaveLength(1);
    }
    // Applied fields are not logged.
    expect(lines.some((l) => /"(functions|function_call|reasoning_effort|max_completion_tokens)"/.test(l))).toBe(false);
  });

  it('type-checks known fields, ignored ones included, naming the field', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ verbosity: 5 }, 'verbosity'],
      [{ store: 'yes' }, 'store'],
      [{ metadata: ['a'] }, 'metadata'],
      [{ modalities: 'text' }, 'modalities'],
      [{ reasoning_effort: 3 }, 'reasoning_effort'],
      [{ stream: true, stream_options: { include_obfuscation: 'no' } }, 'stream_options.include_obfuscation'],
      [{ stream_options: 'yes' }, 'stream_options'],
      [{ functions: 'lookup' }, 'functions'],
      [{ functions: [{ name: 'a' }], function_call: 7 }, 'function_call'],
      [{ function_call: 'auto' }, 'function_call'],
      [{ functions: [{ name: 'a' }], tools: [{ type: 'function', function: { name: 'b' } }] }, 'functions'],
      [{ functions: [{ name: 'a b' }] }, 'functions[0].name'],
      [{ functions: [{ name: 'a', parameters: { type: 'string' } }] }, 'functions[0].parameters.type'],
      [{ functions: [{ name: 'a' }], function_call: { name: 'b' } }, 'function_call'],
      [{ max_completion_tokens: 0 }, 'max_completion_tokens'],
    ];
    for (const [extra, param] of cases) {
      const r = await post(s.url, '/v1/chat/completions', { model: MODEL_ID, messages: msgs, max_tokens: 2, ...extra });
      expect(r.status, JSON.stringify(extra)).toBe(400);
      expect(r.json().error.param, JSON.stringify(extra)).toBe(param);
    }
    // Every ignored field with a wrong type is a 400 too.
    for (const [f, type] of Object.entries(IGNORED_CHAT_FIELDS)) {
      const r = await post(s.url, '/v1/chat/completions', { model: MODEL_ID, messages: msgs, max_tokens: 2, [f]: type === 'string' ? 1 : 'x' });
      expect(r.status, f).toBe(400);
      expect(r.json().error.param).toBe(f);
    }
  });

  it('accepts a field OpenAI does not define, and logs it once', async () => {
    for (let i = 0; i < 2; i++) {
      const r = await post(s.url, '/v1/chat/completions', { model: MODEL_ID, messages: msgs, max_tokens: 2, frobnicate: { x: 1 }, ignore_eos: true });
      expect(r.status).toBe(200);
    }
    expect(lines.filter((l) => l.includes('"frobnicate"') && l.includes('not an OpenAI field'))).toHaveLength(1);
    const c = await post(s.url, '/v1/completions', { model: MODEL_ID, prompt: 'x', max_tokens: 2, user: 'u', stream_options: { include_usage: true }, guided_json: {} });
    expect(c.status).toBe(200);
    expect(c.json().usage.completion_tokens).toBe(2);
    expect(lines.filter((l) => l.includes('"guided_json"'))).toHaveLength(1);
  });

  it('maps reasoning_effort onto a thinking model\'s switch; chat_template_kwargs wins', async () => {
    const argsOf = async (extra: Record<string, unknown>) => {
      rec.seen.length = 0;
      const r = await post(s.url, '/v1/chat/completions', { model: MODEL_ID, messages: msgs, max_tokens: 1, ...extra });
      expect(r.status).toBe(200);
      return rec.seen[0]!.args;
    };
    expect(await argsOf({ reasoning_effort: 'none' })).toEqual({ enable_thinking: false });
    expect(await argsOf({ reasoning_effort: 'minimal' })).toEqual({ enable_thinking: false });
    expect(await argsOf({ reasoning_effort: 'high' })).toEqual({ enable_thinking: true });
    expect(await argsOf({ reasoning_effort: 'xhigh' })).toEqual({ enable_thinking: true }); // values OpenAI adds later
    expect(await argsOf({ reasoning_effort: 'none', chat_template_kwargs: { enable_thinking: true } })).toEqual({ enable_thinking: true });
    expect(await argsOf({})).toBeUndefined();
  });

  it('maps legacy functions onto tools, and function messages onto tool calls and results', async () => {
    rec.seen.length = 0;
    const r = await post(s.url, '/v1/chat/completions', {
      model: MODEL_ID,
      max_tokens: 2,
      functions: [{ name: 'lookup', description: 'find', parameters: { type: 'object', properties: { q: { type: 'string' } } } }],
      function_call: 'auto',
      messages: [
        { role: 'user', content: 'find x' },
        { role: 'assistant', content: null, function_call: { name: 'lookup', arguments: '{"q":"x"}' } },
        { role: 'function', name: 'lookup', content: 'found' },
      ],
    });
    expect(r.status, r.text).toBe(200);
    const { messages, args } = rec.seen[0]!;
    expect(args?.tools).toEqual([{ type: 'function', function: { name: 'lookup', description: 'find', parameters: { type: 'object', properties: { q: { type: 'string' } } } } }]);
    expect(messages[1]).toMatchObject({ role: 'assistant', tool_calls: [{ id: 'call_fn_1', type: 'function', function: { name: 'lookup', arguments: { q: 'x' } } }] });
    expect(messages[1]!.function_call).toBeUndefined();
    expect(messages[2]).toMatchObject({ role: 'tool', tool_call_id: 'call_fn_1', name: 'lookup', content: 'found' });
    const bad = await post(s.url, '/v1/chat/completions', { model: MODEL_ID, messages: [{ role: 'user', content: 'x' }, { role: 'function', name: 'nope', content: 'y' }] });
    expect(bad.status).toBe(400);
    expect(bad.json().error.param).toBe('messages[1].name');
  });
});

describe('--strict-requests', () => {
  let s: Started;
  beforeAll(async () => {
    s = await startFakeServer({ stepMs: 1 }, {}, { strictRequests: true });
  });
  afterAll(async () => {
    await s.server.close(100);
  });

  it('refuses fields OpenAI does not define, still accepts the ones it does', async () => {
    let r = await post(s.url, '/v1/chat/completions', { model: MODEL_ID, messages: msgs, frobnicate: true });
    expect(r.status).toBe(400);
    expect(r.json().error).toMatchObject({ param: 'frobnicate', code: 'unknown_field', message: 'Unrecognized request argument supplied: frobnicate' });
    r = await post(s.url, '/v1/chat/completions', { model: MODEL_ID, messages: msgs, stream: true, stream_options: { include_usage: true, frob: 1 } });
    expect(r.json().error.param).toBe('stream_options.frob');
    r = await post(s.url, '/v1/completions', { model: MODEL_ID, prompt: 'x', best_of: 1, echo: false, guided_json: {} });
    expect(r.json().error.param).toBe('guided_json');
    r = await post(s.url, '/v1/chat/completions', { model: MODEL_ID, messages: msgs, max_tokens: 2, verbosity: 'high', store: true, stream_options: { include_obfuscation: true } });
    expect(r.status).toBe(200);
  });
});

describe('served model names', () => {
  it('--served-model-name takes several names, repeated or comma-separated', () => {
    expect(modelNames(undefined)).toBeUndefined();
    expect(modelNames('a')).toEqual(['a']);
    expect(modelNames(['a,b', ' c ', 'a', ''])).toEqual(['a', 'b', 'c']);
    expect(modelNames([','])).toBeUndefined();
    const program = new Command('rapid');
    registerServe(program);
    const options = program.commands.find((c) => c.name() === 'serve')!.options;
    const names = options.find((o) => o.long === '--served-model-name')!;
    expect(names.parseArg!('b,c', ['a'])).toEqual(['a', 'b,c']); // repeated flags collect; commas split in modelNames
    expect(options.map((o) => o.long)).toEqual(expect.arrayContaining(['--accept-any-model-name', '--strict-requests']));
  });

  it('accepts every served name, lists them all, and answers with the first', async () => {
    const s = await startFakeServer({ stepMs: 1 }, {}, { model: { ...byteModel(256), id: 'main-name', names: ['main-name', 'gpt-4o-mini'] } });
    try {
      const list = await s.client.models.list();
      expect(list.data.map((m) => m.id)).toEqual(['main-name', 'gpt-4o-mini']);
      expect((await s.client.models.retrieve('gpt-4o-mini')).id).toBe('gpt-4o-mini');
      const r = await s.client.chat.completions.create({ model: 'gpt-4o-mini', messages: msgs, max_tokens: 2 });
      expect(r.model).toBe('main-name'); // vLLM: the first served name
      const e = await post(s.url, '/v1/chat/completions', { model: 'gpt-4o', messages: msgs });
      expect(e.status).toBe(404);
      expect(e.json().error.message).toMatch(/'main-name', 'gpt-4o-mini'.*--accept-any-model-name/);
    } finally {
      await s.server.close(100);
    }
  });

  it('--accept-any-model-name serves any name as the one model', async () => {
    const s = await startFakeServer({ stepMs: 1 }, {}, { model: { ...byteModel(256), acceptAnyName: true } });
    try {
      const r = await s.client.chat.completions.create({ model: 'gpt-4o', messages: msgs, max_tokens: 2 });
      expect(r.model).toBe(MODEL_ID);
      const c = await s.client.completions.create({ model: 'gpt-3.5-turbo-instruct', prompt: 'x', max_tokens: 2 });
      expect(c.model).toBe(MODEL_ID);
      expect((await raw(s.url, '/v1/models/anything')).status).toBe(200);
      expect((await s.client.models.list()).data.map((m) => m.id)).toEqual([MODEL_ID]);
    } finally {
      await s.server.close(100);
    }
  });
});
