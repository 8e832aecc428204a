// The validity sweep of issue 5: at concurrency 1, 2, 4, 8, 16 and 32, three runs each, schema
// requests (nested objects, arrays, enums, required fields, patterns, bounded numbers) mixed with
// free-text requests, streamed and not, on a real fixture checkpoint behind the real server: 100%
// of schema outputs parse and validate with ajv, and every free-text neighbour equals its solo
// greedy output. Unsupported schema features are a 400 naming the construct.
import { Ajv } from 'ajv';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { chatText, servedClient, type ChatText } from '../helpers/openai-chat.js';
import { SWEEP_SCHEMAS } from './sweep-schemas.js';

const WORDS = ['river', 'stone', 'cloud', 'market', 'engine', 'yellow', 'quiet', 'seven', 'orbit', 'maple'];
const LEVELS = [1, 2, 4, 8, 16, 32];
const RUNS = 3;
const MODEL = 'fixture-qwen2-q4';

interface Item {
  prompt: string;
  schema: number | null;
  stream: boolean;
}

/** Request i of a run: every other one constrained (schemas cycle), every third one streamed. */
function item(level: number, run: number, i: number): Item {
  const k = level * 7 + run * 3 + i;
  return { prompt: `${WORDS[k % WORDS.length]} ${WORDS[(k * 3 + 1) % WORDS.length]}`, schema: i % 2 === 0 ? (k >> 1) % SWEEP_SCHEMAS.length : null, stream: k % 3 === 0 };
}

describe.skipIf(!nativeAvailable())('validity sweep on qwen2-q4 (concurrency 1..32, three runs each)', () => {
  let srv: RunningServer;
  let client: OpenAI;
  const ajv = new Ajv({ strict: false });
  const validate = SWEEP_SCHEMAS.map((s) => ajv.compile(s));
  const solo = new Map<string, string>();

  beforeAll(async () => {
    srv = await startServer(`${FIXTURE_ROOT}/qwen2-q4`, {
      port: 0,
      threads: 2,
      precision: 'exact',
      kvCacheMemory: 64 << 20,
      blockSize: 16,
      maxNumSeqs: 32,
      maxBatchedTokens: 512,
      servedModelName: MODEL,
    });
    client = servedClient(srv.url);
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  async function ask(it: Item): Promise<ChatText> {
    const response_format = it.schema === null ? undefined : { type: 'json_schema' as const, json_schema: { name: 's', schema: SWEEP_SCHEMAS[it.schema]!, strict: true } };
    const body = { model: MODEL, messages: [{ role: 'user' as const, content: it.prompt }], max_tokens: it.schema === null ? 8 : 64, temperature: 0, response_format };
    return chatText(client, body, it.stream);
  }

  it('schema outputs always validate; free-text neighbours equal their solo output', async () => {
    // Solo greedy outputs of every free-text prompt the sweep uses, one at a time.
    for (const level of LEVELS) {
      for (let run = 0; run < RUNS; run++) {
        for (let i = 0; i < level; i++) {
          const it = item(level, run, i);
          if (it.schema === null && !solo.has(it.prompt)) solo.set(it.prompt, (await ask({ ...it, stream: false })).text);
        }
      }
    }
    let schemaOutputs = 0;
    let freeOutputs = 0;
    for (const level of LEVELS) {
      for (let run = 0; run < RUNS; run++) {
        const items = Array.from({ length: level }, (_, i) => item(level, run, i));
        const got = await Promise.all(items.map((it) => ask(it)));
        items.forEach((it, i) => {
          const g = got[i]!;
          const where = `c=${level} run ${run} request ${i}`;
          if (it.schema !== null) {
            expect(g.finish, `${where}: ${g.text}`).toBe('stop');
            const value = JSON.parse(g.text) as unknown;
            expect(validate[it.schema]!(value), `${where} schema ${it.schema}: ${g.text} ${JSON.stringify(validate[it.schema]!.errors)}`).toBe(true);
            schemaOutputs++;
          } else {
            expect(g.text, where).toBe(solo.get(it.prompt));
            freeOutputs++;
          }
        });
      }
    }
    expect(schemaOutputs).toBe(96);
    expect(freeOutputs).toBe(93);
  }, 240_000);

  it('unsupported schema features are a 400 naming the construct', async () => {
    const bad: [Record<string, unknown>, RegExp][] = [
      [{ type: 'integer', multipleOf: 3 }, /"multipleOf" is not supported/],
      [{ type: 'object', patternProperties: { '^x': { type: 'string' } } }, /"patternProperties" is not supported/],
      [{ type: 'object', minProperties: 1 }, /"minProperties" is not supported/],
      [{ if: { type: 'string' }, then: { maxLength: 2 } }, /"if" is not supported/],
      [{ type: 'string', pattern: '^(?!a)b$' }, /lookaround/],
      [{ type: 'array', uniqueItems: true }, /"uniqueItems"/],
    ];
    for (const [schema, msg] of bad) {
      const err = await client.chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], response_format: { type: 'json_schema', json_schema: { name: 's', schema } } })
        .then(
          () => null,
          (e: unknown) => e as { status?: number; message: string },
        );
      expect(err?.status, JSON.stringify(schema)).toBe(400);
      expect(err!.message).toMatch(msg);
    }
  });
});
