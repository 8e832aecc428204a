// The structured-output and tool fixes of issue 37 over HTTP on a fixture checkpoint:
// response_format json_object + schema (llama.cpp / vLLM style) constrains to the schema and
// refuses an invalid one; tool arguments are always a JSON object (parameters {} included); a
// forced call cut by max_tokens is still a tool call, with finish_reason "length".
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { truncatedToolCall } from '../../src/server/tools.js';
import { nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { fixtureServeOptions, servedClient } from '../helpers/openai-chat.js';
import { post } from '../server/helpers.js';
import { schemaViolation } from './json-schema-check.mjs';

describe('truncatedToolCall', () => {
  const names = ['get_weather', 'get_time', 'ping'];
  it('names the call when it can and keeps the arguments as produced', () => {
    expect(truncatedToolCall('{"name": "get_weather", "arguments": {"city": "Os', names)?.function).toEqual({ name: 'get_weather', arguments: '{"city": "Os' });
    expect(truncatedToolCall('{"name":"ping","arguments":{"ok":true}', names)?.function).toEqual({ name: 'ping', arguments: '{"ok":true}' });
    expect(truncatedToolCall('{"name": "ping", "argu', names)?.function).toEqual({ name: 'ping', arguments: '' });
    expect(truncatedToolCall('{"name": "get_w', names)?.function.name).toBe('get_weather'); // one name left
    expect(truncatedToolCall('{"name": "get_', names)).toBeNull(); // two names left
    expect(truncatedToolCall('{"na', ['only'])?.function).toEqual({ name: 'only', arguments: '' });
    expect(truncatedToolCall('', ['only'])?.function.name).toBe('only');
    expect(truncatedToolCall('', names)).toBeNull();
    expect(truncatedToolCall('{"name": "p\\', ['p"q', 'pz'])).toBeNull();
    expect(truncatedToolCall('{"name": "a\\"b", "arguments": {', ['a"b'])?.function).toEqual({ name: 'a"b', arguments: '{' });
  });
});

describe.skipIf(!nativeAvailable())('object schemas on qwen2-q4', () => {
  let srv: RunningServer;
  let client: OpenAI;
  const model = 'fixture-qwen2-q4';
  const schema = { type: 'object', properties: { city: { enum: ['Oslo', 'Lima'] }, n: { type: 'integer', minimum: 1, maximum: 9 } }, required: ['city', 'n'], additionalProperties: false };

  beforeAll(async () => {
    srv = await startServer(`${FIXTURE_ROOT}/qwen2-q4`, fixtureServeOptions(model));
    client = servedClient(srv.url);
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('json_object with a schema constrains to the schema, streamed and not', async () => {
    const body = { model, messages: [{ role: 'user', content: 'a city' }], max_tokens: 48, temperature: 1, seed: 3, response_format: { type: 'json_object', schema } };
    for (const seed of [1, 2, 3]) {
      const r = await post(srv.url, '/v1/chat/completions', { ...body, seed });
      expect(r.status, r.text).toBe(200);
      const text = r.json().choices[0].message.content as string;
      expect(schemaViolation(schema, JSON.parse(text)), text).toBeNull();
    }
    const res = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }) });
    let text = '';
    for (const line of (await res.text()).split('\n')) {
      if (!line.startsWith('data: {')) continue;
      text += JSON.parse(line.slice(6)).choices[0]?.delta?.content ?? '';
    }
    expect(schemaViolation(schema, JSON.parse(text)), text).toBeNull();
    // The legacy completions route takes it too.
    const c = await post(srv.url, '/v1/completions', { model, prompt: 'JSON:', max_tokens: 48, response_format: { type: 'json_object', schema } });
    expect(schemaViolation(schema, JSON.parse(c.json().choices[0].text)), c.text).toBeNull();
  });

  it('an invalid schema beside json_object is a 400 naming response_format', async () => {
    for (const bad of [{ type: 'frob' }, { type: 'object', patternProperties: {} }, 'not a schema', { $ref: '#/nowhere' }]) {
      const r = await post(srv.url, '/v1/chat/completions', { model, messages: [{ role: 'user', content: 'x' }], response_format: { type: 'json_object', schema: bad } });
      expect(r.status, JSON.stringify(bad)).toBe(400);
      expect(r.json().error.param).toBe('response_format');
      expect(r.json().error.message).toMatch(/response_format\.schema/);
    }
  });

  it('a tool whose parameters are {} (or have no type) gets an object as arguments', async () => {
    const tools = [
      { type: 'function' as const, function: { name: 'roll', parameters: {} } },
      { type: 'function' as const, function: { name: 'note', parameters: { properties: { text: { type: 'string', maxLength: 8 } } } } },
    ];
    for (let i = 0; i < 6; i++) {
      const r = await client.chat.completions.create({
        model,
        messages: [{ role: 'user', content: `roll ${i}` }],
        tools,
        tool_choice: i % 3 === 2 ? 'required' : { type: 'function', function: { name: tools[i % 2]!.function.name } },
        max_tokens: 64,
        temperature: 1,
        seed: i,
      });
      const call = r.choices[0]!.message.tool_calls![0]! as { function: { arguments: string } };
      const args = JSON.parse(call.function.arguments) as unknown;
      expect(typeof args === 'object' && args !== null && !Array.isArray(args), call.function.arguments).toBe(true);
    }
    const r = await post(srv.url, '/v1/chat/completions', { model, messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function', function: { name: 'n', parameters: { type: 'integer' } } }] });
    expect(r.status).toBe(400);
    expect(r.json().error.param).toBe('tools[0].function.parameters.type');
  });

  it('a call through deprecated functions comes back as function_call, streamed and not', async () => {
    const body = {
      model,
      messages: [{ role: 'user', content: 'ping' }],
      functions: [{ name: 'ping', parameters: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } }],
      function_call: { name: 'ping' },
      max_tokens: 48,
      temperature: 0,
    };
    const r = (await post(srv.url, '/v1/chat/completions', body)).json();
    const choice = r.choices[0];
    expect(choice.finish_reason).toBe('function_call');
    expect(choice.message.tool_calls).toBeUndefined();
    expect(choice.message.function_call.name).toBe('ping');
    expect(typeof JSON.parse(choice.message.function_call.arguments).ok).toBe('boolean');
    const res = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }) });
    let name = '';
    let args = '';
    let finish = null;
    for (const line of (await res.text()).split('\n')) {
      if (!line.startsWith('data: {')) continue;
      const c = JSON.parse(line.slice(6)).choices[0];
      expect(c.delta.tool_calls).toBeUndefined();
      name += c.delta.function_call?.name ?? '';
      args += c.delta.function_call?.arguments ?? '';
      finish = c.finish_reason ?? finish;
    }
    expect({ name, args, finish }).toEqual({ name: 'ping', args: choice.message.function_call.arguments, finish: 'function_call' });
  });

  it('a forced call cut by max_tokens is a tool call with finish_reason length, streamed and not', async () => {
    const tools = [{ type: 'function' as const, function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', minLength: 80 } }, required: ['city'] } } }];
    const body = { model, messages: [{ role: 'user' as const, content: 'weather' }], tools, tool_choice: 'required' as const, max_tokens: 60, temperature: 0, rapid_budget_close: false };
    const r = await client.chat.completions.create(body as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming);
    const choice = r.choices[0]!;
    expect(choice.finish_reason).toBe('length');
    expect(choice.message.content).toBeNull();
    const call = choice.message.tool_calls![0]! as { id: string; function: { name: string; arguments: string } };
    expect(call.function.name).toBe('get_weather');
    expect(call.function.arguments.startsWith('{')).toBe(true);
    expect(() => JSON.parse(call.function.arguments)).toThrow(); // cut short: the text as produced
    const s = await client.chat.completions.create({ ...body, stream: true } as OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming);
    let name = '';
    let args = '';
    let content = '';
    let finish: string | null = null;
    for await (const c of s) {
      const d = c.choices[0]?.delta;
      name += d?.tool_calls?.[0]?.function?.name ?? '';
      args += d?.tool_calls?.[0]?.function?.arguments ?? '';
      content += d?.content ?? '';
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    expect({ name, args, content, finish }).toEqual({ name: 'get_weather', args: call.function.arguments, content: '', finish: 'length' });
  });
});
