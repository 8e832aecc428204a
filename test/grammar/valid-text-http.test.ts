// Issue 38 over real HTTP on fixture checkpoints (real server, native addon, xgrammar): sampled
// constrained output never holds U+FFFD and string lengths hold by code points, on the byte-fallback
// llama vocabulary where random weights pick byte tokens often; and with tight max_tokens every
// reply parses and validates (ajv), finish_reason "stop" or "length", or max_tokens is refused with a
// 400 when even the shortest valid output does not fit; a forced tool call cut by max_tokens is a
// call whose arguments validate. rapid_budget_close must be a boolean.
import { Ajv } from 'ajv';
import OpenAI from 'openai';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { chatText, servedClient, fixtureServeOptions } from '../helpers/openai-chat.js';
import { SWEEP_SCHEMAS } from './sweep-schemas.js';

const MODEL = 'fixture-llama-q4';
const MIXED = JSON.parse(readFileSync(new URL('./mixed-schemas.json', import.meta.url), 'utf8')) as Record<string, unknown>[];
const NAMES = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 3 }, city: { type: 'string', minLength: 2, maxLength: 5 }, tags: { type: 'array', items: { type: 'string', maxLength: 2 }, maxItems: 2 } },
  required: ['name', 'city', 'tags'],
  additionalProperties: false,
};

describe.skipIf(!nativeAvailable())('constrained text is valid text on llama-q4 over HTTP', () => {
  let srv: RunningServer;
  let client: OpenAI;
  const ajv = new Ajv({ strict: false });

  beforeAll(async () => {
    srv = await startServer(`${FIXTURE_ROOT}/llama-q4`, fixtureServeOptions(MODEL, { maxBatchedTokens: 256 }));
    client = servedClient(srv.url);
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  const format = (schema: unknown) => ({ type: 'json_schema' as const, json_schema: { name: 's', schema: schema as Record<string, unknown>, strict: true } });

  it('sampled strings are whole characters: no U+FFFD, maxLength by code points', async () => {
    const validate = ajv.compile(NAMES);
    const got = await Promise.all(
      Array.from({ length: 24 }, (_, seed) =>
        chatText(client, { model: MODEL, messages: [{ role: 'user', content: `name ${seed}` }], max_tokens: 120, temperature: 1.5, seed, response_format: format(NAMES) }, seed % 3 === 0),
      ),
    );
    let nonAscii = 0;
    for (const [seed, g] of got.entries()) {
      expect(g.text, `seed ${seed}`).not.toContain('\uFFFD');
      expect(['stop', 'length']).toContain(g.finish);
      expect(validate(JSON.parse(g.text)), `seed ${seed}: ${g.text} ${JSON.stringify(validate.errors)}`).toBe(true);
      if (/[^\x00-\x7f]/.test(g.text)) nonAscii++;
    }
    expect(nonAscii).toBeGreaterThan(4); // the model did spell characters from byte tokens
  }, 240_000);

  it('tight max_tokens: every reply validates, or max_tokens is refused with a 400', async () => {
    const schemas: unknown[] = [...SWEEP_SCHEMAS, ...MIXED, NAMES];
    const jobs = schemas.flatMap((schema, k) => [6, 12, 20, 30, 40, 56, 72].map((maxTokens, j) => ({ schema, k, maxTokens, seed: k * 10 + j })));
    let cut = 0;
    let refused = 0;
    const results = await Promise.all(
      jobs.map(async (job) => {
        const body = { model: MODEL, messages: [{ role: 'user' as const, content: `item ${job.seed}` }], max_tokens: job.maxTokens, temperature: 1, seed: job.seed, response_format: format(job.schema) };
        return chatText(client, body, job.seed % 2 === 0).then(
          (r) => ({ job, r, err: null }),
          (err: unknown) => ({ job, r: null, err: err as { status?: number; message: string } }),
        );
      }),
    );
    for (const { job, r, err } of results) {
      const where = `schema ${job.k} max_tokens ${job.maxTokens}`;
      if (err !== null) {
        expect(err.status, `${where}: ${err.message}`).toBe(400);
        expect(err.message).toMatch(/max_tokens is \d+, but the shortest output this schema allows takes \d+ tokens/);
        refused++;
        continue;
      }
      const validate = ajv.compile(job.schema as object);
      expect(['stop', 'length'], where).toContain(r!.finish);
      expect(validate(JSON.parse(r!.text)), `${where}: ${r!.text} ${JSON.stringify(validate.errors)}`).toBe(true);
      if (r!.finish === 'length') cut++;
    }
    expect(cut).toBeGreaterThan(5); // replies that budget closing ended (the others stopped on their own)
    expect(refused).toBeLessThan(jobs.length / 2);
  }, 300_000);

  it('a forced tool call cut by max_tokens is still a call whose arguments validate', async () => {
    const parameters = { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['city', 'days'], additionalProperties: false };
    const tools = [{ type: 'function' as const, function: { name: 'get_weather', parameters } }];
    const validate = ajv.compile(parameters);
    let cut = 0;
    for (let seed = 0; seed < 12; seed++) {
      const body = { model: MODEL, messages: [{ role: 'user' as const, content: `weather ${seed}` }], tools, tool_choice: 'required' as const, max_tokens: 40 + (seed % 4) * 6, temperature: 1.2, seed };
      let finish: string | null;
      let args: string;
      if (seed % 2 === 0) {
        const r = await client.chat.completions.create(body);
        finish = r.choices[0]!.finish_reason;
        const call = r.choices[0]!.message.tool_calls?.[0];
        expect(call?.type === 'function' ? call.function.name : null, JSON.stringify(r.choices[0])).toBe('get_weather');
        args = call?.type === 'function' ? call.function.arguments : '';
      } else {
        finish = null;
        args = '';
        for await (const c of await client.chat.completions.create({ ...body, stream: true })) {
          const d = c.choices[0];
          finish = d?.finish_reason ?? finish;
          args += d?.delta.tool_calls?.[0]?.function?.arguments ?? '';
        }
      }
      expect(['tool_calls', 'length']).toContain(finish);
      expect(validate(JSON.parse(args)), `seed ${seed}: ${args}`).toBe(true);
      if (finish === 'length') cut++;
    }
    expect(cut).toBeGreaterThan(0);
  }, 120_000);

  it('rapid_budget_close must be a boolean', async () => {
    const res = await fetch(`${srv.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'x' }], rapid_budget_close: 'no' }),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/rapid_budget_close must be a boolean/);
  });
});
