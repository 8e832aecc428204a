// Structured output inside the continuous batch, over real HTTP with the openai client on fixture
// checkpoints (random weights: the grammar is all that makes their output JSON). At concurrency 1, 4
// and 16, schema requests mixed with free-text ones: every schema output parses and validates, and
// every request (constrained or not) equals its solo greedy output.
import OpenAI from 'openai';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { chatText, servedClient, type ChatText, fixtureServeOptions } from '../helpers/openai-chat.js';
import { schemaViolation } from './json-schema-check.mjs';

// Enums, bounded integers, nesting, arrays, null (shared with test/cuda/serve-checks.mjs).
const SCHEMAS = JSON.parse(readFileSync(new URL('./mixed-schemas.json', import.meta.url), 'utf8')) as Record<string, unknown>[];

const WORDS = ['river', 'stone', 'cloud', 'market', 'engine', 'yellow', 'quiet', 'seven'];

interface Item {
  prompt: string;
  schema?: Record<string, unknown>;
  stream: boolean;
}

/** 16 requests: 8 constrained (3 schemas, some streamed), 8 free text. */
const ITEMS: Item[] = Array.from({ length: 16 }, (_, i) => ({
  prompt: `${WORDS[i % 8]} ${WORDS[(i * 3 + 1) % 8]} ${i}`,
  schema: i % 2 === 0 ? SCHEMAS[(i / 2) % 3] : undefined,
  stream: i % 4 === 2,
}));

const CASES = [
  { name: 'qwen2-q4', maxTokens: 48 },
  { name: 'gemma3-q8', maxTokens: 64 },
];

describe.skipIf(!nativeAvailable()).each(CASES)('structured output on $name', ({ name, maxTokens }) => {
  let srv: RunningServer;
  let client: OpenAI;
  const model = `fixture-${name}`;

  beforeAll(async () => {
    srv = await startServer(`${FIXTURE_ROOT}/${name}`, fixtureServeOptions(model, { maxBatchedTokens: 256 }));
    client = servedClient(srv.url);
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  async function ask(it: Item): Promise<ChatText> {
    const response_format = it.schema ? { type: 'json_schema' as const, json_schema: { name: 's', schema: it.schema, strict: true } } : undefined;
    const body = { model, messages: [{ role: 'user' as const, content: it.prompt }], max_tokens: it.schema ? maxTokens : 12, temperature: 0, response_format };
    return chatText(client, body, it.stream);
  }

  async function runPool(concurrency: number): Promise<ChatText[]> {
    const out: ChatText[] = new Array(ITEMS.length);
    let next = 0;
    const worker = async () => {
      while (next < ITEMS.length) {
        const i = next++;
        out[i] = await ask(ITEMS[i]!);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    return out;
  }

  let solo: ChatText[];

  it('every schema output parses and validates when run alone', async () => {
    solo = [];
    for (const it of ITEMS) solo.push(await ask(it));
    ITEMS.forEach((it, i) => {
      if (!it.schema) return;
      expect(solo[i]!.finish, solo[i]!.text).toBe('stop');
      expect(schemaViolation(it.schema, JSON.parse(solo[i]!.text)), solo[i]!.text).toBeNull();
    });
  });

  it.each([1, 4, 16])('at concurrency %i: every schema output validates, every output equals its solo run', async (c) => {
    const got = await runPool(c);
    ITEMS.forEach((it, i) => {
      if (it.schema) {
        expect(got[i]!.finish, got[i]!.text).toBe('stop');
        expect(schemaViolation(it.schema, JSON.parse(got[i]!.text)), got[i]!.text).toBeNull();
      }
      expect(got[i], `request ${i} (${it.schema ? 'schema' : 'free text'})`).toEqual(solo[i]);
    });
  });

  it('json_object gives an object (or a truncated one with finish_reason length)', async () => {
    const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'an object' }], max_tokens: maxTokens, temperature: 0, response_format: { type: 'json_object' } });
    const text = r.choices[0]!.message.content ?? '';
    expect(text.startsWith('{')).toBe(true);
    if (r.choices[0]!.finish_reason === 'stop') expect(typeOf(JSON.parse(text))).toBe('object');
    else expect(r.choices[0]!.finish_reason).toBe('length');
  });

  it('max_tokens below the shortest valid output: 400 naming it; with rapid_budget_close false, cut with "length"', async () => {
    const body = {
      model,
      messages: [{ role: 'user' as const, content: 'short' }],
      max_tokens: 4,
      temperature: 0,
      response_format: { type: 'json_schema' as const, json_schema: { name: 's', schema: SCHEMAS[1]!, strict: true } },
    };
    const err = await client.chat.completions.create(body).then(
      () => null,
      (e: unknown) => e as { status?: number; message: string },
    );
    expect(err?.status).toBe(400);
    expect(err!.message).toMatch(/max_tokens is 4, but the shortest output this schema allows takes \d+ tokens/);
    const r = await client.chat.completions.create({ ...body, rapid_budget_close: false } as typeof body);
    expect(r.choices[0]!.finish_reason).toBe('length');
    expect(() => JSON.parse(r.choices[0]!.message.content ?? '')).toThrow();
  });

  it('response_format works on /v1/completions too, with sampling', async () => {
    const r = await client.completions.create({
      model,
      prompt: 'data:',
      max_tokens: maxTokens,
      temperature: 1,
      seed: 7,
      // @ts-expect-error response_format is a rapid extension on the legacy route
      response_format: { type: 'json_schema', json_schema: { name: 's', schema: SCHEMAS[0]!, strict: true } },
    });
    expect(r.choices[0]!.finish_reason).toBe('stop');
    expect(schemaViolation(SCHEMAS[0]!, JSON.parse(r.choices[0]!.text))).toBeNull();
  });

  it('unsupported schemas are a 400 naming the construct', async () => {
    const bad: [unknown, RegExp][] = [
      [{ type: 'object', not: { type: 'string' } }, /"not"/],
      [{ type: 'array', uniqueItems: true }, /"uniqueItems"/],
      [{ type: 'string', pattern: '[a-' }, /Unclosed|pattern|Regex/i],
      [{ type: 'decimal' }, /unsupported type "decimal"/],
      [{ $ref: 'https://example.com/s.json' }, /local references/],
    ];
    // Each twice: a schema xgrammar aborted on must be refused again, not hang the compiler.
    for (const [schema, msg] of [...bad, ...bad]) {
      const err = await client.chat.completions
        .create({ model, messages: [{ role: 'user', content: 'x' }], response_format: { type: 'json_schema', json_schema: { name: 's', schema: schema as Record<string, unknown> } } })
        .then(
          () => null,
          (e: unknown) => e as { status?: number; message: string },
        );
      expect(err?.status, JSON.stringify(schema)).toBe(400);
      expect(err!.message).toMatch(msg);
    }
    // The server keeps serving constrained requests after xgrammar refused a schema.
    const ok = await ask(ITEMS[0]!);
    expect(ok).toEqual(solo[0]);
  });
});

function typeOf(v: unknown): string {
  return v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v;
}
