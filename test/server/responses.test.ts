// POST /v1/responses with the unmodified openai Node SDK over real HTTP, on a scripted tool-capable
// (hermes) model through the real Engine: plain and streamed text, the event sequence, function
// calls and their outputs, previous_response_id and the store, reasoning items, max_output_tokens,
// engine failures mid-stream, and 4xx errors that name the Responses field at fault.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GrammarProvider } from '../../src/engine/grammar/grammar-service.js';
import type { GrammarNext, RequestGrammar } from '../../src/engine/grammar/request-grammar.js';
import { post, raw } from './helpers.js';
import { fakeVision } from './vision-helpers.js';
import { sseEvents, startScriptedServer, type ScriptedServer } from './responses-helpers.js';

const SCRIPTS: Record<string, string> = {
  hello: 'Hello there!',
  weather: 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
  two: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lima"}}\n</tool_call>',
  '18C': 'It is 18C in Oslo.',
  think: '<think>\nThe user greets me.\n</think>\n\nHi!',
  long: 'This answer goes on and on and on.',
  empty: '',
  forever: 'and on '.repeat(400),
};

const TOOLS: OpenAI.Responses.FunctionTool[] = [
  { type: 'function', name: 'get_weather', description: 'weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, strict: false },
];

let s: ScriptedServer;
let client: OpenAI;
beforeAll(async () => {
  s = await startScriptedServer(SCRIPTS);
  client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 20_000 });
});
afterAll(async () => {
  await s.server.close(100);
});

