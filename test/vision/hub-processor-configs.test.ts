// The image-processor files the catalog's VLM repos actually ship (Hugging Face originals and the
// mlx-community re-saves): min/max_pixels at the top level or as size.{shortest,longest}_edge, Qwen3-VL's
// size-only file, Gemma 3's preprocessor + processor_config.json (image_seq_length, pan-and-scan off).
// Each is read into the settings transformers would use, and a 448x448 image gets the real token count.

import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import { VisionProcessor } from '../../src/vision/processor.js';

const fixtures = join(import.meta.dirname, '..', 'fixtures', 'vlm');
const work = mkdtempSync(join(tmpdir(), 'rapid-hub-proc-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073];
const CLIP_STD = [0.26862954, 0.26130258, 0.27577711];

// Qwen/Qwen2.5-VL-3B-Instruct (and 7B) as published.
const QWEN25_HUB = {
  min_pixels: 3136,
  max_pixels: 12845056,
  patch_size: 14,
  temporal_patch_size: 2,
  merge_size: 2,
  image_mean: CLIP_MEAN,
  image_std: CLIP_STD,
  image_processor_type: 'Qwen2VLImageProcessor',
  processor_class: 'Qwen2_5_VLProcessor',
};
// The same after a transformers 4.5x save_pretrained (mlx-community conversions): size mirrors the pixels.
const QWEN25_RESAVED = {
  do_convert_rgb: true,
  do_normalize: true,
  do_rescale: true,
  do_resize: true,
  image_mean: CLIP_MEAN,
  image_processor_type: 'Qwen2VLImageProcessor',
  image_std: CLIP_STD,
  max_pixels: 12845056,
  merge_size: 2,
  min_pixels: 3136,
  patch_size: 14,
  processor_class: 'Qwen2_5_VLProcessor',
  resample: 3,
  rescale_factor: 0.00392156862745098,
  size: { longest_edge: 12845056, shortest_edge: 3136 },
  temporal_patch_size: 2,
};
// Qwen/Qwen3-VL-4B-Instruct (and 8B): no top-level pixel bounds, only size.
const QWEN3_HUB = {
  size: { longest_edge: 16777216, shortest_edge: 65536 },
  patch_size: 16,
  temporal_patch_size: 2,
  merge_size: 2,
  image_mean: [0.5, 0.5, 0.5],
  image_std: [0.5, 0.5, 0.5],
  processor_class: 'Qwen3VLProcessor',
  image_processor_type: 'Qwen2VLImageProcessorFast',
};
// google/gemma-3-4b-it (and 12b), copied by mlx-community.
const GEMMA3_HUB = {
  do_convert_rgb: null,
  do_normalize: true,
  do_pan_and_scan: null,
  do_rescale: true,
  do_resize: true,
  image_mean: [0.5, 0.5, 0.5],
  image_processor_type: 'Gemma3ImageProcessor',
  image_seq_length: 256,
  image_std: [0.5, 0.5, 0.5],
  pan_and_scan_max_num_crops: null,
  pan_and_scan_min_crop_size: null,
  pan_and_scan_min_ratio_to_activate: null,
  processor_class: 'Gemma3Processor',
  resample: 2,
  rescale_factor: 0.00392156862745098,
  size: { height: 896, width: 896 },
};
const GEMMA3_PROCESSOR = { image_seq_length: 256, processor_class: 'Gemma3Processor' };

let n = 0;
/** A model dir: the fixture's tokenizer and config (vision_config patched to the real sizes) + hub processor files. */
function modelDir(fixture: string, files: Record<string, unknown>, vision: Record<string, unknown>): string {
  const dir = join(work, `m${n++}`);
  mkdirSync(dir);
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(fixtures, fixture, f), join(dir, f));
  const config = JSON.parse(readFileSync(join(fixtures, fixture, 'config.json'), 'utf8')) as Record<string, Record<string, unknown>>;
  config.vision_config = { ...config.vision_config, ...vision };
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
  for (const [name, body] of Object.entries(files)) writeFileSync(join(dir, name), JSON.stringify(body));
  return dir;
}

function gray(width: number, height: number) {
  return { width, height, data: new Uint8Array(width * height * 3).fill(128) };
}

function load(dir: string): VisionProcessor {
  const p = VisionProcessor.load(dir, loadTokenizerDir(dir));
  expect(p).not.toBeNull();
  return p!;
}

describe('VisionProcessor reads the processor files the hub repos ship', () => {
  it('Qwen2.5-VL: top-level min/max_pixels, with or without a mirrored size block', () => {
    for (const pre of [QWEN25_HUB, QWEN25_RESAVED]) {
      const p = load(modelDir('qwen2_5_vl-f32', { 'preprocessor_config.json': pre }, { patch_size: 14, spatial_merge_size: 2 }));
      const spec = p.preprocessSpec;
      expect(spec).toMatchObject({ kind: 'qwen', image: { minPixels: 3136, maxPixels: 12845056, patchSize: 14, mergeSize: 2, temporalPatchSize: 2, resample: 'bicubic' } });
      const img = p.prepareImage(gray(448, 448));
      expect(img.input.grid).toEqual([1, 32, 32]);
      expect(img.tokens).toBe(256);
      expect(img.input.pixels.length).toBe(1024 * 3 * 2 * 14 * 14);
    }
  });

  it('Qwen2.5-VL: min/max_pixels only inside size (older saves) are honoured', () => {
    const pre = { ...QWEN25_HUB, min_pixels: undefined, max_pixels: undefined, size: { min_pixels: 3136, max_pixels: 200704 } };
    const p = load(modelDir('qwen2_5_vl-f32', { 'preprocessor_config.json': pre }, {}));
    expect(p.preprocessSpec.image).toMatchObject({ minPixels: 3136, maxPixels: 200704 });
    expect(p.prepareImage(gray(448, 448)).tokens).toBe(256); // exactly max_pixels
    expect(p.prepareImage(gray(1200, 900)).input.grid).toEqual([1, 26, 36]); // capped to 504x364 by max_pixels
  });

  it('Qwen3-VL: size.{shortest,longest}_edge, patch 16', () => {
    const p = load(modelDir('qwen3_vl-f32', { 'preprocessor_config.json': QWEN3_HUB }, { patch_size: 16, spatial_merge_size: 2 }));
    expect(p.preprocessSpec).toMatchObject({ kind: 'qwen', image: { minPixels: 65536, maxPixels: 16777216, patchSize: 16 } });
    const img = p.prepareImage(gray(448, 448));
    expect(img.input.grid).toEqual([1, 28, 28]);
    expect(img.tokens).toBe(196);
  });

  it('Gemma 3: 896x896, 256 tokens from processor_config image_seq_length, pan-and-scan off (null)', () => {
    const p = load(
      modelDir('gemma3-f32', { 'preprocessor_config.json': GEMMA3_HUB, 'processor_config.json': GEMMA3_PROCESSOR }, { image_size: 896, patch_size: 14 }),
    );
    expect(p.preprocessSpec).toMatchObject({ kind: 'gemma3', image: { height: 896, width: 896, tokens: 256, resample: 'bilinear' } });
    const img = p.prepareImage(gray(448, 300));
    expect(img.input.grid).toEqual([1, 64, 64]);
    expect(img.tokens).toBe(256);
    expect(img.input.pixels.length).toBe(3 * 896 * 896);
  });

  it('Gemma 3: a transformers 5 save (only processor_config.json, image processor nested) reads the same', () => {
    const nested = { ...GEMMA3_PROCESSOR, image_processor: { ...GEMMA3_HUB, do_pan_and_scan: false } };
    const p = load(modelDir('gemma3-f32', { 'processor_config.json': nested }, { image_size: 896, patch_size: 14 }));
    expect(p.preprocessSpec).toMatchObject({ kind: 'gemma3', image: { height: 896, width: 896, tokens: 256 } });
  });

  it('Gemma 3: pan-and-scan turned on is refused at load, with the fix', () => {
    const dir = modelDir('gemma3-f32', { 'preprocessor_config.json': { ...GEMMA3_HUB, do_pan_and_scan: true }, 'processor_config.json': GEMMA3_PROCESSOR }, {});
    expect(() => VisionProcessor.load(dir, loadTokenizerDir(dir))).toThrow(/do_pan_and_scan.*set it to false/);
  });
});
