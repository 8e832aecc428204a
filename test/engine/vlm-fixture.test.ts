// Images through the real engine on the tiny VLM fixtures (native vision tower + text lane, one copy
// of the weights): transformers' greedy tokens for prompts with one and two images and for text only
// (which never runs the encoder), and mRoPE locality: two image requests of different image sizes
// and a text request, interleaved and joined mid-stream, each give exactly their solo output.
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine/engine.js';
import { imageChatPrompt, type ImagePrompt } from '../../src/engine/image-prompt.js';
import type { MultimodalInput, RequestImage } from '../../src/engine/multimodal.js';
import { resolveSamplingParams } from '../../src/engine/sampling-params.js';
import { createTextEngine } from '../../src/engine/text-engine.js';
import { openTextModel, type TextModel } from '../../src/engine/text-model.js';
import { loadNative } from '../../src/native/binding.js';
import type { ChatMessage } from '../../src/template/chat-template.js';
import { decodeImage } from '../../src/vision/index.js';
import { collect } from './helpers.js';

const root = resolve(import.meta.dirname, '..', 'fixtures', 'vlm');

interface RefCase {
  name: string;
  hf_messages: ChatMessage[];
  input_ids: number[];
  images: { file: string; grid: number[]; placeholder_offset: number; tokens: number }[];
  position_ids?: number[][];
  rope_delta?: number;
  greedy: number[];
}

function vlmReady(dir: string): boolean {
  if (!existsSync(join(dir, 'reference.json')) || !existsSync(join(dir, 'model.safetensors'))) return false;
  try {
    const m = loadNative().addon.loadModel(dir, { threads: 1, kvCacheBytes: 1 << 20 });
    const ok = m.info().vision !== undefined;
    m.close();
    return ok;
  } catch {
    return false;
  }
}

const FIXTURES = ['qwen2_5_vl-f32', 'qwen3_vl-f32', 'gemma3-f32', 'qwen2_5_vl-q4', 'qwen2_5_vl-q8v', 'qwen3_vl-q4', 'gemma3-q4'].filter((f) => vlmReady(join(root, f)));

export async function casePrompt(model: TextModel, c: RefCase): Promise<ImagePrompt> {
  const images = [];
  for (const im of c.images) images.push(model.vision!.prepareImage(await decodeImage(readFileSync(join(root, 'images', im.file)))));
  return imageChatPrompt(model, c.hf_messages, images);
}

/** The reference's own prompt (input_ids, spans, positions) with rapid's preprocessed images. */
async function referencePrompt(model: TextModel, c: RefCase): Promise<ImagePrompt> {
  const images: RequestImage[] = [];
  for (const im of c.images) {
    const prepared = model.vision!.prepareImage(await decodeImage(readFileSync(join(root, 'images', im.file))));
    images.push({ hash: prepared.hash, input: prepared.input, offset: im.placeholder_offset, length: im.tokens });
  }
  const multimodal: MultimodalInput = { images };
  if (c.position_ids) {
    multimodal.positions = Int32Array.from(c.position_ids.flat());
    multimodal.ropeDelta = c.rope_delta;
  } else multimodal.bidirectional = true; // Gemma 3
  return { promptIds: c.input_ids, multimodal };
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

  beforeAll(() => {
    model = openTextModel(dir, { precision: 'exact', kvCacheBytes: 16 << 20 });
  });
  afterAll(async () => {
    for (const e of engines) await e.shutdown(0);
    model?.close();
  });

  it.each(['one_image', 'two_images'])('%s: the prompt, spans and positions equal the HF processor\'s', async (caseName) => {
    const c = byName(caseName);
    const p = await casePrompt(model, c);
    expect(p.promptIds).toEqual(c.input_ids);
    expect(p.multimodal.images.map((i) => [i.offset, i.length])).toEqual(c.images.map((i) => [i.placeholder_offset, i.tokens]));
    if (c.position_ids) {
      expect(Array.from(p.multimodal.positions!)).toEqual(c.position_ids.flat());
      expect(p.multimodal.ropeDelta).toBe(c.rope_delta);
    }
  });

  it.each(['one_image', 'two_images'])('%s: greedy tokens through the engine equal transformers', async (caseName) => {
    const c = byName(caseName);
    const p = await referencePrompt(model, c);
    const e = engine(16); // prefill in chunks around the image spans
    const r = await collect(e.submit({ promptIds: p.promptIds, multimodal: p.multimodal, params: greedy(16) }));
    expect(r.error).toBeUndefined();
    expect(r.tokens).toEqual(c.greedy);
    expect(e.stats().encoderCache.encodes).toBe(c.images.length);
  });

  it('text only on the VLM: no encoder call, transformers\' text-only greedy tokens', async () => {
    const c = byName('text');
    const e = engine(512);
    const r = await collect(e.submit({ promptIds: c.input_ids, params: greedy(16) }));
    expect(r.tokens).toEqual(c.greedy);
    expect(e.stats().encoderCache).toMatchObject({ encodes: 0, hits: 0, misses: 0 });
  });

  it('mRoPE locality: two image requests of different sizes and a text request, interleaved, joined mid-stream', async () => {
    const one = await referencePrompt(model, byName('one_image'));
    const two = await referencePrompt(model, byName('two_images'));
    const text = byName('text').input_ids;
    const solo = async (p: ImagePrompt | number[]) => {
      const e = engine(12);
      const r = Array.isArray(p) ? e.submit({ promptIds: p, params: greedy(16) }) : e.submit({ promptIds: p.promptIds, multimodal: p.multimodal, params: greedy(16) });
      return (await collect(r)).tokens;
    };
    const want = [await solo(two), await solo(text), await solo(one)];
    const e = engine(12);
    const ca = collect(e.submit({ promptIds: two.promptIds, multimodal: two.multimodal, params: greedy(16), id: 'two' }));
    // Join the others while the first is still in its prefill / early decode.
    while (e.stats().steps < 2) await new Promise((r) => setTimeout(r, 1));
    const ct = collect(e.submit({ promptIds: text, params: greedy(16), id: 'text' }));
    while (e.stats().steps < 4) await new Promise((r) => setTimeout(r, 1));
    const cb = collect(e.submit({ promptIds: one.promptIds, multimodal: one.multimodal, params: greedy(16), id: 'one' }));
    const got = (await Promise.all([ca, ct, cb])).map((r) => r.tokens);
    expect(got).toEqual(want);
    expect(want).toEqual([byName('two_images').greedy, byName('text').greedy, byName('one_image').greedy]);
  });
});
