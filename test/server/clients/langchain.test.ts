// LangChain JS (@langchain/openai ChatOpenAI, unmodified) against rapid serve over real HTTP on a
// tool-capable fixture: invoke, stream, withStructuredOutput (its default json_schema and function
// calling) and bindTools, with the request fields LangChain sends by default.
import { ChatOpenAI } from '@langchain/openai';
import { tool } from '@langchain/core/tools';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../../src/cli/commands/serve.js';
import { nativeAvailable } from '../../helpers/addon.js';
import { FIXTURE_ROOT } from '../../helpers/fixtures.js';
import { fixtureServeOptions } from '../../helpers/openai-chat.js';
import { schemaViolation } from '../../grammar/json-schema-check.mjs';

const SCHEMA = {
  type: 'object' as const,
  properties: { city: { type: 'string' as const, enum: ['Oslo', 'Lima'] }, days: { type: 'integer' as const, minimum: 1, maximum: 7 } },
  required: ['city', 'days'],
  additionalProperties: false,
};

describe.skipIf(!nativeAvailable())('LangChain ChatOpenAI against rapid serve (qwen2-q4)', () => {
  let srv: RunningServer;
  const lines: string[] = [];
  const model = 'fixture-qwen2-q4';
  const chat = (extra: Record<string, unknown> = {}) =>
    new ChatOpenAI({ model, apiKey: 'x', configuration: { baseURL: `${srv.url}/v1` }, maxRetries: 0, timeout: 60_000, maxTokens: 24, temperature: 0, ...extra });

  beforeAll(async () => {
    // A second name that LangChain treats as a reasoning model (it sends reasoning_effort only for those).
    srv = await startServer(`${FIXTURE_ROOT}/qwen2-q4`, fixtureServeOptions(model, { servedModelName: [model, 'o4-mini'] }), (l) => lines.push(l));
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('invokes and streams the same text, with usage', async () => {
    const r = await chat().invoke('Say hello');
    expect(typeof r.content).toBe('string');
    expect((r.content as string).length).toBeGreaterThan(0);
    expect(r.usage_metadata?.output_tokens).toBeGreaterThan(0);
    let streamed = '';
    let usage = 0;
    for await (const c of await chat({ streamUsage: true }).stream('Say hello')) {
      streamed += c.content as string;
      usage = c.usage_metadata?.output_tokens ?? usage;
    }
    expect(streamed).toBe(r.content);
    expect(usage).toBe(r.usage_metadata?.output_tokens);
  });

  it('sends LangChain\'s reasoning and cache options, accepted, under a second served name', async () => {
    const r = await chat({ model: 'o4-mini', reasoning: { effort: 'low' }, promptCacheKey: 'k1', verbosity: 'low', service_tier: 'auto' }).invoke('Hi');
    expect(typeof r.content).toBe('string');
    expect(r.response_metadata.model_name).toBe(model); // the first served name, as vLLM answers
    expect(lines.some((l) => l.includes('"prompt_cache_key"'))).toBe(true);
    expect(lines.some((l) => l.includes('"reasoning_effort"') && l.includes('no thinking switch'))).toBe(true); // qwen2 does not think
  });

  it('withStructuredOutput: json_schema (its default) and function calling validate', async () => {
    for (const method of ['jsonSchema', 'functionCalling'] as const) {
      const out = await chat({ maxTokens: 64 }).withStructuredOutput(SCHEMA, { name: 'weather', method }).invoke('Weather in Oslo for 3 days?');
      expect(schemaViolation(SCHEMA, out), `${method}: ${JSON.stringify(out)}`).toBeNull();
    }
  });

  it('bindTools: a forced call parses into tool_calls, streamed and not', async () => {
    const weather = tool(async () => 'sunny', { name: 'get_weather', description: 'weather in a city', schema: SCHEMA });
    const bound = chat({ maxTokens: 64 }).bindTools([weather], { tool_choice: 'get_weather' });
    const r = await bound.invoke('Weather in Lima?');
    expect(r.tool_calls).toHaveLength(1);
    expect(r.tool_calls![0]!.name).toBe('get_weather');
    expect(schemaViolation(SCHEMA, r.tool_calls![0]!.args)).toBeNull();
    let acc: Awaited<ReturnType<typeof bound.invoke>> | undefined;
    for await (const c of await bound.stream('Weather in Lima?')) acc = acc === undefined ? c : acc.concat(c);
    expect(acc?.tool_calls?.[0]?.name).toBe('get_weather');
    expect(schemaViolation(SCHEMA, acc?.tool_calls?.[0]?.args)).toBeNull();
    // The call's result goes back as a tool message and the model answers (tool_choice none).
    const follow = await chat().bindTools([weather], { tool_choice: 'none' }).invoke([
      { role: 'user', content: 'Weather in Lima?' },
      r,
      { role: 'tool', content: 'sunny', tool_call_id: r.tool_calls![0]!.id! },
    ]);
    expect(typeof follow.content).toBe('string');
  });
});
