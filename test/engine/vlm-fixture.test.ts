// Images through the real engine on the tiny VLM fixtures (native vision tower + text lane, one copy
// of the weights): transformers' greedy tokens for prompts with one and two images and for text only
// (which never runs the encoder), and mRoPE locality: two image requests of different image sizes
// and a text request, interleaved and joined mid-stream, each give exactly their solo output.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { ImagePrompt } from '../../src/engine/image-prompt.js';
import type { MultimodalInput, RequestImage } from '../../src/engine/multimodal.js';
import type { TextModel } from '../../src/engine/text-model.js';
import { caseImages, casePrompt, expectEngineGreedy, greedyParams as greedy, joinMidStream, useVlmEngine, VLM_FIXTURES as root, vlmCases, vlmFixtureReady, type VlmRefCase } from '../helpers/vlm-engine.js';
import { collect } from './helpers.js';

const FIXTURES = ['qwen2_5_vl-f32', 'qwen3_vl-f32', 'gemma3-f32', 'qwen2_5_vl-q4', 'qwen2_5_vl-q8v', 'qwen3_vl-q4', 'gemma3-q4'].filter((f) => vlmFixtureReady(join(root, f)));

/** The reference's own prompt (input_ids, spans, positions) with rapid's preprocessed images. */
async function referencePrompt(model: TextModel, c: VlmRefCase): Promise<ImagePrompt> {
  const prepared = await caseImages(model, c);
  const images: RequestImage[] = c.images.map((im, i) => ({ hash: prepared[i]!.hash, input: prepared[i]!.input, offset: im.placeholder_offset, length: im.tokens }));
  const multimodal: MultimodalInput = { images };
  if (c.position_ids) {
    multimodal.positions = Int32Array.from(c.position_ids.flat());
    multimodal.ropeDelta = c.rope_delta;
  } else multimodal.bidirectional = true; // Gemma 3
  return { promptIds: c.input_ids, multimodal };
}

describe.skipIf(FIXTURES.length === 0).each(FIXTURES)('%s through the engine', (name) => {
  const dir = join(root, name);
  const byName = vlmCases(dir);
  const { model, engine } = useVlmEngine(dir);

  it.each(['one_image', 'two_images'])('%s: the prompt, spans and positions equal the HF processor\'s', async (caseName) => {
    const c = byName(caseName);
    const p = await casePrompt(model(), c);
    expect(p.promptIds).toEqual(c.input_ids);
    expect(p.multimodal.images.map((i) => [i.offset, i.length])).toEqual(c.images.map((i) => [i.placeholder_offset, i.tokens]));
    if (c.position_ids) {
      expect(Array.from(p.multimodal.positions!)).toEqual(c.position_ids.flat());
      expect(p.multimodal.ropeDelta).toBe(c.rope_delta);
    }
  });

  it.each(['one_image', 'two_images'])('%s: greedy tokens through the engine equal transformers', async (caseName) => {
    const c = byName(caseName);
    const p = await referencePrompt(model(), c);
    await expectEngineGreedy(engine(16), p, c); // prefill in chunks around the image spans
  });

  it('text only on the VLM: no encoder call, transformers\' text-only greedy tokens', async () => {
    const c = byName('text');
    const e = engine(512);
    const r = await collect(e.submit({ promptIds: c.input_ids, params: greedy(16) }));
    expect(r.tokens).toEqual(c.greedy);
    expect(e.stats().encoderCache).toMatchObject({ encodes: 0, hits: 0, misses: 0 });
  });

  it('mRoPE locality: two image requests of different sizes and a text request, interleaved, joined mid-stream', async () => {
    const one = await referencePrompt(model(), byName('one_image'));
    const two = await referencePrompt(model(), byName('two_images'));
    const text = byName('text').input_ids;
    const solo = async (p: ImagePrompt | number[]) => {
      const e = engine(12);
      const r = Array.isArray(p) ? e.submit({ promptIds: p, params: greedy(16) }) : e.submit({ promptIds: p.promptIds, multimodal: p.multimodal, params: greedy(16) });
      return (await collect(r)).tokens;
    };
    const want = [await solo(two), await solo(text), await solo(one)];
    // Join the others while the first is still in its prefill / early decode.
    const got = await joinMidStream(engine(12), [
      { id: 'two', ...two },
      { id: 'text', promptIds: text },
      { id: 'one', ...one },
    ]);
    expect(got).toEqual(want);
    expect(want).toEqual([byName('two_images').greedy, byName('text').greedy, byName('one_image').greedy]);
  });
});
