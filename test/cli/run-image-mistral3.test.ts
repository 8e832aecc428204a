// `rapid run MODEL --image FILE [--image FILE2]` through the real CLI binary on the tiny Mistral 3 fixtures
// (Pixtral tower, [IMG_BREAK]/[IMG_END] rows, YaRN text lane): transformers' greedy tokens for one and two
// images of different sizes and for text only. The MLX 4-bit checkpoint's are checked in process
// (test/model/mistral3.test.ts); a CLI spawn costs a second or more.
import { join } from 'node:path';
import { describe, it } from 'vitest';
import { expectRunImageGreedy, type RunImageCase, VLM_FIXTURES as vlm, vlmCases, vlmFixtureReady } from '../helpers/vlm-engine.js';

const FIXTURES = ['mistral3-f32'].filter((f) => vlmFixtureReady(join(vlm, f), 'mistral3'));

describe.skipIf(FIXTURES.length === 0).each(FIXTURES)('rapid run --image on %s', (name) => {
  const dir = join(vlm, name);
  const byName = vlmCases<RunImageCase & { name: string }>(dir);

  it.each(['text', 'one_image', 'two_images'])('%s: greedy tokens equal transformers', (caseName) => {
    expectRunImageGreedy(dir, byName(caseName));
  });
});
