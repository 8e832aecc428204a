// /v1/responses on real fixture checkpoints with the openai SDK: the same greedy text as
// chat/completions for the same conversation, text.format json_schema / json_object constrained
// (streamed and not) and an invalid schema refused naming text.format.schema; on a tiny VLM an
// input_image data URI gives the chat route's text for the same image.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { fixtureServeOptions, servedClient } from '../helpers/openai-chat.js';
import { VLM_FIXTURES, vlmFixtureReady } from '../helpers/vlm-engine.js';
import { post } from './helpers.js';

const SCHEMA = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'],
  additionalProperties: false,
};

describe.skipIf(!nativeAvailable())('/v1/responses on qwen2-q4', () => {
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

  it('the same greedy text as chat/completions for the same conversation, streamed or not', async () => {
    const chat = await client.chat.completions.create({
      model,
      messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Name a color.' }],
      max_tokens: 12,
      temperature: 0,
    });
    const r = await client.responses.create({ model, instructions: 'Be brief.', input: 'Name a color.', max_output_tokens: 12, temperature: 0 });
    expect(r.output_text).toBe(chat.choices[0]!.message.content);
    expect(r.usage!.input_tokens).toBe(chat.usage!.prompt_tokens);
    expect(r.status).toBe(chat.choices[0]!.finish_reason === 'length' ? 'incomplete' : 'completed');
    const st = await client.responses.stream({ model, instructions: 'Be brief.', input: 'Name a color.', max_output_tokens: 12, temperature: 0 }).finalResponse();
    expect(st.output_text).toBe(r.output_text);
  });

  it('text.format json_schema: valid JSON for the schema, streamed and not; json_object too', async () => {
    const format = { type: 'json_schema' as const, name: 'trip', schema: SCHEMA, strict: true };
    const r = await client.responses.create({ model, input: 'A trip as JSON.', text: { format }, max_output_tokens: 48, temperature: 0 });
    expect(r.status).toBe('completed');
    const v = JSON.parse(r.output_text) as { city: string; days: number };
    expect(Object.keys(v).sort()).toEqual(['city', 'days']);
    expect(v.days).toBeGreaterThanOrEqual(1);
    expect(v.days).toBeLessThanOrEqual(7);
    expect(r.text).toMatchObject({ format: { type: 'json_schema', name: 'trip' } });
    const st = await client.responses.stream({ model, input: 'A trip as JSON.', text: { format }, max_output_tokens: 48, temperature: 1, top_p: 0.9 }).finalResponse();
    const w = JSON.parse(st.output_text) as { city: string; days: number };
    expect(Number.isInteger(w.days)).toBe(true);
    const o = await client.responses.create({ model, input: 'Any JSON object.', text: { format: { type: 'json_object' } }, max_output_tokens: 32, temperature: 0 });
    expect(typeof JSON.parse(o.output_text)).toBe('object');
  });

  it('tool_choice required / a named function: a function_call item whose arguments fit the parameters', async () => {
    const tools = [{ type: 'function' as const, name: 'plan_trip', description: 'plan a trip', parameters: SCHEMA, strict: true }];
    for (const tool_choice of ['required' as const, { type: 'function' as const, name: 'plan_trip' }]) {
      const r = await client.responses.create({ model, input: 'Plan a trip.', tools, tool_choice, max_output_tokens: 48, temperature: 0 });
      const call = r.output.find((o) => o.type === 'function_call') as OpenAI.Responses.ResponseFunctionToolCall;
      expect(call.name).toBe('plan_trip');
      expect(Object.keys(JSON.parse(call.arguments) as object).sort()).toEqual(['city', 'days']);
      const st = await client.responses.stream({ model, input: 'Plan a trip.', tools, tool_choice, max_output_tokens: 48, temperature: 0 }).finalResponse();
      expect(st.output.find((o) => o.type === 'function_call')).toMatchObject({ name: 'plan_trip', arguments: call.arguments });
    }
  });

  it('an invalid schema is a 400 naming text.format.schema, and the server keeps serving', async () => {
    const bad = await post(srv.url, '/v1/responses', { model, input: 'x', text: { format: { type: 'json_schema', name: 'bad', schema: { type: 'object', properties: { a: { type: 'nonsense' } } } } } });
    expect(bad.status).toBe(400);
    expect(bad.json().error.param).toMatch(/^text\.format/);
    expect(bad.json().error.message).not.toContain('response_format');
    const noSchema = await post(srv.url, '/v1/responses', { model, input: 'x', text: { format: { type: 'json_schema', name: 'bad' } } });
    expect(noSchema.status).toBe(400);
    expect(noSchema.json().error.param).toBe('text.format.schema');
    const ok = await client.responses.create({ model, input: 'Hi', max_output_tokens: 2 });
    expect(ok.output).toHaveLength(1);
  });
});

const VLM = join(VLM_FIXTURES, 'qwen2_5_vl-f32');

describe.skipIf(!vlmFixtureReady(VLM))('/v1/responses with an input_image on a tiny VLM', () => {
  let srv: RunningServer;
  let client: OpenAI;

  beforeAll(async () => {
    srv = await startServer(VLM, { port: 0, precision: 'exact', maxBatchedTokens: 16, servedModelName: 'vlm' });
    client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 60_000 });
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('a data: URI input_image gives the chat route\'s greedy text for the same image', async () => {
    const file = readdirImage();
    const url = `data:image/png;base64,${readFileSync(join(VLM_FIXTURES, 'images', file)).toString('base64')}`;
    const chat = await client.chat.completions.create({
      model: 'vlm',
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }, { type: 'text', text: 'Describe the image.' }] }],
      max_tokens: 8,
      temperature: 0,
    });
    const r = await client.responses.create({
      model: 'vlm',
      input: [{ role: 'user', content: [{ type: 'input_image', image_url: url, detail: 'auto' }, { type: 'input_text', text: 'Describe the image.' }] }],
      max_output_tokens: 8,
      temperature: 0,
    });
    expect(r.output_text).toBe(chat.choices[0]!.message.content);
    expect(r.usage!.input_tokens).toBe(chat.usage!.prompt_tokens);
  });
});

/** The first reference image of the VLM fixtures. */
function readdirImage(): string {
  const ref = JSON.parse(readFileSync(join(VLM, 'reference.json'), 'utf8')) as { cases: { images: { file: string }[] }[] };
  return ref.cases.find((c) => c.images.length > 0)!.images[0]!.file;
}
