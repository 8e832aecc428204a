// Mistral 3 images through the real engine (VisionProcessor prompt, encoder cache, chunked prefill): the image
// span holds [IMG_BREAK]/[IMG_END] text tokens between its [IMG] rows, is never split across chunks, and takes
// embeddings only at the [IMG] offsets. Greedy tokens equal transformers', solo and with neighbours joining.
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine/engine.js';
import { imageChatPrompt, type ImagePrompt } from '../../src/engine/image-prompt.js';
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
  images: { file: string; placeholder_offset: number; span_length: number; tokens: number }[];
  greedy: number[];
}

function ready(dir: string): boolean {
  if (!existsSync(join(dir, 'model.safetensors'))) return false;
  try {
    const m = loadNative().addon.loadModel(dir, { threads: 1, kvCacheBytes: 1 << 20 });
    const ok = m.info().vision?.family === 'mistral3';
    m.close();
    return ok;
  } catch {
    return false;
  }
}

const FIXTURES = ['mistral3-f32', 'mistral3-q4'].filter((f) => ready(join(root, f)));
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
  const prompt = async (c: RefCase): Promise<ImagePrompt> => {
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

  it.each(['one_image', 'two_images'])('%s: spans cover the row breaks, embeddings only at [IMG]', async (caseName) => {
    const c = byName(caseName);
    const p = await prompt(c);
    expect(p.promptIds).toEqual(c.input_ids);
    expect(p.multimodal.positions).toBeUndefined();
    expect(p.multimodal.images.map((i) => [i.offset, i.length, i.embedAt?.length])).toEqual(
      c.images.map((i) => [i.placeholder_offset, i.span_length, i.tokens]),
    );
  });

  it.each([
    ['one_image', 16],
    ['two_images', 16],
    ['two_images', 512],
  ] as const)('%s (chunk budget %i): greedy tokens equal transformers', async (caseName, budget) => {
    const c = byName(caseName);
    const p = await prompt(c);
    const e = engine(budget);
    const r = await collect(e.submit({ promptIds: p.promptIds, multimodal: p.multimodal, params: greedy(16) }));
    expect(r.error).toBeUndefined();
    expect(r.tokens).toEqual(c.greedy);
    expect(e.stats().encoderCache.encodes).toBe(c.images.length);
  });

  it('two image requests of different sizes and a text request, joined mid-stream, each give their solo tokens', async () => {
    const one = await prompt(byName('one_image'));
    const two = await prompt(byName('two_images'));
    const text = byName('text').input_ids;
    const e = engine(24);
    const ca = collect(e.submit({ promptIds: two.promptIds, multimodal: two.multimodal, params: greedy(16), id: 'two' }));
    while (e.stats().steps < 2) await new Promise((r) => setTimeout(r, 1));
    const ct = collect(e.submit({ promptIds: text, params: greedy(16), id: 'text' }));
    while (e.stats().steps < 4) await new Promise((r) => setTimeout(r, 1));
    const cb = collect(e.submit({ promptIds: one.promptIds, multimodal: one.multimodal, params: greedy(16), id: 'one' }));
    const got = (await Promise.all([ca, ct, cb])).map((r) => r.tokens);
    expect(got).toEqual([byName('two_images').greedy, byName('text').greedy, byName('one_image').greedy]);
  });
});
