// Qwen3-VL-MoE through the real engine (tiny fixture, q4 = MLX layout with 4-bit experts and 8-bit router
// gates): rapid's own chat template + image processing reproduce the HF processor's prompt, spans and
// mRoPE positions; greedy tokens equal transformers' for one and two images and for text only (no
// encoder call); image and text requests joined mid-stream each give their solo output.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { casePrompt, expectEngineGreedy, greedyParams as greedy, joinMidStream, useVlmEngine, VLM_FIXTURES as root, vlmCases } from '../helpers/vlm-engine.js';
import { collect } from './helpers.js';

const FIXTURES = ['qwen3_vl_moe-f32', 'qwen3_vl_moe-q4'].filter((f) => existsSync(join(root, f, 'reference.json')));

describe.skipIf(FIXTURES.length === 0).each(FIXTURES)('%s through the engine', (name) => {
  const dir = join(root, name);
  const byName = vlmCases(dir);
  const { model, engine } = useVlmEngine(dir);

  it.each(['one_image', 'two_images'])('%s: prompt, spans, positions and greedy tokens equal transformers', async (caseName) => {
    const c = byName(caseName);
    const p = await casePrompt(model(), c);
    expect(p.promptIds).toEqual(c.input_ids);
    expect(p.multimodal.images.map((i) => [i.offset, i.length])).toEqual(c.images.map((i) => [i.placeholder_offset, i.tokens]));
    expect(Array.from(p.multimodal.positions!)).toEqual(c.position_ids!.flat());
    expect(p.multimodal.ropeDelta).toBe(c.rope_delta);
    await expectEngineGreedy(engine(16), p, c);
  });

  it('text only: no encoder call; image and text requests joined mid-stream give their solo tokens', async () => {
    const text = byName('text');
    const e = engine(12);
    const t = await collect(e.submit({ promptIds: text.input_ids, params: greedy(16) }));
    expect(t.tokens).toEqual(text.greedy);
    expect(e.stats().encoderCache).toMatchObject({ encodes: 0, hits: 0, misses: 0 });
    const two = await casePrompt(model(), byName('two_images'));
    const one = await casePrompt(model(), byName('one_image'));
    const got = await joinMidStream(e, [
      { id: 'two', ...two },
      { id: 'text', promptIds: text.input_ids },
      { id: 'one', ...one },
    ]);
    expect(got).toEqual([byName('two_images').greedy, text.greedy, byName('one_image').greedy]);
  });
});
