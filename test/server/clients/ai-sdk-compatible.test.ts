// The Vercel AI SDK (`ai` with @ai-sdk/openai-compatible, unmodified) against rapid serve over real
// HTTP on a tool-capable fixture: generateText, streamText, generateObject, tools, the legacy
// completions model, and providerOptions that send reasoning_effort.
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateObject, generateText, jsonSchema, streamText, tool } from 'ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../../src/cli/commands/serve.js';
import { nativeAvailable } from '../../helpers/addon.js';
import { FIXTURE_ROOT } from '../../helpers/fixtures.js';
import { fixtureServeOptions } from '../../helpers/openai-chat.js';
import { schemaViolation } from '../../grammar/json-schema-check.mjs';

const SCHEMA = {
  type: 'object',
  properties: { city: { type: 'string', enum: ['Oslo', 'Lima'] }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'],
  additionalProperties: false,
} as const;

describe.skipIf(!nativeAvailable())('AI SDK openai-compatible against rapid serve (qwen2-q4)', () => {
  let srv: RunningServer;
  const model = 'fixture-qwen2-q4';
  const provider = (extra: { supportsStructuredOutputs?: boolean } = {}) => createOpenAICompatible({ name: 'rapid', baseURL: `${srv.url}/v1`, apiKey: 'x', includeUsage: true, ...extra });
  const common = { maxRetries: 0, temperature: 0, maxOutputTokens: 24 };

  beforeAll(async () => {
    srv = await startServer(`${FIXTURE_ROOT}/qwen2-q4`, fixtureServeOptions(model));
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('generateText and streamText give the same text, with usage', async () => {
    const r = await generateText({ ...common, model: provider()(model), prompt: 'Say hello' });
    expect(r.text.length).toBeGreaterThan(0);
    expect(r.usage.outputTokens).toBeGreaterThan(0);
    const s = streamText({ ...common, model: provider()(model), prompt: 'Say hello' });
    let text = '';
    for await (const t of s.textStream) text += t;
    expect(text).toBe(r.text);
    expect((await s.usage).outputTokens).toBe(r.usage.outputTokens);
    expect(await s.finishReason).toBe(r.finishReason);
  });

  it('providerOptions reasoningEffort and user are accepted', async () => {
    const r = await generateText({ ...common, model: provider()(model), prompt: 'Hi', providerOptions: { rapid: { reasoningEffort: 'low', user: 'u1' } } });
    expect(typeof r.text).toBe('string');
  });

  it('generateObject validates against the schema (structured outputs on)', async () => {
    const { object } = await generateObject({ ...common, maxOutputTokens: 64, model: provider({ supportsStructuredOutputs: true })(model), schema: jsonSchema(SCHEMA), prompt: 'Weather in Oslo?' });
    expect(schemaViolation(SCHEMA, object), JSON.stringify(object)).toBeNull();
  });

  it('a forced tool call parses into a tool call, streamed and not', async () => {
    const tools = { get_weather: tool({ description: 'weather in a city', inputSchema: jsonSchema(SCHEMA) }) };
    const opts = { ...common, maxOutputTokens: 64, model: provider()(model), tools, toolChoice: { type: 'tool', toolName: 'get_weather' } as const, prompt: 'Weather in Lima?' };
    const r = await generateText(opts);
    expect(r.toolCalls).toHaveLength(1);
    expect(r.toolCalls[0]!.toolName).toBe('get_weather');
    expect(schemaViolation(SCHEMA, r.toolCalls[0]!.input)).toBeNull();
    const s = streamText(opts);
    const calls = await s.toolCalls;
    expect(calls.map((c) => c.toolName)).toEqual(['get_weather']);
    expect(schemaViolation(SCHEMA, calls[0]!.input)).toBeNull();
  });

  it('the legacy completions model generates text', async () => {
    const r = await generateText({ ...common, model: provider().completionModel(model), prompt: 'Once upon a time' });
    expect(r.text.length).toBeGreaterThan(0);
  });
});
