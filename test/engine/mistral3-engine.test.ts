// Mistral 3 images through the real engine (VisionProcessor prompt, encoder cache, chunked prefill): the image
// span holds [IMG_BREAK]/[IMG_END] text tokens between its [IMG] rows, is never split across chunks, and takes
// embeddings only at the [IMG] offsets. Greedy tokens equal transformers', solo and with neighbours joining.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { casePrompt, expectEngineGreedy, joinMidStream, useVlmEngine, VLM_FIXTURES as root, vlmCases, vlmFixtureReady } from '../helpers/vlm-engine.js';

const FIXTURES = ['mistral3-f32', 'mistral3-q4'].filter((f) => vlmFixtureReady(join(root, f), 'mistral3'));

describe.skipIf(FIXTURES.length === 0).each(FIXTURES)('%s through the engine', (name) => {
  const dir = join(root, name);
  const byName = vlmCases(dir);
  const { model, engine } = useVlmEngine(dir);

  it.each(['one_image', 'two_images'])('%s: spans cover the row breaks, embeddings only at [IMG]', async (caseName) => {
    const c = byName(caseName);
    const p = await casePrompt(model(), c);
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
    const p = await casePrompt(model(), c);
    await expectEngineGreedy(engine(budget), p, c);
  });

  it('two image requests of different sizes and a text request, joined mid-stream, each give their solo tokens', async () => {
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