describe('POST /v1/responses with the openai SDK', () => {
  it('plain text: a completed response with one message item, usage and echoed fields', async () => {
    // 12 characters, then the stop token (counted as output, as the chat route does).
    const r = await client.responses.create({ model: 'fake-model', input: 'hello', temperature: 0, metadata: { k: 'v' } });
    expect(r.id).toMatch(/^resp_/);
    expect(r.object).toBe('response');
    expect(r.status).toBe('completed');
    expect(r.output_text).toBe('Hello there!');
    expect(r.output).toHaveLength(1);
    const m = r.output[0] as OpenAI.Responses.ResponseOutputMessage;
    expect(m).toMatchObject({ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Hello there!', annotations: [] }] });
    expect(m.id).toMatch(/^msg_/);
    expect(r.usage).toMatchObject({ output_tokens: 13, output_tokens_details: { reasoning_tokens: 0 }, input_tokens_details: { cached_tokens: 0 } });
    expect(r.usage!.total_tokens).toBe(r.usage!.input_tokens + 13);
    expect(r).toMatchObject({ model: 'fake-model', temperature: 0, metadata: { k: 'v' }, store: true, previous_response_id: null, parallel_tool_calls: true, tool_choice: 'auto', tools: [] });
  });

  it('message items: roles, content parts, instructions as a system message', async () => {
    const r = await client.responses.create({
      model: 'fake-model',
      instructions: 'Be brief.',
      input: [
        { role: 'developer', content: 'Rules.' },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'first' }] },
        { type: 'message', id: 'msg_1', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: 'ok', annotations: [] }] },
        { role: 'user', content: [{ type: 'input_text', text: 'ec' }, { type: 'input_text', text: 'ho' }] },
      ],
    });
    expect(r.output_text).toBe('system: Be brief.\nsystem: Rules.\nuser: first\nassistant: ok\nuser: echo\n');
  });

  it('streamed: the SDK assembles the events; every event has a sequence number, in order', async () => {
    const stream = client.responses.stream({ model: 'fake-model', input: 'hello' });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    let text = '';
    stream.on('event', (e) => events.push(e));
    stream.on('response.output_text.delta', (e) => (text += e.delta));
    const final = await stream.finalResponse();
    expect(final.output_text).toBe('Hello there!');
    expect(text).toBe('Hello there!');
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const types = events.map((e) => e.type).filter((t, i, a) => t !== a[i - 1]);
    expect(types).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const done = events.at(-1) as OpenAI.Responses.ResponseCompletedEvent;
    expect(done.response.id).toBe(final.id);
    expect(done.response.usage!.output_tokens).toBe(13);
    const delta = events.find((e) => e.type === 'response.output_text.delta') as OpenAI.Responses.ResponseTextDeltaEvent;
    expect(delta).toMatchObject({ item_id: final.output[0]!.id, output_index: 0, content_index: 0, logprobs: [] });
  });

  it('raw stream: event lines name each event, no [DONE]', async () => {
    const r = await post(s.url, '/v1/responses', { input: 'hello', stream: true });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toContain('text/event-stream');
    const evs = sseEvents(r.text);
    for (const e of evs) expect(e.event).toBe(e.data.type);
    expect(r.text).not.toContain('[DONE]');
  });

  it('function tools: text then a call item; the output round-trips as function_call_output', async () => {
    const r = await client.responses.create({ model: 'fake-model', input: 'weather', tools: TOOLS });
    expect(r.status).toBe('completed');
    expect(r.output.map((o) => o.type)).toEqual(['message', 'function_call']);
    expect(r.output_text).toBe('Let me check.');
    const call = r.output[1] as OpenAI.Responses.ResponseFunctionToolCall;
    expect(call).toMatchObject({ type: 'function_call', name: 'get_weather', status: 'completed' });
    expect(call.id).toMatch(/^fc_/);
    expect(call.call_id).toMatch(/^call_/);
    expect(JSON.parse(call.arguments)).toEqual({ city: 'Oslo' });
    expect(r.tools).toEqual(TOOLS);

    // The client runs the tool and sends the whole conversation back (stateless, store: false).
    const next = await client.responses.create({
      model: 'fake-model',
      tools: TOOLS,
      store: false,
      input: [{ role: 'user', content: 'weather' }, ...(r.output as OpenAI.Responses.ResponseInputItem[]), { type: 'function_call_output', call_id: call.call_id, output: '18C' }],
    });
    expect(next.output_text).toBe('It is 18C in Oslo.');
    expect((next as unknown as { store: boolean }).store).toBe(false);
    expect((await raw(s.url, `/v1/responses/${next.id}`)).status).toBe(404);
  });

  it('function tools streamed: argument deltas, then .done events; parallel calls are separate items', async () => {
    const stream = client.responses.stream({ model: 'fake-model', input: 'two', tools: TOOLS });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    stream.on('event', (e) => events.push(e));
    const final = await stream.finalResponse();
    expect(final.output.map((o) => o.type)).toEqual(['function_call', 'function_call']);
    const calls = final.output as OpenAI.Responses.ResponseFunctionToolCall[];
    expect(calls.map((c) => JSON.parse(c.arguments))).toEqual([{ city: 'Oslo' }, { city: 'Lima' }]);
    expect(new Set(calls.map((c) => c.call_id)).size).toBe(2);
    const deltas = events.filter((e) => e.type === 'response.function_call_arguments.delta') as OpenAI.Responses.ResponseFunctionCallArgumentsDeltaEvent[];
    expect(deltas.length).toBeGreaterThan(2);
    expect(deltas.filter((d) => d.output_index === 0).map((d) => d.delta).join('')).toBe(calls[0]!.arguments);
    const dones = events.filter((e) => e.type === 'response.function_call_arguments.done') as OpenAI.Responses.ResponseFunctionCallArgumentsDoneEvent[];
    expect(dones.map((d) => [d.name, d.arguments])).toEqual(calls.map((c) => [c.name, c.arguments]));
    expect(events.filter((e) => e.type === 'response.output_text.delta')).toEqual([]);
  });

  it('tool_choice none and parallel_tool_calls false', async () => {
    const none = await client.responses.create({ model: 'fake-model', input: 'two', tools: TOOLS, tool_choice: 'none' });
    expect(none.output.map((o) => o.type)).toEqual(['message']);
    const one = await client.responses.create({ model: 'fake-model', input: 'two', tools: TOOLS, parallel_tool_calls: false });
    expect(one.output.map((o) => o.type)).toEqual(['function_call']);
    expect(one.parallel_tool_calls).toBe(false);
  });

  it('previous_response_id: earlier input and output come first; instructions are not carried over', async () => {
    const first = await client.responses.create({ model: 'fake-model', instructions: 'Old rules.', input: 'hello' });
    const second = await client.responses.create({ model: 'fake-model', previous_response_id: first.id, instructions: 'New rules.', input: 'echo' });
    expect(second.previous_response_id).toBe(first.id);
    expect(second.output_text).toBe('system: New rules.\nuser: hello\nassistant: Hello there!\nuser: echo\n');
    // A chain of three, through a function call and its output.
    const call = await client.responses.create({ model: 'fake-model', input: 'weather', tools: TOOLS });
    const fc = call.output.find((o) => o.type === 'function_call') as OpenAI.Responses.ResponseFunctionToolCall;
    const answer = await client.responses.create({ model: 'fake-model', previous_response_id: call.id, tools: TOOLS, input: [{ type: 'function_call_output', call_id: fc.call_id, output: '18C' }] });
    expect(answer.output_text).toBe('It is 18C in Oslo.');
    const third = await client.responses.create({ model: 'fake-model', previous_response_id: answer.id, input: 'echo' });
    expect(third.output_text).toBe('user: weather\nassistant: Let me check.\ntool: 18C\nassistant: It is 18C in Oslo.\nuser: echo\n');
  });

  it('stored responses: retrieve, input items, delete; unknown ids are 404s naming the field', async () => {
    const r = await client.responses.create({ model: 'fake-model', input: 'hello' });
    const got = await client.responses.retrieve(r.id);
    expect(got.output_text).toBe('Hello there!');
    expect(got.id).toBe(r.id);
    const items = await client.responses.inputItems.list(r.id);
    expect(items.data).toMatchObject([{ type: 'message', role: 'user', content: 'hello' }]);
    await client.responses.delete(r.id);
    await expect(client.responses.retrieve(r.id)).rejects.toMatchObject({ status: 404 });
    const e = await post(s.url, '/v1/responses', { input: 'hi', previous_response_id: r.id });
    expect(e.status).toBe(404);
    expect(e.json().error.param).toBe('previous_response_id');
    expect(e.json().error.message).toContain(`Previous response with id '${r.id}' not found`);
    const ref = await post(s.url, '/v1/responses', { input: [{ type: 'item_reference', id: 'msg_nope' }] });
    expect(ref.status).toBe(404);
    expect(ref.json().error.param).toBe('input[0].id');
  });

  it('item_reference: an output item of a stored response is resolved by id', async () => {
    const r = await client.responses.create({ model: 'fake-model', input: 'hello' });
    const next = await client.responses.create({
      model: 'fake-model',
      input: [{ role: 'user', content: 'hello' }, { type: 'item_reference', id: r.output[0]!.id! }, { role: 'user', content: 'echo' }],
    });
    expect(next.output_text).toBe('user: hello\nassistant: Hello there!\nuser: echo\n');
  });

  it('max_output_tokens: status incomplete with the reason; streamed ends with response.incomplete', async () => {
    const r = await client.responses.create({ model: 'fake-model', input: 'long', max_output_tokens: 8 });
    expect(r.status).toBe('incomplete');
    expect(r.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    expect(r.output_text).toBe('This ans');
    expect(r.max_output_tokens).toBe(8);
    expect((r.output[0] as OpenAI.Responses.ResponseOutputMessage).status).toBe('incomplete');
    const st = await post(s.url, '/v1/responses', { input: 'long', max_output_tokens: 8, stream: true });
    expect(sseEvents(st.text).at(-1)!.data).toMatchObject({ type: 'response.incomplete', response: { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } } });
  });

  it('an empty reply is still one empty message', async () => {
    const r = await client.responses.create({ model: 'fake-model', input: 'empty' });
    expect(r.output).toMatchObject([{ type: 'message', content: [{ type: 'output_text', text: '' }] }]);
  });

  it('fields clients send but rapid does not apply are accepted and logged once', async () => {
    const body = { input: 'hello', include: ['reasoning.encrypted_content'], truncation: 'auto', service_tier: 'auto', user: 'u1', prompt_cache_key: 'k', some_future_field: 1 };
    expect((await post(s.url, '/v1/responses', body)).status).toBe(200);
    expect((await post(s.url, '/v1/responses', body)).status).toBe(200);
    for (const f of ['include', 'truncation', 'service_tier', 'prompt_cache_key', 'some_future_field']) {
      expect(s.logs.filter((l) => l.includes(`"${f}"`))).toHaveLength(1);
    }
    expect(s.logs.some((l) => l.includes('"user"'))).toBe(false);
  });

  it('bad input: a 4xx whose param names the Responses field', async () => {
    const cases: [unknown, string][] = [
      [{ input: 42 }, 'input'],
      [{ input: [] }, 'input'],
      [{ input: [{ role: 'robot', content: 'x' }] }, 'input[0].role'],
      [{ input: [{ role: 'user', content: [{ type: 'input_text', text: 1 }] }] }, 'input[0].content[0].text'],
      [{ input: [{ role: 'user', content: [{ type: 'input_image', file_id: 'file_1' }] }] }, 'input[0].content[0].file_id'],
      [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'data:image/png;base64,AAAA' }] }] }, 'input[0].content[0]'],
      [{ input: [{ type: 'computer_call_output', call_id: 'c' }] }, 'input[0].type'],
      [{ input: 'hi', tools: [{ type: 'web_search' }] }, 'tools[0].type'],
      [{ input: 'hi', tools: [{ type: 'function', name: 'bad name!' }] }, 'tools[0].name'],
      [{ input: 'hi', tools: TOOLS, tool_choice: { type: 'function', name: 'nope' } }, 'tool_choice'],
      [{ input: 'hi', text: { format: { type: 'xml' } } }, 'text.format.type'],
      [{ input: 'hi', max_output_tokens: 0 }, 'max_output_tokens'],
      [{ input: 'hi', temperature: 'hot' }, 'temperature'],
      [{ input: 'hi', stream: 'yes' }, 'stream'],
      [{ input: 'hi', instructions: ['x'] }, 'instructions'],
      [{ input: 'hi', conversation: 'conv_1' }, 'conversation'],
      [{ input: [{ type: 'function_call_output', call_id: 'call_x', output: '1' }] }, 'input[0]'],
      [{ input: [{ type: 'function_call', call_id: 'c1', name: 'f', arguments: 'not json' }] }, 'input[0].arguments'],
      [{ input: [{ type: 'function_call', name: 'f', arguments: '{}' }] }, 'input[0].call_id'],
      [{ input: [{ type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' }, { type: 'function_call_output', call_id: 'c2', output: 'x' }] }, 'input[1].call_id'],
    ];
    for (const [body, param] of cases) {
      const r = await post(s.url, '/v1/responses', body);
      expect([400, 404], JSON.stringify(body)).toContain(r.status);
      expect(r.json().error.param, `${JSON.stringify(body)}: ${r.text}`).toBe(param);
      expect(r.json().error.message).not.toMatch(/messages\[|response_format|max_completion_tokens/);
    }
    const m = await post(s.url, '/v1/responses', { input: 'hi', model: 'gpt-4o' });
    expect(m.status).toBe(404);
    // The server still answers normally afterwards.
    expect((await client.responses.create({ model: 'fake-model', input: 'hello' })).output_text).toBe('Hello there!');
  });

  it('concurrent requests, streamed and not, each get their own output', async () => {
    const asks = ['hello', 'weather', 'long', 'hello', 'two', 'long'].map(async (input, i) => {
      if (i % 2 === 0) return (await client.responses.create({ model: 'fake-model', input, tools: TOOLS })).output;
      return (await client.responses.stream({ model: 'fake-model', input, tools: TOOLS }).finalResponse()).output;
    });
    const outs = await Promise.all(asks);
    expect(outs.map((o) => o.map((i) => i.type).join(','))).toEqual(['message', 'message,function_call', 'message', 'message', 'function_call,function_call', 'message']);
    expect((outs[2]![0] as OpenAI.Responses.ResponseOutputMessage).content[0]).toMatchObject({ text: SCRIPTS.long });
  });

  it('a client that goes away mid-stream frees its request; others are unaffected', async () => {
    const before = s.server.metrics.disconnects;
    const ac = new AbortController();
    const res = await fetch(`${s.url}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: 'forever', stream: true }), signal: ac.signal });
    const reader = res.body!.getReader();
    let seen = '';
    while (!seen.includes('response.output_text.delta')) seen += new TextDecoder().decode((await reader.read()).value);
    ac.abort();
    const deadline = Date.now() + 5000;
    while (s.server.metrics.disconnects === before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(s.server.metrics.disconnects).toBe(before + 1);
    const status = (await raw(s.url, '/v1/status')).json();
    expect(status.running).toBe(0);
    expect((await client.responses.create({ model: 'fake-model', input: 'hello' })).output_text).toBe('Hello there!');
  });

  it('method and path errors on /v1/responses/{id}', async () => {
    expect((await raw(s.url, '/v1/responses', { method: 'GET' })).status).toBe(405);
    expect((await raw(s.url, '/v1/responses/resp_x/input_items', { method: 'DELETE' })).status).toBe(405);
    expect((await raw(s.url, '/v1/responses/resp_x/other')).status).toBe(404);
    const d = await raw(s.url, '/v1/responses/resp_x', { method: 'DELETE' });
    expect(d.status).toBe(404);
    expect(d.json().error.message).toContain('resp_x');
  });
});

describe('images on a vision model (image loading only: the scripted model has no tower)', () => {
  it('a bad input_image is a 400 naming the Responses field', async () => {
    const v = await startScriptedServer(SCRIPTS, { vision: fakeVision() });
    try {
      const img = (part: Record<string, unknown>) => ({ input: [{ role: 'user', content: [{ type: 'input_text', text: 'see' }, { type: 'input_image', ...part }] }] });
      const cases: [unknown, string][] = [
        [img({ image_url: 'data:image/png;base64,AAAA' }), 'input[0].content[1].image_url'],
        [img({ image_url: 'https://example.com/a.png' }), 'input[0].content[1].image_url'],
        [img({ image_url: 'data:image/png;base64,AAAA', detail: 'huge' }), 'input[0].content[1].detail'],
        [img({}), 'input[0].content[1].image_url'],
      ];
      for (const [body, param] of cases) {
        const r = await post(v.url, '/v1/responses', body);
        expect(r.status, r.text).toBe(400);
        expect(r.json().error.param, r.text).toBe(param);
        expect(r.json().error.message).not.toContain('messages[');
      }
    } finally {
      await v.server.close(100);
    }
  });
});

describe('reasoning on a thinking model', () => {
  let t: ScriptedServer;
  let c: OpenAI;
  beforeAll(async () => {
    t = await startScriptedServer(SCRIPTS, { reasoning: true });
    c = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 20_000 });
  });
  afterAll(async () => {
    await t.server.close(100);
  });

  it('a reasoning item before the message; streamed as reasoning_text events', async () => {
    const r = await c.responses.create({ model: 'fake-model', input: 'think' });
    expect(r.output.map((o) => o.type)).toEqual(['reasoning', 'message']);
    const rs = r.output[0] as OpenAI.Responses.ResponseReasoningItem;
    expect(rs.id).toMatch(/^rs_/);
    expect(rs.summary).toEqual([]);
    expect(rs.content![0]!.text).toContain('The user greets me.');
    expect(r.output_text).toBe('Hi!');
    expect(r.usage!.output_tokens_details.reasoning_tokens).toBeGreaterThan(10);
    expect(r.usage!.output_tokens_details.reasoning_tokens).toBeLessThan(r.usage!.output_tokens);

    const stream = c.responses.stream({ model: 'fake-model', input: 'think' });
    let reasoning = '';
    stream.on('response.reasoning_text.delta', (e) => (reasoning += e.delta));
    const final = await stream.finalResponse();
    expect(reasoning).toBe(rs.content![0]!.text);
    expect((final.output[0] as OpenAI.Responses.ResponseReasoningItem).content).toEqual(rs.content);
    expect(final.output_text).toBe('Hi!');
    // Reasoning items sent back are accepted and not replayed.
    const next = await c.responses.create({ model: 'fake-model', input: [{ role: 'user', content: 'think' }, ...(final.output as OpenAI.Responses.ResponseInputItem[]), { role: 'user', content: 'echo' }] });
    expect(next.output_text).toContain('assistant: Hi!\nuser: echo');
  });

  it('reasoning.effort "none" turns thinking off', async () => {
    const r = await c.responses.create({ model: 'fake-model', input: 'think', reasoning: { effort: 'none' } });
    expect(r.output.map((o) => o.type)).toEqual(['message']);
    expect(r.reasoning).toMatchObject({ effort: 'none' });
  });
});

/** Allows every token for a few steps, then reports a dead end: the engine fails the request. */
class DeadGrammar implements RequestGrammar {
  private n = 0;
  async next(): Promise<GrammarNext> {
    if (this.n >= 3) return { kind: 'dead' };
    return { kind: 'mask', bitmask: new Int32Array(8).fill(-1) };
  }
  accept(): boolean {
    this.n++;
    return true;
  }
  dispose(): void {}
}

describe('engine failures', () => {
  let f: ScriptedServer;
  beforeAll(async () => {
    const grammar: GrammarProvider = { matcher: async () => new DeadGrammar() };
    f = await startScriptedServer({ json: '{"a": 1, "b": 2}' }, { grammar });
  });
  afterAll(async () => {
    await f.server.close(100);
  });

  it('before the stream: a 500 with the code; streamed: error then response.failed, and the stream ends', async () => {
    const body = { input: 'json', text: { format: { type: 'json_object' } } };
    const r = await post(f.url, '/v1/responses', body);
    expect(r.status).toBe(500);
    expect(r.json().error.code).toBe('grammar_failed');
    const st = await post(f.url, '/v1/responses', { ...body, stream: true });
    const evs = sseEvents(st.text);
    expect(evs.at(-2)!.data).toMatchObject({ type: 'error', code: 'grammar_failed' });
    expect(evs.at(-1)!.data).toMatchObject({ type: 'response.failed', response: { status: 'failed', error: { code: 'server_error' } } });
    expect(evs.map((e) => e.data.sequence_number)).toEqual(evs.map((_, i) => i));
  });
});
