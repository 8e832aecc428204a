// Fuzz of every numeric (and list) request field over real HTTP on a fixture checkpoint (issue 38):
// extreme values (1e10, 2^31, 2^53, 1e308, 1e999 = Infinity, -0, 0.5 for integers, wrong types,
// megabyte strings, long arrays) sent 8 at a time so they share steps. Seeded and bounded. Every
// answer is a 2xx or a 4xx naming the field; none is a 5xx, none hangs; the model still answers
// exactly as before afterwards.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTextEngine } from '../../src/engine/text-engine.js';
import { openTextModel, type TextModel } from '../../src/engine/text-model.js';
import { createServer, type RapidServer } from '../../src/server/server.js';
import { servedModelFrom } from '../../src/server/served-model.js';
import { nativeAvailable } from '../helpers/addon.js';
import { loadFixture } from '../helpers/fixtures.js';

const MODEL = 'fuzz-model';
/** A short context bounds what a valid huge max_tokens can generate. */
const CONTEXT = 96;
const ROUNDS = 150;
const PER_ROUND = 8;

const NUMBERS = [
  '1e10', '-1e10', '2147483648', '2147483647', '-2147483648', '-2147483649', '9007199254740992', '9007199254740993',
  '9007199254740991', '-9007199254740991', '1e308', '-1e308', '1e999', '-1e999', '-0', '0', '0.5', '1', '-1', '2',
  '5e-324', '1e-30', '1e-6', '0.9999999999', '20', '21', '100', '101', '-2.0000001', '3.4e38', '3.5e38',
];
const WRONG_TYPES = ['"1"', '""', 'true', 'false', 'null', '[]', '{}', '[1]', '{"a":1}', `"${'9'.repeat(20_000)}"`, `[${Array(5000).fill('1').join(',')}]`];
const STOPS = ['"x"', '""', '[""]', `[${Array(17).fill('"s"').join(',')}]`, `"${'a'.repeat(5000)}"`, '[1,2]', `[${Array(10_000).fill('"s"').join(',')}]`, '["a","b"]'];
const PROMPTS = ['[1,2,3]', '[1e10]', '[-1]', '[0.5]', '[1024]', '[1023]', '[]', '[[1,2]]', '[[1],[2]]', '"hi"', `[${Array(40_000).fill(5).join(',')}]`, '[null]', '[[]]'];

const COMMON = ['temperature', 'top_p', 'top_k', 'min_p', 'presence_penalty', 'frequency_penalty', 'repetition_penalty', 'seed', 'max_tokens', 'n', 'logprobs'];
const CHAT = [...COMMON, 'max_completion_tokens', 'top_logprobs', 'stop'];
const COMPLETION = [...COMMON, 'best_of', 'stop', 'prompt'];

function lcg(seed: number) {
  let s = seed >>> 0;
  return (n: number) => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s % n;
  };
}

describe.skipIf(!nativeAvailable())('request field fuzz over HTTP (qwen2-f32)', () => {
  const fx = loadFixture('qwen2-f32');
  let model: TextModel;
  let server: RapidServer;
  let url: string;

  beforeAll(async () => {
    model = openTextModel(fx.dir, { threads: 2, kvCacheBytes: 8 << 20, blockSize: 16 });
    const engine = createTextEngine(model, { contextLength: CONTEXT, maxNumSeqs: 16, maxBatchedTokens: 256 });
    server = createServer({ engine, model: { ...servedModelFrom(model, MODEL), contextLength: CONTEXT } });
    url = (await server.listen(0, '127.0.0.1')).url;
  });
  afterAll(async () => {
    await server?.close(1000);
    model?.close();
  });

  const send = async (path: string, body: string) => {
    const res = await fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body, signal: AbortSignal.timeout(20_000) });
    return { status: res.status, text: await res.text() };
  };
  const greedy = async () => {
    const r = await send('/v1/completions', JSON.stringify({ model: MODEL, prompt: 'river stone', temperature: 0, max_tokens: 8 }));
    return JSON.parse(r.text).choices[0].text as string;
  };

  it(`${ROUNDS * PER_ROUND} fuzzed requests: no 5xx, every 4xx names a fuzzed field, the model answers as before`, async () => {
    const before = await greedy();
    const rnd = lcg(38);
    const counts = new Map<number, number>();
    for (let round = 0; round < ROUNDS; round++) {
      const batch = Array.from({ length: PER_ROUND }, (_, i) => {
        const chat = rnd(2) === 0;
        const fields = chat ? CHAT : COMPLETION;
        const fuzzed = new Map<string, string>();
        for (let k = 0, n = 1 + rnd(2); k < n; k++) {
          const f = fields[rnd(fields.length)]!;
          const pool = f === 'stop' ? STOPS : f === 'prompt' ? PROMPTS : rnd(4) === 0 ? WRONG_TYPES : NUMBERS;
          fuzzed.set(f, pool[rnd(pool.length)]!);
        }
        const base: Record<string, unknown> = chat
          ? { model: MODEL, messages: [{ role: 'user', content: `fuzz ${round} ${i}` }], max_tokens: 2, temperature: 0 }
          : { model: MODEL, prompt: `fuzz ${round} ${i}`, max_tokens: 2 };
        if (rnd(3) === 0) base.stream = true;
        for (const f of fuzzed.keys()) delete base[f];
        const raw = [...fuzzed].map(([f, v]) => `,"${f}":${v}`).join('');
        const body = `${JSON.stringify(base).slice(0, -1)}${raw}}`;
        const what = `${chat ? 'chat' : 'completion'} ${[...fuzzed].map(([f, v]) => `${f}=${v.slice(0, 24)}`).join(' ')}`;
        return send(chat ? '/v1/chat/completions' : '/v1/completions', body).then((r) => ({ ...r, what, fuzzed, stream: base.stream === true }));
      });
      for (const r of await Promise.all(batch)) {
        counts.set(r.status, (counts.get(r.status) ?? 0) + 1);
        expect(r.status, `${r.what}: ${r.text.slice(0, 300)}`).toBeLessThan(500);
        if (r.status >= 400) {
          const err = JSON.parse(r.text).error as { message: string; param: string | null };
          expect(err.message.length, r.what).toBeGreaterThan(0);
          expect([...r.fuzzed.keys()], `${r.what}: ${err.message}`).toContain(err.param);
        } else if (r.stream) {
          expect(r.text, r.what).not.toMatch(/"finish_reason":"error"/);
          expect(r.text.trimEnd().endsWith('data: [DONE]'), r.what).toBe(true);
        } else {
          // One choice, or n of them when a valid n was fuzzed.
          const fuzzedN = r.fuzzed.get('n');
          const n = fuzzedN === undefined || fuzzedN === 'null' ? 1 : Number(fuzzedN);
          expect(JSON.parse(r.text).choices.length, r.what).toBe(n);
        }
      }
    }
    // Both kinds of answer occurred: the fuzz reached the engine, not only the validator.
    expect(counts.get(200) ?? 0).toBeGreaterThan(20);
    expect(counts.get(400) ?? 0).toBeGreaterThan(20);
    expect(await greedy()).toBe(before);
    console.log(`param fuzz: ${[...counts].map(([s, n]) => `${n} x ${s}`).join(', ')}`);
  }, 60_000);
});
