// Gemma 4 images through the real engine (test/fixtures/vlm/gemma4-*: native tower + text lane from one copy
// of the weights): chat messages + PNGs -> imageChatPrompt (input_ids = the HF processor's, image blocks marked
// bidirectional) -> greedy tokens equal transformers' with small prefill chunks around 60-token images, and the
// two image requests plus a text request interleaved and joined mid-stream each give their solo output.
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
  images: { file: string; placeholder_offset: number; tokens: number }[];
  greedy: number[];
}

// A fixture runs when the addon here has both the Gemma 4 text lane and its tower.
function ready(dir: string): boolean {
  if (!existsSync(join(dir, 'reference.json')) || !existsSync(join(dir, 'model.safetensors'))) return false;
  try {
    const m = loadNative().addon.loadModel(dir, { threads: 1, kvCacheBytes: 1 << 20 });
    const ok = m.info().vision?.family === 'gemma4';
    m.close();
    return ok;
  } catch {
    return false;
  }
}

const FIXTURES = ['gemma4-e-f32', 'gemma4-e-q4', 'gemma4-moe-f32', 'gemma4-moe-q4'].filter((f) => ready(join(root, f)));
const greedy = (n: number) => resolveSamplingParams({ temperature: 0, maxTokens: n }, { maxTokens: n });

// Without a Gemma 4 build, one skipped placeholder suite (vitest rejects a file without any).
const SUITES = FIXTURES.length > 0 ? FIXTURES : ['gemma4 (addon without Gemma 4)'];

describe.skipIf(FIXTURES.length === 0).each(SUITES)('%s through the engine', (name) => {
  const dir = join(root, name);
  const refPath = join(dir, 'reference.json');
  const ref = (existsSync(refPath) ? JSON.parse(readFileSync(refPath, 'utf8')) : { cases: [] }) as { cases: RefCase[] };
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

  it.each(['one_image', 'two_images'])('%s: HF input_ids and spans, then transformers\' greedy tokens', async (caseName) => {
    const c = byName(caseName);
    const p = await prompt(c);
    expect(p.promptIds).toEqual(c.input_ids);
    expect(p.multimodal.images.map((i) => [i.offset, i.length])).toEqual(c.images.map((i) => [i.placeholder_offset, i.tokens]));
    expect(p.multimodal.bidirectional).toBe(true); // the fixtures set use_bidirectional_attention "vision"
    const e = engine(16); // prefill budget well below an image's 60+ tokens
    const r = await collect(e.submit({ promptIds: p.promptIds, multimodal: p.multimodal, params: greedy(16) }));
    expect(r.error).toBeUndefined();
    expect(r.tokens).toEqual(c.greedy);
    expect(e.stats().encoderCache.encodes).toBe(c.images.length);
  });

  it('two image requests and a text request, interleaved and joined mid-stream, give their solo tokens', async () => {
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
