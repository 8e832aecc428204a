// A bad row fails only its request (issue 38): over real HTTP on a fixture checkpoint, a request with
// an out-of-range sampling parameter is refused with a 400 naming the field while its concurrent
// neighbours finish with their solo outputs; and a bad parameter that bypasses the request layer
// (engine.submit) fails only its own row at the native boundary; a step that throws after the
// forward wrote every row's KV is rerun without the row that broke it, neighbours unchanged.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { resolveSamplingParams, type SamplingParams } from '../../src/engine/sampling-params.js';
import { createTextEngine } from '../../src/engine/text-engine.js';
import type { NativeModel } from '../../src/native/types.js';
import { nativeAvailable } from '../helpers/addon.js';
import { loadFixture } from '../helpers/fixtures.js';
import { servedClient } from '../helpers/openai-chat.js';
import { post } from './helpers.js';

const PROMPTS = ['river stone cloud', 'market engine yellow', 'quiet seven garden', 'paper north silver', 'cloud river 7', 'engine market 12'];
const MAX_TOKENS = 8;

describe.skipIf(!nativeAvailable())('a bad row fails only its request (qwen2-f32)', () => {
  const fx = loadFixture('qwen2-f32');
  const model = 'fixture-qwen2-f32';
  let srv: RunningServer;
  let client: OpenAI;

  beforeAll(async () => {
    srv = await startServer(fx.dir, { port: 0, threads: 2, kvCacheMemory: 8 << 20, blockSize: 16, maxNumSeqs: 16, servedModelName: model });
    client = servedClient(srv.url);
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  const greedy = (prompt: string) => client.completions.create({ model, prompt, temperature: 0, max_tokens: MAX_TOKENS });

  it('top_k: 1e10 gets a 400 naming top_k; the requests sent with it finish with their solo outputs', async () => {
    const solo: string[] = [];
    for (const p of PROMPTS) solo.push((await greedy(p)).choices[0]!.text);
    const bad = post(srv.url, '/v1/completions', { model, prompt: PROMPTS[0], temperature: 0.7, top_k: 1e10, max_tokens: MAX_TOKENS });
    const others = PROMPTS.map((p) => greedy(p).then((r) => r.choices[0]!.text));
    const b = await bad;
    expect(b.status).toBe(400);
    expect(b.json().error.param).toBe('top_k');
    expect(b.json().error.message).toMatch(/top_k.*2147483647/);
    expect(await Promise.all(others)).toEqual(solo);
    expect(srv.engine.stats().stepFailures).toBe(0);
  });

  it('top_k -1 (vLLM: off) and a top_k above the vocabulary sample exactly as top_k 0', async () => {
    // top_k is vLLM's extension: the openai client passes it through but does not type it.
    const one = (top_k: number) => {
      const body: OpenAI.CompletionCreateParamsNonStreaming & { top_k: number } = { model, prompt: PROMPTS[2]!, temperature: 0.9, seed: 5, top_k, max_tokens: MAX_TOKENS };
      return client.completions.create(body);
    };
    const off = (await one(0)).choices[0]!.text;
    expect((await one(-1)).choices[0]!.text).toBe(off);
    expect((await one(2 ** 31 - 1)).choices[0]!.text).toBe(off);
  });

  it('a bad parameter that bypasses the request layer fails only its row; neighbours equal their solo runs', async () => {
    const m = srv.model;
    const ids = PROMPTS.map((p) => m.encodePrompt({ prompt: p, raw: true }));
    const good = resolveSamplingParams({ temperature: 0, maxTokens: MAX_TOKENS }, { maxTokens: MAX_TOKENS });
    const run = async (promptIds: number[], params: SamplingParams) => {
      const out: number[] = [];
      for await (const ev of srv.engine.generate({ promptIds, params })) if (ev.type === 'done') out.push(...ev.tokenIds);
      return out;
    };
    const solo: number[][] = [];
    for (const p of ids) solo.push(await run(p, good));
    const failuresBefore = srv.engine.stats().stepFailures;
    // Values the request layer refuses, built directly: each must fail its own request only.
    const bads: Partial<SamplingParams>[] = [{ topK: 1e10, temperature: 0.7 }, { temperature: Number.NaN }, { seed: -1 }, { logprobs: 2.5 }, { topP: 7 }];
    for (const over of bads) {
      const bad = run(ids[0]!, { ...good, ...over }).then(
        () => 'finished',
        (err: Error) => err.message,
      );
      const together = await Promise.all(ids.map((p) => run(p, good)));
      expect(await bad).toMatch(/topK|temperature|seed|logprobs|topP/);
      expect(together).toEqual(solo);
    }
    // Each was a row error, not a failed step.
    expect(srv.engine.stats().stepFailures).toBe(failuresBefore);
    expect(srv.engine.health().ok).toBe(true);
  });

  it('a step that throws after its forward is rerun without the breaking row; neighbours equal their solo runs', async () => {
    const m = srv.model;
    const ids = PROMPTS.map((p) => m.encodePrompt({ prompt: p, raw: true }));
    const params = resolveSamplingParams({ temperature: 0, maxTokens: MAX_TOKENS }, { maxTokens: MAX_TOKENS });
    const seeded = resolveSamplingParams({ temperature: 0.8, topP: 0.9, seed: 9, maxTokens: MAX_TOKENS }, { maxTokens: MAX_TOKENS });
    // The real step runs (every row's KV is written, the prefix cache could be fed), then the step throws
    // whenever r2 decodes its third token or later.
    let thrown = 0;
    const native: NativeModel = {
      info: () => m.native.info(),
      step: async (plan) => {
        const res = await m.native.step(plan);
        if (plan.rows.some((r) => r.requestId === 'r2' && r.contextLen >= ids[2]!.length + 2)) {
          thrown++;
          throw new Error('exploded after the forward');
        }
        return res;
      },
      encodeImage: (img) => m.native.encodeImage(img),
      close: () => undefined,
    };
    const engine = createTextEngine({ ...m, native }, { maxNumSeqs: 16 });
    const run = async (id: string, promptIds: number[], p: SamplingParams) => {
      const out: number[] = [];
      for await (const ev of engine.generate({ id, promptIds, params: p })) if (ev.type === 'done') out.push(...ev.tokenIds);
      return out;
    };
    const paramsOf = (i: number) => (i % 2 === 1 ? seeded : params);
    const solo: number[][] = [];
    for (const [i, p] of ids.entries()) if (i !== 2) solo[i] = await run(`solo${i}`, p, paramsOf(i));
    const all = ids.map((p, i) =>
      run(`r${i}`, p, paramsOf(i)).then(
        (t) => t,
        (err: Error) => err.message,
      ),
    );
    const got = await Promise.all(all);
    expect(got[2]).toMatch(/exploded after the forward/);
    for (const [i, t] of got.entries()) if (i !== 2) expect(t, `r${i}`).toEqual(solo[i]);
    expect(thrown).toBeGreaterThanOrEqual(2); // the whole step, then the reruns that still held r2
    // The prefix cache holds nothing wrong: a cached rerun of a neighbour equals its cold run.
    expect(await run('again0', ids[0]!, params)).toEqual(solo[0]);
    expect(engine.stats().kv.usedBlocks).toBe(0);
  });
});
