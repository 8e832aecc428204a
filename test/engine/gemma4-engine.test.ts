// Gemma 4 images through the real engine (test/fixtures/vlm/gemma4-*: native tower + text lane from one copy
// of the weights): chat messages + PNGs -> imageChatPrompt (input_ids = the HF processor's, image blocks marked
// bidirectional) -> greedy tokens equal transformers' with small prefill chunks around 60-token images, and the
// two image requests plus a text request interleaved and joined mid-stream each give their solo output.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { casePrompt, expectEngineGreedy, joinMidStream, useVlmEngine, VLM_FIXTURES as root, vlmCases, vlmFixtureReady } from '../helpers/vlm-engine.js';

// A fixture runs when the addon here has both the Gemma 4 text lane and its tower.
const FIXTURES = ['gemma4-e-f32', 'gemma4-e-q4', 'gemma4-moe-f32', 'gemma4-moe-q4'].filter((f) => vlmFixtureReady(join(root, f), 'gemma4'));

// Without a Gemma 4 build, one skipped placeholder suite (vitest rejects a file without any).
const SUITES = FIXTURES.length > 0 ? FIXTURES : ['gemma4 (addon without Gemma 4)'];

describe.skipIf(FIXTURES.length === 0).each(SUITES)('%s through the engine', (name) => {
  const dir = join(root, name);
  const byName = vlmCases(dir);
  const { model, engine } = useVlmEngine(dir);

  it.each(['one_image', 'two_images'])('%s: HF input_ids and spans, then transformers\' greedy tokens', async (caseName) => {
    const c = byName(caseName);
    const p = await casePrompt(model(), c);
    expect(p.promptIds).toEqual(c.input_ids);
    expect(p.multimodal.images.map((i) => [i.offset, i.length])).toEqual(c.images.map((i) => [i.placeholder_offset, i.tokens]));
    expect(p.multimodal.bidirectional).toBe(true); // the fixtures set use_bidirectional_attention "vision"
    await expectEngineGreedy(engine(16), p, c); // prefill budget well below an image's 60+ tokens
  });

  it('two image requests and a text request, interleaved and joined mid-stream, give their solo tokens', async () => {
    const one = await casePrompt(model(), byName('one_image'));
    const two = await casePrompt(model(), byName('two_images'));
    const got = await joinMidStream(engine(24), [
      { id: 'two', ...two },
      { id: 'text', promptIds: byName('text').input_ids },
      { id: 'one', ...one },
    ]);
    expect(got).toEqual([byName('two_images').greedy, byName('text').greedy, byName('one_image').greedy]);
  });
});
