// `rapid run MODEL --image FILE [--image FILE2]` through the real CLI binary on the tiny VLM fixtures:
// transformers' greedy tokens for one and two images per family; on the first fixture only (each spawn costs
// a second or more; test/model/vlm.test.ts checks every family's text prompt in process) the text-only prompt
// and clear errors for a missing file, a corrupt image and --raw; and a text-only model's refusal.
import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { expectRunImageGreedy, rapidCli as rapid, type RunImageCase, VLM_FIXTURES as vlm, vlmCases, vlmFixtureReady } from '../helpers/vlm-engine.js';

const root = resolve(import.meta.dirname, '..', '..');

const FIXTURES = ['qwen2_5_vl-f32', 'qwen3_vl-f32', 'gemma3-f32'].filter((f) => vlmFixtureReady(join(vlm, f)));

describe.skipIf(FIXTURES.length === 0).each(FIXTURES)('rapid run --image on %s', (name) => {
  const dir = join(vlm, name);
  const byName = vlmCases<RunImageCase & { name: string }>(dir);

  it.each(['one_image', 'two_images'])('%s: greedy tokens equal transformers', (caseName) => {
    const out = expectRunImageGreedy(dir, byName(caseName));
    expect(out.timings!.image_encode_ms).toBeGreaterThan(0);
  });

  it.runIf(name === FIXTURES[0])('without --image: the text-only prompt on the VLM gives transformers\' text greedy tokens', () => {
    expectRunImageGreedy(dir, byName('text'));
  });

  it.runIf(name === FIXTURES[0])('says what is wrong with a missing file, a corrupt image and --raw', () => {
    const missing = rapid(['run', dir, '--prompt', 'x', '--image', join(vlm, 'images', 'no-such.png')]);
    expect(missing.status).not.toBe(0);
    expect(missing.stderr).toMatch(/--image .*no-such\.png: no such file/);
    const tmp = mkdtempSync(join(tmpdir(), 'rapid-img-'));
    const bad = join(tmp, 'bad.png');
    writeFileSync(bad, 'not an image');
    const corrupt = rapid(['run', dir, '--prompt', 'x', '--image', bad]);
    expect(corrupt.status).not.toBe(0);
    expect(corrupt.stderr).toMatch(/--image .*bad\.png: image could not be read/);
    const raw = rapid(['run', dir, '--raw', '--prompt', 'x', '--image', join(vlm, 'images', 'wide_90x60.png')]);
    expect(raw.status).not.toBe(0);
    expect(raw.stderr).toMatch(/--image needs the chat template/);
  });

  it.runIf(name === FIXTURES[0])('--step-timeout bounds the image encode: past it the run fails saying so', () => {
    const r = rapid(['run', dir, '--prompt', 'x', '-n', '4', '--image', join(vlm, 'images', 'wide_90x60.png'), '--step-timeout', '0']);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/did not return within 0 ms/);
    const bad = rapid(['run', dir, '--prompt', 'x', '--step-timeout', 'soon']);
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toMatch(/--step-timeout expects an integer/);
  });
});

describe.skipIf(FIXTURES.length === 0)('rapid run --image on a text-only model', () => {
  it('refuses with a clear message', () => {
    const r = rapid(['run', join(root, 'test', 'fixtures', 'models', 'qwen2-f32'), '--prompt', 'x', '--image', join(vlm, 'images', 'wide_90x60.png')]);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/does not accept images/);
  });
});
