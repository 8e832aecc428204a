// Every client library, unmodified and with its defaults, against `rapid serve` started as a user
// starts it (the CLI, no model argument: the embedded default model), and against a tool-capable
// fixture for the agent loop. Each answer must be a real, non-empty generation of that model.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { ChatOpenAI } from '@langchain/openai';
import { Agent, OpenAIResponsesModel, run, setTracingDisabled, tool } from '@openai/agents';
import { generateText, streamText } from 'ai';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startServer, type RunningServer } from '../../../src/cli/commands/serve.js';
import { DEFAULT_MODEL } from '../../../src/models/default-model.js';
import { nativeAvailable } from '../../helpers/addon.js';
import { FIXTURE_ROOT } from '../../helpers/fixtures.js';
import { fixtureServeOptions } from '../../helpers/openai-chat.js';

const ROOT = resolve(import.meta.dirname, '..', '..', '..');
const SHAPES = `data:image/png;base64,${readFileSync(resolve(ROOT, 'examples/shapes.png')).toString('base64')}`;
const QUESTION = 'What is the capital of Japan?';

/** `rapid serve --port 0` from the CLI; resolves with its URL once it logs that it serves. */
function serveCli(args: string[]): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [resolve(ROOT, 'bin/rapid.js'), 'serve', '--port', '0', '--threads', '2', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  return new Promise((ok, fail) => {
    let err = '';
    const timer = setTimeout(() => (child.kill(), fail(new Error(`rapid serve did not start in 60 s:\n${err}`))), 60_000);
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      const m = /serving .* on (http:\/\/[^\s]+)\/v1/.exec(err);
      if (m) {
        clearTimeout(timer);
        ok({ url: m[1]!, child });
      }
    });
    child.on('exit', (code) => (clearTimeout(timer), fail(new Error(`rapid serve exited with ${code}:\n${err}`))));
  });
}

describe.skipIf(!nativeAvailable())('client libraries with their defaults on the default model (rapid serve, no model argument)', () => {
  let url = '';
  let child: ChildProcess | undefined;
  beforeAll(async () => {
    ({ url, child } = await serveCli([]));
  }, 90_000);
  afterAll(() => {
    child?.kill('SIGTERM');
  });

  it('openai (Node): chat, streamed chat, an image, and Responses', async () => {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused' });
    const chat = await client.chat.completions.create({ model: DEFAULT_MODEL, messages: [{ role: 'user', content: QUESTION }] });
    expect(chat.choices[0]!.message.content).toMatch(/tokyo/i);
    let streamed = '';
    for await (const c of await client.chat.completions.create({ model: DEFAULT_MODEL, messages: [{ role: 'user', content: QUESTION }], stream: true })) streamed += c.choices[0]?.delta.content ?? '';
    expect(streamed).toBe(chat.choices[0]!.message.content);
    const image = await client.chat.completions.create({
      model: DEFAULT_MODEL,
      temperature: 0,
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: SHAPES } }, { type: 'text', text: 'How many shapes are there?' }] }],
    });
    expect(image.choices[0]!.message.content!.length).toBeGreaterThan(0);
    const resp = await client.responses.create({ model: DEFAULT_MODEL, input: QUESTION });
    expect(resp.output_text).toMatch(/tokyo/i);
  });

  it('ai + @ai-sdk/openai (Responses by default): generateText and streamText', async () => {
    const openai = createOpenAI({ baseURL: `${url}/v1`, apiKey: 'unused' });
    const r = await generateText({ model: openai(DEFAULT_MODEL), prompt: QUESTION });
    expect(r.text).toMatch(/tokyo/i);
    const s = streamText({ model: openai(DEFAULT_MODEL), prompt: QUESTION });
    let text = '';
    for await (const t of s.textStream) text += t;
    expect(text).toMatch(/tokyo/i);
  });

  it('ai + @ai-sdk/openai-compatible: generateText', async () => {
    const provider = createOpenAICompatible({ name: 'rapid', baseURL: `${url}/v1` });
    const r = await generateText({ model: provider(DEFAULT_MODEL), prompt: QUESTION });
    expect(r.text).toMatch(/tokyo/i);
  });

  it('@langchain/openai ChatOpenAI: invoke', async () => {
    const chat = new ChatOpenAI({ model: DEFAULT_MODEL, apiKey: 'unused', configuration: { baseURL: `${url}/v1` } });
    const r = await chat.invoke(QUESTION);
    expect(r.content).toMatch(/tokyo/i);
  });

  it('@anthropic-ai/sdk: messages.create and messages.stream', async () => {
    const client = new Anthropic({ baseURL: url, apiKey: 'unused' });
    const m = await client.messages.create({ model: DEFAULT_MODEL, max_tokens: 64, messages: [{ role: 'user', content: QUESTION }] });
    expect(m.content[0]?.type === 'text' ? m.content[0].text : '').toMatch(/tokyo/i);
    const final = await client.messages.stream({ model: DEFAULT_MODEL, max_tokens: 64, messages: [{ role: 'user', content: QUESTION }] }).finalMessage();
    expect(final.content).toEqual(m.content);
  });

  it('@openai/agents: an Agent without tools answers', async () => {
    setTracingDisabled(true); // there is no OpenAI to send traces to
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused' });
    const r = await run(new Agent({ name: 'Plain', model: new OpenAIResponsesModel(client, DEFAULT_MODEL) }), QUESTION);
    expect(String(r.finalOutput)).toMatch(/tokyo/i);
  });
});

describe.skipIf(!nativeAvailable())('@openai/agents with a function tool on a tool-capable fixture (qwen2-q4)', () => {
  let srv: RunningServer;
  beforeAll(async () => {
    srv = await startServer(`${FIXTURE_ROOT}/qwen2-q4`, fixtureServeOptions('qwen2-q4'));
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('the agent calls its tool (forced), gets the result back, and finishes', async () => {
    setTracingDisabled(true);
    const cities: string[] = [];
    const weather = tool({
      name: 'get_weather',
      description: 'weather in a city',
      parameters: z.object({ city: z.string() }),
      execute: async ({ city }) => (cities.push(city), `${city}: 18C`),
    });
    const client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', timeout: 60_000 });
    // A random-weight fixture would never choose a tool on its own: the first turn is forced.
    const agent = new Agent({ name: 'Weather', model: new OpenAIResponsesModel(client, 'qwen2-q4'), tools: [weather], modelSettings: { toolChoice: 'required', maxTokens: 32 } });
    const r = await run(agent, 'Weather in Oslo?', { maxTurns: 3 });
    expect(cities).toHaveLength(1);
    expect(r.newItems.map((i) => i.type).slice(0, 2)).toEqual(['tool_call_item', 'tool_call_output_item']);
    expect(typeof r.finalOutput).toBe('string');
  });
});
