// The engine and server on real fixture checkpoints through the native addon: transformers'
// greedy tokens through the batching engine, batch invariance of 32 concurrent requests over HTTP
// with the openai client, seeded sampling invariance, prefix-cache hit == cold run.
import OpenAI from 'openai';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { createTextEngine } from '../../src/engine/text-engine.js';
import { nativeAvailable } from '../helpers/addon.js';
import { resolveSamplingParams } from '../../src/engine/sampling-params.js';
import { loadFixture } from '../helpers/fixtures.js';
import { servedClient } from '../helpers/openai-chat.js';
import { sleep } from '../engine/helpers.js';

// gemma3's native step is slower at batch > 1: fewer tokens keep the suite short.
const CASES: { name: string; precision: 'exact' | 'fast'; tokens: number }[] = [
  { name: 'qwen2-f32', precision: 'fast', tokens: 16 },
  { name: 'gemma3-q4', precision: 'fast', tokens: 8 },
  { name: 'qwen2-q4', precision: 'fast', tokens: 8 },
];

const WORDS = ['river', 'stone', 'cloud', 'market', 'engine', 'yellow', 'quiet', 'seven', 'garden', 'paper', 'north', 'silver'];
const prompts = Array.from({ length: 32 }, (_, i) => `${WORDS[i % 12]} ${WORDS[(i * 5 + 3) % 12]} ${i} ${WORDS[(i * 7 + 1) % 12]}`.repeat(1 + (i % 4)));

