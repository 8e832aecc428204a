// Qwen3-VL-MoE through the real engine (tiny fixture, q4 = MLX layout with 4-bit experts and 8-bit router
// gates): rapid's own chat template + image processing reproduce the HF processor's prompt, spans and
// mRoPE positions; greedy tokens equal transformers' for one and two images and for text only (no
// encoder call); image and text requests joined mid-stream each give their solo output.
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine/engine.js';
import { imageChatPrompt } from '../../src/engine/image-prompt.js';
import { resolveSamplingParams } from '../../src/engine/sampling-params.js';
import { createTextEngine } from '../../src/engine/text-engine.js';
import { openTextModel, type TextModel } from '../../src/engine/text-model.js';
import type { ChatMessage } from '../../src/template/chat-template.js';
import { decodeImage } from '../../src/vision/index.js';
import { collect } from './helpers.js';

const root = resolve(import.meta.dirname, '..', 'fixtures', 'vlm');
const FIXTURES = ['qwen3_vl_moe-f32', 'qwen3_vl_moe-q4'].filter((f) => existsSync(join(root, f, 'reference.json')));

interface RefCase {
  name: string;
  hf_messages: ChatMessage[];
  input_ids: number[];
  images: { file: string; placeholder_offset: number; tokens: number }[];
  position_ids?: number[][];
  rope_delta?: number;
  greedy: number[];
}

const greedy = (n: number) => resolveSamplingParams({ temperature: 0, maxTokens: n }, { maxTokens: n });

describe.skipIf(FIXTURES.length === 0).each(FIXTURES)('%s through the engine', (name) => {
  const dir = join(root, name);
  const ref = JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8')) as { cases: RefCase[] };
  const byName = (n: string) => ref.cases.find((c) => c.name === n)!;
  let model: TextModel;
  const engines: Engine[] = [];
  const engine = (maxBatchedTokens: number) => {
    const e = createTextEngine(model, { maxBatchedTokens, maxNumSeqs: 8 });
    engines.push(e);
    return e;
  };
  const prompt = async (c: RefCase) => {
    const images = [];
    for (const im of c.images) images.push(model.vision!.prepareImage(await decodeImage(readFileSync(join(root, 'images', im.file)))));
    return imageChatPrompt(model, c.hf_messages, images);
  };

  beforeAll(() => {
    model = openTextModel(dir, { precision: 'exact', kvCacheBytes: 16 << 20 });
  });
  afterAll(async () => {
    for (const e of engines) await e.shutdown(0);
    model?.close();
  });

  it.each(['one_image', 'two_images'])('%s: prompt, spans, positions and greedy tokens equal transformers', async (caseName) => {
    const c = byName(caseName);
    const p = await prompt(c);
    expect(p.promptIds).toEqual(c.input_ids);
    expect(p.multimodal.images.map((i) => [i.offset, i.length])).toEqual(c.images.map((i) => [i.placeholder_offset, i.tokens]));
    expect(Array.from(p.multimodal.positions!)).toEqual(c.position_ids!.flat());
    expect(p.multimodal.ropeDelta).toBe(c.rope_delta);
    const e = engine(16);
    const r = await collect(e.submit({ promptIds: p.promptIds, multimodal: p.multimodal, params: greedy(16) }));
    expect(r.error).toBeUndefined();
    expect(r.tokens).toEqual(c.greedy);
    expect(e.stats().encoderCache.encodes).toBe(c.images.length);
  });

  it('text only: no encoder call; image and text requests joined mid-stream give their solo tokens', async () => {
    const text = byName('text');
    const e = engine(12);
    const t = await collect(e.submit({ promptIds: text.input_ids, params: greedy(16) }));
    expect(t.tokens).toEqual(text.greedy);
    expect(e.stats().encoderCache).toMatchObject({ encodes: 0, hits: 0, misses: 0 });
    const two = await prompt(byName('two_images'));
    const one = await prompt(byName('one_image'));
    const ca = collect(e.submit({ promptIds: two.promptIds, multimodal: two.multimodal, params: greedy(16), id: 'two' }));
    const s0 = e.stats().steps;
    while (e.stats().steps < s0 + 2) await new Promise((r) => setTimeout(r, 1));
    const ct = collect(e.submit({ promptIds: text.input_ids, params: greedy(16), id: 'text' }));
    while (e.stats().steps < s0 + 4) await new Promise((r) => setTimeout(r, 1));
    const cb = collect(e.submit({ promptIds: one.promptIds, multimodal: one.multimodal, params: greedy(16), id: 'one' }));
    const got = (await Promise.all([ca, ct, cb])).map((r) => r.tokens);
    expect(got).toEqual([byName('two_images').greedy, text.greedy, byName('one_image').greedy]);
  });
});
