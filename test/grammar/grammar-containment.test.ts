// Grammar containment over real HTTP on a fixture checkpoint, real xgrammar in its worker: hostile
// schemas are 400s naming the limit and the server's grammar keeps working after them; a trap in
// xgrammar (injected through the test-only grammar-faults hook) fails only the request that caused
// it, a concurrent constrained request finishes with its solo output, and /health says degraded
// while the instance is rebuilt, then ok.
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { grammarFaults } from '../../src/engine/grammar/grammar-faults.js';
import { nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { chatText, servedClient, type ChatText, fixtureServeOptions } from '../helpers/openai-chat.js';
import { schemaViolation } from './json-schema-check.mjs';

const NEIGHBOUR = {
  type: 'object',
  properties: { words: { type: 'array', items: { type: 'string', maxLength: 5 }, minItems: 2, maxItems: 3 }, n: { type: 'integer', minimum: 0, maximum: 999 } },
  required: ['words', 'n'],
  additionalProperties: false,
};
const TOOL = {
  type: 'function' as const,
  function: { name: 'ping', parameters: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false } },
};

function nestObjects(d: number): Record<string, unknown> {
  let s: Record<string, unknown> = { type: 'string' };
  for (let i = 0; i < d; i++) s = { type: 'object', properties: { a: s }, required: ['a'] };
  return s;
}
/** JSON text nested `d` deep (JSON.stringify itself overflows on such values). */
const deepSchema = (d: number) => '{"type":"object","properties":{"a":'.repeat(d) + '{"type":"string"}' + '}}'.repeat(d);
const deepValue = (d: number) => '{"a":'.repeat(d) + '1' + '}'.repeat(d);
/** A body with `hole` replaced by raw JSON text. */
const withRaw = (body: unknown, raw: string) => JSON.stringify(body).replace('"@HOLE@"', raw);

/** Valid against NEIGHBOUR when complete; a cut one (max_tokens) must at least have started right. */
function expectValid(r: ChatText): void {
  if (r.finish === 'stop') expect(schemaViolation(NEIGHBOUR, JSON.parse(r.text)), r.text).toBeNull();
  else expect(r.text.startsWith('{"words":["'), r.text).toBe(true);
}

