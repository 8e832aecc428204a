import { existsSync } from 'node:fs';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { InvalidRequestError } from '../../src/errors/request-errors.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import { expandImageTokenIds, expandPlaceholderText, locateImageRuns } from '../../src/vision/expand-prompt.js';
import { decodePositions, mropePositions, slicePositions } from '../../src/vision/mrope-positions.js';
import { assertImagesAllowed, VisionProcessor } from '../../src/vision/processor.js';

function axes(p: Int32Array, n: number): number[][] {
  return [Array.from(p.subarray(0, n)), Array.from(p.subarray(n, 2 * n)), Array.from(p.subarray(2 * n, 3 * n))];
}

describe('mropePositions (transformers get_rope_index)', () => {
  it('reproduces the verified MODELS.md example', () => {
    // [5, vs, img x6 (grid 1x4x6), ve, 7, 8]
    const { positions, ropeDelta } = mropePositions(11, [{ offset: 2, grid: [1, 4, 6] }], 2);
    expect(axes(positions, 11)).toEqual([
      [0, 1, 2, 2, 2, 2, 2, 2, 5, 6, 7],
      [0, 1, 2, 2, 2, 3, 3, 3, 5, 6, 7],
      [0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7],
    ]);
    expect(ropeDelta).toBe(-3);
  });
  it('text only: arange on all axes, delta 0', () => {
    const { positions, ropeDelta } = mropePositions(4, [], 2);
    expect(axes(positions, 4)).toEqual([
      [0, 1, 2, 3],
      [0, 1, 2, 3],
      [0, 1, 2, 3],
    ]);
    expect(ropeDelta).toBe(0);
  });
  it('slices prefill chunks and continues decode at index + delta', () => {
    const { positions, ropeDelta } = mropePositions(11, [{ offset: 2, grid: [1, 4, 6] }], 2);
    expect(Array.from(slicePositions(positions, 11, 7, 10))).toEqual([2, 5, 6, 3, 5, 6, 4, 5, 6]);
    expect(Array.from(decodePositions(11, 2, ropeDelta))).toEqual([8, 9, 8, 9, 8, 9]);
  });
  it('a prompt ending in an image block', () => {
    const { positions, ropeDelta } = mropePositions(5, [{ offset: 1, grid: [1, 4, 4] }], 2);
    expect(axes(positions, 5)).toEqual([
      [0, 1, 1, 1, 1],
      [0, 1, 1, 2, 2],
      [0, 1, 2, 1, 2],
    ]);
    expect(ropeDelta).toBe(3 - 5);
  });
});

describe('placeholder expansion', () => {
  it('expands ids in order and reports offsets', () => {
    expect(expandImageTokenIds([1, 9, 2, 9, 3], 9, [2, 3])).toEqual({ ids: [1, 9, 9, 2, 9, 9, 9, 3], offsets: [1, 4] });
  });
  it('expands text in order', () => {
    expect(expandPlaceholderText('a<I>b<I>', '<I>', ['[1]', '[2]'])).toBe('a[1]b[2]');
  });
  it('count mismatch is a 400 that says what to fix', () => {
    expect(() => expandImageTokenIds([1, 9, 2], 9, [2, 3])).toThrow(InvalidRequestError);
    expect(() => expandImageTokenIds([1, 9, 2], 9, [2, 3])).toThrow(/1 image placeholder but 2 images were sent/);
    expect(() => expandPlaceholderText('a<I>b<I>', '<I>', ['x'])).toThrow(/2 image placeholders but 1 image was sent/);
    expect(() => expandImageTokenIds([1, 2], 9, [4])).toThrow(/0 image placeholders but 1 image was sent/);
  });
  it('image tokens typed into the text are refused', () => {
    expect(locateImageRuns([1, 7, 7, 2, 7, 7, 7], 7, [2, 3])).toEqual([1, 4]);
    expect(() => locateImageRuns([7, 1, 7, 7, 2, 7, 7, 7], 7, [2, 3])).toThrow(/contains image tokens of its own/);
  });
});

describe('text-only models', () => {
  const textDir = join(import.meta.dirname, '..', 'fixtures', 'models', 'gemma3-f32');
  it.runIf(existsSync(join(textDir, 'config.json')))('have no VisionProcessor (Gemma 3 text checkpoint)', () => {
    expect(VisionProcessor.load(textDir, loadTokenizerDir(textDir))).toBeNull();
  });
  it('refuse images with a 400', () => {
    expect(() => assertImagesAllowed(null, 1, 'tiny-text')).toThrow(/does not accept images/);
    expect(() => assertImagesAllowed(null, 0, 'tiny-text')).not.toThrow();
  });
});

const qwenDir = join(import.meta.dirname, '..', 'fixtures', 'vlm', 'qwen2_5_vl-f32');

describe.runIf(existsSync(join(qwenDir, 'tokenizer.json')))('VisionProcessor on a Qwen2.5-VL dir', () => {
  const text = loadTokenizerDir(qwenDir);
  const processor = VisionProcessor.load(qwenDir, text)!;
  const img = { width: 90, height: 60, data: new Uint8Array(90 * 60 * 3).fill(128) };
  const prompt = (k: number) =>
    `<|im_start|>user\n${'<|vision_start|><|image_pad|><|vision_end|>'.repeat(k)}Hi<|im_end|>\n<|im_start|>assistant\n`;

  it('loads the family and tokens', () => {
    expect(processor.family).toBe('qwen2_5_vl');
    expect(processor.placeholder).toBe('<|image_pad|>');
    expect(processor.imageTokenId).toBe(text.tokenizer.tokenToId('<|image_pad|>'));
  });
  it('text-only prompts get 3-axis arange positions', () => {
    const p = processor.buildPrompt(prompt(0), []);
    const n = p.promptIds.length;
    expect(p.ropeDelta).toBe(0);
    expect(Array.from(p.positions!.subarray(2 * n))).toEqual(Array.from({ length: n }, (_, i) => i));
  });
  it('ids input gives the same result as text input', () => {
    const prepared = processor.prepareImage(img);
    const fromText = processor.buildPrompt(prompt(1), [prepared]);
    const ids = text.tokenizer.encode(prompt(1), { addSpecialTokens: false });
    const fromIds = processor.buildPrompt(ids, [prepared]);
    expect(fromIds.promptIds).toEqual(fromText.promptIds);
    expect(Array.from(fromIds.positions!)).toEqual(Array.from(fromText.positions!));
  });
  it('refuses more images than placeholders and the reverse', () => {
    const prepared = processor.prepareImage(img);
    expect(() => processor.buildPrompt(prompt(1), [prepared, prepared])).toThrow(/1 image placeholder but 2 images were sent/);
    expect(() => processor.buildPrompt(prompt(2), [prepared])).toThrow(/2 image placeholders but 1 image was sent/);
  });
  it('detail-low pixel cap changes grid and cache key', () => {
    const big = { width: 200, height: 150, data: new Uint8Array(200 * 150 * 3).fill(9) };
    const full = processor.prepareImage(big);
    const low = processor.prepareImage(big, { maxPixels: 3136 });
    expect(low.tokens).toBeLessThan(full.tokens);
    expect(low.hash).not.toBe(full.hash);
    expect(processor.prepareImage(big).hash).toBe(full.hash);
  });
});
