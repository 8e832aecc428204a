// The OpenAI Agents SDK (@openai/agents), unmodified, against /v1/responses over real HTTP: an
// Agent with a function tool runs to its final output through the Responses model, streamed and
// not, with the default client pointed at rapid.
import { Agent, OpenAIResponsesModel, run, setDefaultOpenAIClient, setTracingDisabled, tool } from '@openai/agents';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startScriptedServer, type ScriptedServer } from './responses-helpers.js';

const SCRIPTS: Record<string, string> = {
  hello: 'Hello, I am an agent.',
  weather: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
  'Oslo: 18C': 'It is 18C in Oslo.',
};

let s: ScriptedServer;
let client: OpenAI;
const calls: string[] = [];
const getWeather = tool({
  name: 'get_weather',
  description: 'weather in a city',
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => {
    calls.push(city);
    return `${city}: 18C`;
  },
});

beforeAll(async () => {
  s = await startScriptedServer(SCRIPTS);
  client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 20_000 });
  setDefaultOpenAIClient(client);
  setTracingDisabled(true); // no trace export (there is no OpenAI to send it to)
});
afterAll(async () => {
  await s.server.close(100);
});

const agent = () =>
  new Agent({ name: 'Weather', instructions: 'Answer about the weather.', model: new OpenAIResponsesModel(client, 'fake-model'), tools: [getWeather] });

describe('@openai/agents on rapid', () => {
  it('an agent without a tool call answers with its text', async () => {
    const r = await run(agent(), 'hello');
    expect(r.finalOutput).toBe('Hello, I am an agent.');
  });

  it('an agent calls its function tool, then answers from the result', async () => {
    calls.length = 0;
    const r = await run(agent(), 'weather');
    expect(calls).toEqual(['Oslo']);
    expect(r.finalOutput).toBe('It is 18C in Oslo.');
    expect(r.newItems.map((i) => i.type)).toEqual(['tool_call_item', 'tool_call_output_item', 'message_output_item']);
  });

  it('streamed: the same run, event by event', async () => {
    calls.length = 0;
    const r = await run(agent(), 'weather', { stream: true });
    const kinds = new Set<string>();
    for await (const e of r) kinds.add(e.type);
    await r.completed;
    expect(calls).toEqual(['Oslo']);
    expect(r.finalOutput).toBe('It is 18C in Oslo.');
    expect(kinds).toContain('raw_model_stream_event');
    expect(kinds).toContain('run_item_stream_event');
  });

  it('with the default client and a model name (no model object)', async () => {
    const a = new Agent({ name: 'Plain', instructions: 'Be brief.', model: 'fake-model' });
    const r = await run(a, 'hello');
    expect(r.finalOutput).toBe('Hello, I am an agent.');
  });
});