describe.skipIf(!nativeAvailable())('grammar containment on qwen2-q4', () => {
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
  afterEach(() => {
    for (const k of Object.keys(grammarFaults)) delete grammarFaults[k as keyof typeof grammarFaults];
  });

  const schemaBody = (schema: unknown, extra: Record<string, unknown> = {}) => ({
    model,
    messages: [{ role: 'user', content: 'data' }],
    max_tokens: 48,
    temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 's', schema, strict: true } },
    ...extra,
  });
  const post = async (body: unknown) => {
    const res = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as { error?: { message: string; param: string | null } } };
  };
  const neighbour = (stream: boolean): Promise<ChatText> =>
    chatText(client, schemaBody(NEIGHBOUR, { messages: [{ role: 'user', content: 'river stone' }], max_tokens: 64 }) as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming, stream);
  // Room to spare: at 32 tokens budget closing would pick the shorter "true" and end with "length".
  const forcedCall = () => client.chat.completions.create({ model, messages: [{ role: 'user', content: 'ping' }], tools: [TOOL], tool_choice: 'required', max_tokens: 64, temperature: 0 });

  it('the 60-deep schema is a 400 naming the limit; the next schema request and a forced tool call succeed', async () => {
    const r = await post(schemaBody(nestObjects(60)));
    expect(r.status).toBe(400);
    expect(r.body.error!.message).toMatch(/maxSchemaDepth = 32/);
    expect(r.body.error!.message).toMatch(/response_format\.json_schema\.schema\.properties\.a/);
    expectValid(await neighbour(false));
    const call = await forcedCall();
    expect(call.choices[0]!.finish_reason).toBe('tool_calls');
    const tc = call.choices[0]!.message.tool_calls![0]!;
    expect(tc.type === 'function' ? tc.function.name : tc.type).toBe('ping');
  });

  // The body's own depth limit (server.ts) refuses these before the tool's schema is looked at.
  const TOO_DEEP_TOOL = /tools\[0\]\.function\.parameters|maxJsonDepth = 128/;

  it('recursive $ref, $defs cycles and 10,000-deep schema, const, enum and tool parameters are each a 400', async () => {
    const cases: [unknown, RegExp][] = [
      [schemaBody({ $ref: '#' }), /no way to end/],
      [schemaBody({ $defs: { a: { $ref: '#/$defs/b' }, b: { $ref: '#/$defs/a' } }, $ref: '#/$defs/a' }), /no way to end/],
      [schemaBody({ $defs: { a: { type: 'object', properties: { x: { $ref: '#/$defs/a' } }, required: ['x'] } }, $ref: '#/$defs/a' }), /no way to end/],
      [withRaw(schemaBody('@HOLE@'), deepSchema(10_000)), /maxJsonDepth|maxSchemaDepth/],
      [withRaw(schemaBody({ const: '@HOLE@' }), deepValue(10_000)), /maxJsonDepth/],
      [withRaw(schemaBody({ enum: ['@HOLE@'] }), deepValue(10_000)), /maxJsonDepth/],
      [schemaBody({ type: 'object', properties: Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`k${i}`, { type: 'integer' }])) }), /maxBytes|maxNodes|maxProperties/],
      [schemaBody({ enum: Array.from({ length: 100_000 }, (_, i) => i) }), /maxEnumValues/],
      [withRaw({ model, messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function', function: { name: 'f', parameters: '@HOLE@' } }], tool_choice: 'required' }, deepSchema(10_000)), TOO_DEEP_TOOL],
      [withRaw({ model, messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function', function: { name: 'f', parameters: '@HOLE@' } }] }, deepSchema(10_000)), TOO_DEEP_TOOL],
      // Tool-call arguments come as a string: JSON.parse takes any depth, the chat template would not.
      [
        {
          model,
          messages: [
            { role: 'user', content: 'x' },
            { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'ping', arguments: deepValue(10_000) } }] },
            { role: 'tool', tool_call_id: 'c1', content: 'ok' },
          ],
          tools: [TOOL],
        },
        /messages\[1\]\.tool_calls\[0\]\.function\.arguments: .*maxJsonDepth/,
      ],
    ];
    for (const [body, msg] of cases) {
      const r = await post(body);
      expect(r.status, (typeof body === 'string' ? body : JSON.stringify(body)).slice(0, 120)).toBe(400);
      expect(r.body.error!.message).toMatch(msg);
    }
    expectValid(await neighbour(false));
  }, 60_000);

  it('a recursive schema with a way out (a tree with optional children) works end to end', async () => {
    const tree = {
      $defs: { node: { type: 'object', properties: { v: { type: 'integer', minimum: 0, maximum: 9 }, kids: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 2 } }, required: ['v', 'kids'], additionalProperties: false } },
      $ref: '#/$defs/node',
    };
    const r = await client.chat.completions.create(schemaBody(tree, { max_tokens: 96 }) as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming);
    const text = r.choices[0]!.message.content ?? '';
    if (r.choices[0]!.finish_reason === 'stop') expect(schemaViolation(tree, JSON.parse(text)), text).toBeNull();
    else expect(text.startsWith('{"v":')).toBe(true);
  });

  it('a trap mid-mask fails only its request; a concurrent constrained request is unchanged; /health degraded then ok', async () => {
    const solo = await neighbour(true);
    grammarFaults.rebuildDelayMs = 1500;
    const victimSchema = { description: 'trap-me', type: 'object', properties: { x: { type: 'string' } }, required: ['x'] };
    // The neighbour streams; once it is decoding, the victim arrives and its first mask traps.
    const s = await client.chat.completions.create({ ...(schemaBody(NEIGHBOUR, { messages: [{ role: 'user', content: 'river stone' }], max_tokens: 64 }) as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming), stream: true });
    let text = '';
    let finish: string | null = null;
    let victim: Promise<{ status: number; body: { error?: { message: string } } }> | null = null;
    const health: string[] = [];
    for await (const c of s) {
      text += c.choices[0]?.delta.content ?? '';
      finish = c.choices[0]?.finish_reason ?? finish;
      if (victim === null && text.length > 0) {
        grammarFaults.trapMask = (schema) => schema.includes('trap-me');
        victim = post(schemaBody(victimSchema));
        void (async () => {
          // Until it has seen degraded and then ok again (or ~10 s).
          for (let i = 0; i < 200 && !(health.includes('degraded') && health.at(-1) === 'ok'); i++) {
            const h = (await (await fetch(`${srv.url}/health`)).json()) as { status: string };
            health.push(h.status);
            await new Promise((r) => setTimeout(r, 50));
          }
        })();
      }
    }
    const v = await victim!;
    expect(v.status).toBeGreaterThanOrEqual(400);
    expect(JSON.stringify(v.body)).toMatch(/grammar/);
    expect({ text, finish }).toEqual(solo);
    expectValid({ text, finish });
    for (let i = 0; i < 200 && !(health.includes('degraded') && health.at(-1) === 'ok'); i++) await new Promise((r) => setTimeout(r, 50));
    expect(health).toContain('degraded');
    expect(health.at(-1)).toBe('ok');
    const h = await fetch(`${srv.url}/health`);
    expect(h.status).toBe(200);
    delete grammarFaults.trapMask;
    // The grammar works after: a schema request and a forced tool call.
    expect(await neighbour(false)).toEqual(solo);
    expect((await forcedCall()).choices[0]!.finish_reason).toBe('tool_calls');
  }, 90_000);

  it('a trap mid-compile is a 400 for that request alone; a concurrent constrained request is unchanged', async () => {
    const solo = await neighbour(true);
    grammarFaults.trapCompile = (schema) => schema.includes('compile-trap');
    const s = await client.chat.completions.create({ ...(schemaBody(NEIGHBOUR, { messages: [{ role: 'user', content: 'river stone' }], max_tokens: 64 }) as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming), stream: true });
    let text = '';
    let finish: string | null = null;
    let victim: ReturnType<typeof post> | null = null;
    for await (const c of s) {
      text += c.choices[0]?.delta.content ?? '';
      finish = c.choices[0]?.finish_reason ?? finish;
      // Once the neighbour is decoding, the victim's compile traps.
      if (victim === null && text.length > 0) victim = post(schemaBody({ description: 'compile-trap', type: 'object', properties: { y: { type: 'integer' } } }));
    }
    const r = await victim!;
    expect(r.status).toBe(400);
    expect(r.body.error!.message).toMatch(/memory access out of bounds/);
    expect({ text, finish }).toEqual(solo);
  }, 90_000);

  it('/health answers quickly while the largest allowed schema compiles', async () => {
    const big = { type: 'object', properties: Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`field${i}`, { type: 'integer' }])) };
    // No valid output fits 4 tokens: opted out of budget closing, the cut output is a 200.
    const req = post(schemaBody(big, { max_tokens: 4, rapid_budget_close: false }));
    let done = false;
    void req.finally(() => (done = true));
    let worst = 0;
    let polls = 0;
    while (!done) {
      const t = performance.now();
      const h = await fetch(`${srv.url}/health`);
      expect(h.status).toBe(200);
      worst = Math.max(worst, performance.now() - t);
      polls++;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect((await req).status).toBe(200);
    expect(polls).toBeGreaterThan(3);
    expect(worst).toBeLessThan(500); // generous for a loaded 2-core machine; the compile takes seconds
  }, 60_000);
});