describe.skipIf(!nativeAvailable()).each(CASES)('$name ($precision) served with continuous batching', ({ name, precision, tokens: maxTokens }) => {
  const fx = loadFixture(name);
  let srv: RunningServer;
  let client: OpenAI;
  const model = `fixture-${name}`;

  beforeAll(async () => {
    srv = await startServer(fx.dir, {
      port: 0,
      threads: 2,
      precision,
      kvCacheMemory: 24 << 20,
      blockSize: 16,
      maxNumSeqs: 32,
      maxBatchedTokens: 256,
      servedModelName: model,
    });
    client = servedClient(srv.url);
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it("reproduces transformers' greedy tokens with the reference prompts batched together", async () => {
    // Approximate int8 activations may leave transformers' path on near-ties; compare exact runs only.
    if (precision === 'fast' && !name.endsWith('f32')) return;
    const params = resolveSamplingParams({ temperature: 0, maxTokens: 32 }, { maxTokens: 32 });
    const runs = fx.ref.prompts.map(async (p, i) => {
      await sleep(i * 3);
      let tokens: number[] = [];
      for await (const ev of srv.engine.generate({ promptIds: p.ids, params })) if (ev.type === 'done') tokens = ev.tokenIds;
      return tokens;
    });
    const outs = await Promise.all(runs);
    outs.forEach((tokens, i) => {
      const ref = fx.ref.prompts[i]!.greedy;
      // The engine stops at an eos token; transformers' reference does not.
      expect(tokens).toEqual(ref.slice(0, tokens.length));
      expect(tokens.length === ref.length || srv.model.text.stopTokenIds.has(tokens[tokens.length - 1]!)).toBe(true);
    });
  });

  it('32 concurrent greedy requests equal their solo outputs (HTTP, openai client)', async () => {
    const one = (prompt: string) => client.completions.create({ model, prompt, temperature: 0, max_tokens: maxTokens, logprobs: 0 });
    const solo: OpenAI.Completions.Completion[] = [];
    for (const p of prompts) solo.push(await one(p));
    // The native step runs off the event loop: the loop stays responsive while the batch computes.
    const lag = monitorEventLoopDelay({ resolution: 5 });
    lag.enable();
    const together = await Promise.all(prompts.map(async (p, i) => (await sleep((i * 7) % 20), one(p))));
    lag.disable();
    expect(lag.max / 1e6).toBeLessThan(1000);
    together.forEach((r, i) => {
      expect(r.choices[0]!.text).toBe(solo[i]!.choices[0]!.text);
      expect(r.choices[0]!.logprobs!.tokens).toEqual(solo[i]!.choices[0]!.logprobs!.tokens);
      expect(r.usage!.completion_tokens).toBe(solo[i]!.usage!.completion_tokens);
    });
    // Streamed chat requests joining at random times, against their solo runs.
    const chat = (p: string) =>
      client.chat.completions.create({ model, messages: [{ role: 'user', content: p }], temperature: 0, max_tokens: maxTokens, stream: true }).then(async (s) => {
        let out = '';
        for await (const c of s) out += c.choices[0]?.delta.content ?? '';
        return out;
      });
    const chatSolo: string[] = [];
    for (const p of prompts.slice(0, 8)) chatSolo.push(await chat(p));
    const chatTogether = await Promise.all(prompts.slice(0, 8).map(async (p, i) => (await sleep((i * 11) % 25), chat(p))));
    expect(chatTogether).toEqual(chatSolo);
  });

  it('seeded sampling does not depend on the batch', async () => {
    const one = (prompt: string, seed: number) => client.completions.create({ model, prompt, temperature: 0.9, top_p: 0.95, seed, max_tokens: maxTokens });
    const solo: string[] = [];
    for (let i = 0; i < 8; i++) solo.push((await one(prompts[i]!, 100 + i)).choices[0]!.text);
    const crowd = await Promise.all(prompts.slice(0, 8).map(async (p, i) => (await sleep((i * 5) % 13), one(p, 100 + i))));
    expect(crowd.map((r) => r.choices[0]!.text)).toEqual(solo);
  });

  it('a prefix-cache hit gives the same output as a cold run', async () => {
    const prompt = `${WORDS.join(' ')} ${name} unique prefix `.repeat(4);
    const cold = await client.completions.create({ model, prompt, temperature: 0, max_tokens: 16 });
    const warm = await client.completions.create({ model, prompt, temperature: 0, max_tokens: 16 });
    expect((cold.usage as any).prompt_tokens_details.cached_tokens).toBe(0);
    expect((warm.usage as any).prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(16);
    expect(warm.choices[0]!.text).toBe(cold.choices[0]!.text);
    const st = srv.engine.stats();
    expect(st.running + st.waiting).toBe(0);
    expect(st.kv.usedBlocks).toBe(0);
  });

  it('preemption under a small KV pool recomputes without changing outputs', async () => {
    // A second engine over the same native model, restricted to 10 blocks (the server's is idle).
    const m = srv.model;
    const small = createTextEngine(m, { numBlocks: 10, maxBatchedTokens: 64 });
    const params = resolveSamplingParams({ temperature: 0, maxTokens: maxTokens }, { maxTokens: 16 });
    const ids = prompts.slice(0, 8).map((p) => m.encodePrompt({ prompt: p, raw: true }));
    const run = async (promptIds: number[]) => {
      for await (const ev of small.generate({ promptIds, params })) if (ev.type === 'done') return ev.tokenIds;
      return [];
    };
    const solo: number[][] = [];
    for (const p of ids) solo.push(await run(p));
    const together = await Promise.all(ids.map(run));
    expect(together).toEqual(solo);
    expect(small.stats().preemptions).toBeGreaterThan(0);
    expect(small.stats().kv.usedBlocks).toBe(0);
  });

  it('an injected step fault fails only its request; the model keeps serving correctly', async () => {
    const m = srv.model;
    let armed = true;
    const faulty = createTextEngine(m, {
      faults: {
        step: (plan) => {
          if (armed && plan.rows.some((r) => r.requestId === 'doomed')) {
            armed = false;
            throw new Error('injected');
          }
        },
      },
    });
    const params = resolveSamplingParams({ temperature: 0, maxTokens }, { maxTokens: 16 });
    const promptIds = m.encodePrompt({ prompt: prompts[5]!, raw: true });
    const run = async (id: string) => {
      const out: number[] = [];
      for await (const ev of faulty.generate({ id, promptIds, params })) if (ev.type === 'done') out.push(...ev.tokenIds);
      return out;
    };
    await expect(run('doomed')).rejects.toThrow(/injected/);
    // A row the native side refuses (block id out of range) comes back as that row's error.
    const bad = await m.native.step({ rows: [{ requestId: 'bad', tokens: Int32Array.of(1), positions: Int32Array.of(0), blockTable: Int32Array.of(1 << 30), contextLen: 0 }] });
    expect(bad.rows[0]!.error).toMatch(/outside the KV pool/);
    const a = await run('fine-1');
    const b = await run('fine-2');
    expect(a.length).toBeGreaterThan(0);
    expect(b).toEqual(a);
    expect(faulty.health().ok).toBe(true);
  });
});
