// The Vercel AI SDK (ai + @ai-sdk/openai), unmodified, against /v1/responses over real HTTP: its
// default openai('model') speaks the Responses API. generateText and streamText, plain and with a
// function tool run over several steps (the SDK sends item_reference items for stored output).
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, stepCountIs, streamText, tool } from 'ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startScriptedServer, type ScriptedServer } from './responses-helpers.js';

const SCRIPTS: Record<string, string> = {
  hello: 'Hello from rapid!',
  weather: 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
  '{"city":"Oslo","celsius":18}': 'It is 18C in Oslo.',
  think: '<think>\nA greeting.\n</think>\n\nHi!',
};

let s: ScriptedServer;
let provider: ReturnType<typeof createOpenAI>;
/** The bodies the SDK sent (its own fetch, recorded on the way). */
const sent: { input: { type?: string }[] }[] = [];
const calls: string[] = [];
const weather = tool({
  description: 'weather in a city',
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => {
    calls.push(city);
    return { city, celsius: 18 };
  },
});

beforeAll(async () => {
  s = await startScriptedServer(SCRIPTS);
  provider = createOpenAI({
    baseURL: `${s.url}/v1`,
    apiKey: 'x',
    fetch: async (url, init) => {
      if (typeof init?.body === 'string') sent.push(JSON.parse(init.body) as (typeof sent)[number]);
      return fetch(url, init);
    },
  });
});
afterAll(async () => {
  await s.server.close(100);
});

describe('ai + @ai-sdk/openai (Responses API by default)', () => {
  it('generateText', async () => {
    const r = await generateText({ model: provider('fake-model'), prompt: 'hello', maxRetries: 0 });
    expect(r.text).toBe('Hello from rapid!');
    expect(r.finishReason).toBe('stop');
    expect(r.usage.outputTokens).toBeGreaterThan(0);
    expect(r.response.id).toMatch(/^resp_/);
  });

  it('streamText', async () => {
    const r = streamText({ model: provider('fake-model'), system: 'Be nice.', prompt: 'hello', maxRetries: 0 });
    let text = '';
    for await (const t of r.textStream) text += t;
    expect(text).toBe('Hello from rapid!');
    expect(await r.finishReason).toBe('stop');
  });

  it('generateText with a tool over several steps', async () => {
    calls.length = 0;
    sent.length = 0;
    const r = await generateText({ model: provider('fake-model'), prompt: 'weather', tools: { get_weather: weather }, stopWhen: stepCountIs(3), maxRetries: 0 });
    expect(calls).toEqual(['Oslo']);
    expect(r.steps).toHaveLength(2);
    expect(r.steps[0]!.toolCalls.map((c) => [c.toolName, c.input])).toEqual([['get_weather', { city: 'Oslo' }]]);
    expect(r.steps[0]!.finishReason).toBe('tool-calls');
    expect(r.text).toBe('It is 18C in Oslo.');
    // Stored output comes back by reference: the store resolves it.
    expect(sent[1]!.input.map((i) => i.type ?? 'message')).toEqual(['message', 'item_reference', 'function_call', 'function_call_output']);
  });

  it('streamText with a tool over several steps', async () => {
    calls.length = 0;
    const r = streamText({ model: provider('fake-model'), prompt: 'weather', tools: { get_weather: weather }, stopWhen: stepCountIs(3), maxRetries: 0 });
    const types = new Set<string>();
    for await (const p of r.fullStream) {
      types.add(p.type);
      if (p.type === 'error') throw p.error;
    }
    expect(calls).toEqual(['Oslo']);
    expect(types).toContain('tool-input-delta');
    expect(types).toContain('tool-result');
    expect(await r.text).toBe('It is 18C in Oslo.');
  });

  it('store: false (stateless) works the same', async () => {
    calls.length = 0;
    sent.length = 0;
    const r = await generateText({
      model: provider('fake-model'),
      prompt: 'weather',
      tools: { get_weather: weather },
      stopWhen: stepCountIs(3),
      providerOptions: { openai: { store: false } },
      maxRetries: 0,
    });
    expect(r.text).toBe('It is 18C in Oslo.');
    expect(sent[1]!.input.map((i) => i.type ?? 'message')).not.toContain('item_reference');
  });

  it('a thinking model: the answer is the text, the reasoning does not leak into it', async () => {
    const t = await startScriptedServer(SCRIPTS, { reasoning: true });
    try {
      const p = createOpenAI({ baseURL: `${t.url}/v1`, apiKey: 'x' });
      const r = await generateText({ model: p('fake-model'), prompt: 'think', maxRetries: 0 });
      expect(r.text).toBe('Hi!');
      const st = streamText({ model: p('fake-model'), prompt: 'think', maxRetries: 0 });
      expect(await st.text).toBe('Hi!');
    } finally {
      await t.server.close(100);
    }
  });
});
