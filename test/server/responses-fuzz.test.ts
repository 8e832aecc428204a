// Seeded malformed /v1/responses bodies (a valid request with one value replaced by a wrong-typed
// or odd one) over real HTTP: every answer is a 200 or a 4xx naming a Responses field (never a
// chat one, never a 5xx), streams end, and the server answers normally afterwards.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { post } from './helpers.js';
import { startScriptedServer, type ScriptedServer } from './responses-helpers.js';

const BASE = {
  model: 'fake-model',
  instructions: 'Be brief.',
  input: [
    { role: 'user', content: [{ type: 'input_text', text: 'weather' }] },
    { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Oslo"}' },
    { type: 'function_call_output', call_id: 'call_1', output: '18C' },
    { role: 'user', content: 'hello' },
  ],
  tools: [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } }],
  tool_choice: 'auto',
  text: { format: { type: 'text' } },
  max_output_tokens: 16,
  temperature: 0.5,
  top_p: 0.9,
  parallel_tool_calls: true,
  metadata: { a: 'b' },
  reasoning: { effort: 'low' },
  store: false,
};

const ODD: unknown[] = [null, 0, -1, 1.5, 1e308, '', 'x', true, [], {}, [1], { type: 'nope' }, [{}], [{ type: 'input_text' }], 'required', { type: 'function' }];

/** Every path to a value inside `v`. */
function paths(v: unknown, at: (string | number)[] = []): (string | number)[][] {
  const out: (string | number)[][] = at.length > 0 ? [at] : [];
  if (Array.isArray(v)) v.forEach((x, i) => out.push(...paths(x, [...at, i])));
  else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) out.push(...paths(x, [...at, k]));
  return out;
}

function withValue(base: unknown, path: (string | number)[], value: unknown): unknown {
  const copy = structuredClone(base) as Record<string | number, unknown>;
  let o = copy;
  for (const k of path.slice(0, -1)) o = o[k] as Record<string | number, unknown>;
  o[path.at(-1)!] = value;
  return copy;
}

/** A small deterministic PRNG (mulberry32). */
function rng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

let s: ScriptedServer;
beforeAll(async () => {
  s = await startScriptedServer({ hello: 'Hi.', weather: 'x' });
});
afterAll(async () => {
  await s.server.close(100);
});

describe('malformed /v1/responses bodies', () => {
  it('300 seeded mutations: 200 or a 4xx naming a Responses field; streams end', async () => {
    const rand = rng(37);
    const all = paths(BASE);
    const bodies = Array.from({ length: 300 }, (_, i) => {
      const path = all[Math.floor(rand() * all.length)]!;
      const body = withValue(BASE, path, ODD[Math.floor(rand() * ODD.length)]) as Record<string, unknown>;
      return { body: i % 3 === 0 ? { ...body, stream: true } : body, path: path.join('.') };
    });
    for (let i = 0; i < bodies.length; i += 8) {
      await Promise.all(
        bodies.slice(i, i + 8).map(async ({ body, path }) => {
          const r = await post(s.url, '/v1/responses', body);
          const what = `${path} = ${JSON.stringify(body).slice(0, 300)}: ${r.status} ${r.text.slice(0, 300)}`;
          expect([200, 400, 404], what).toContain(r.status);
          if (r.status !== 200) {
            const e = r.json().error;
            expect(e.message, what).toBeTruthy();
            expect(e.param ?? '', what).not.toMatch(/messages|response_format|max_completion_tokens|\.function\./);
            expect(e.message, what).not.toMatch(/messages\[|response_format|max_completion_tokens/);
          } else if (body.stream === true) {
            expect(r.text, what).toMatch(/event: response\.(completed|incomplete)\n/);
          }
        }),
      );
    }
    const ok = await post(s.url, '/v1/responses', { input: 'hello' });
    expect(ok.json().output_text).toBe('Hi.');
  }, 120_000);
});
