// Forced tool calls (tool_choice required / a named function) are grammar-constrained inside the
// batch: over HTTP on a fixture checkpoint every call names a given tool and its arguments validate
// against that tool's parameters, streamed or not; tool results round-trip through the template.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { servedClient, fixtureServeOptions } from '../helpers/openai-chat.js';
import { schemaViolation } from './json-schema-check.mjs';

const TOOLS = [
  {
    type: 'function' as const,
    function: {
      name: 'get_weather',
      description: 'weather in a city',
      parameters: { type: 'object', properties: { city: { enum: ['Oslo', 'Lima'] }, days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['city', 'days'], additionalProperties: false },
    },
  },
  {
    type: 'function' as const,
    function: { name: 'ping', parameters: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false } },
  },
];
const PARAMS = Object.fromEntries(TOOLS.map((t) => [t.function.name, t.function.parameters]));

describe.skipIf(!nativeAvailable())('forced tool calls on qwen2-q4', () => {
  let srv: RunningServer;
  let client: OpenAI;
  const model = 'fixture-qwen2-q4';

  beforeAll(async () => {
    srv = await startServer(`${FIXTURE_ROOT}/qwen2-q4`, fixtureServeOptions(model));
    client = servedClient(srv.url);
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('named and required calls validate, concurrently, streamed and not', async () => {
    const choices = [{ type: 'function' as const, function: { name: 'get_weather' } }, 'required' as const, { type: 'function' as const, function: { name: 'ping' } }, 'required' as const];
    const runs = Array.from({ length: 8 }, async (_, i) => {
      const body = { model, messages: [{ role: 'user' as const, content: `call ${i}` }], tools: TOOLS, tool_choice: choices[i % 4]!, max_tokens: 96, temperature: i % 2 ? 1 : 0, seed: i };
      if (i < 4) {
        const r = await client.chat.completions.create(body);
        expect(r.choices[0]!.finish_reason, r.choices[0]!.message.content ?? '').toBe('tool_calls');
        expect(r.choices[0]!.message.content).toBeNull();
        return { choice: choices[i % 4]!, call: r.choices[0]!.message.tool_calls![0]! as { id: string; function: { name: string; arguments: string } } };
      }
      const s = await client.chat.completions.create({ ...body, stream: true });
      let call: { id: string; function: { name: string; arguments: string } } | undefined;
      let finish: string | null = null;
      for await (const c of s) {
        const tc = c.choices[0]?.delta.tool_calls?.[0];
        if (tc) call = { id: tc.id!, function: { name: tc.function!.name!, arguments: tc.function!.arguments! } };
        finish = c.choices[0]?.finish_reason ?? finish;
      }
      expect(finish).toBe('tool_calls');
      return { choice: choices[i % 4]!, call: call! };
    });
    for (const { choice, call } of await Promise.all(runs)) {
      expect(call.id).toMatch(/^call_/);
      if (typeof choice === 'object') expect(call.function.name).toBe(choice.function.name);
      const params = PARAMS[call.function.name];
      expect(params, call.function.name).toBeDefined();
      expect(schemaViolation(params!, JSON.parse(call.function.arguments)), call.function.arguments).toBeNull();
    }
  });

  it('a tool result round-trips through the chat template', async () => {
    const r = await client.chat.completions.create({
      model,
      messages: [
        { role: 'user', content: 'weather?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo","days":1}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 3}' },
      ],
      tools: TOOLS,
      tool_choice: 'none',
      max_tokens: 4,
      temperature: 0,
    });
    expect(r.choices[0]!.message.content).toBeTypeOf('string');
  });

  it('tool_choice auto (the default with tools) answers in the chat shape on the real model', async () => {
    // Random weights: whatever it writes is parsed with the Qwen format and comes back well formed.
    const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'weather in Oslo?' }], tools: TOOLS, max_tokens: 16, temperature: 0 });
    const c = r.choices[0]!;
    if (c.finish_reason === 'tool_calls') for (const t of c.message.tool_calls!) JSON.parse((t as { function: { arguments: string } }).function.arguments);
    else expect(typeof c.message.content).toBe('string');
    const solo = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'weather in Oslo?' }], tools: TOOLS, max_tokens: 16, temperature: 0, stream: true });
    let text = '';
    for await (const k of solo) text += k.choices[0]?.delta.content ?? '';
    if (c.finish_reason !== 'tool_calls') expect(text).toBe(c.message.content);
  });

  it('refuses what it cannot honour with a 400', async () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ tools: TOOLS, tool_choice: 'sometimes' }, /tool_choice must be/],
      [{ tools: TOOLS, tool_choice: { type: 'function', function: { name: 'nope' } } }, /not in tools/],
      [{ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', not: {} } } }], tool_choice: 'required' }, /"not" is not supported/],
      [{ tools: TOOLS, tool_choice: 'required', response_format: { type: 'json_object' } }, /cannot be combined/],
    ];
    for (const [extra, msg] of cases) {
      const err = await client.chat.completions
        .create({ model, messages: [{ role: 'user', content: 'x' }], ...extra } as never)
        .then(
          () => null,
          (e: unknown) => e as { status?: number; message: string },
        );
      expect(err?.status, JSON.stringify(extra)).toBe(400);
      expect(err!.message).toMatch(msg);
    }
  });
});
