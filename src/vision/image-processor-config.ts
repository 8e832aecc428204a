// Reads the image-processor settings of a model directory: preprocessor_config.json (flat, as the hub
// ships it) or the "image_processor" block of processor_config.json (transformers 5 save_pretrained).

import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { NormalizeParams } from './normalize-image.js';

export type Json = Record<string, unknown>;

export function readJsonObject(path: string): Json | null {
  if (!existsSync(path)) return null;
  const parsed: unknown = JSON.parse(readFileSync(path, 'utf8'));
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new Error(`${path} must hold a JSON object`);
  }
  return parsed as Json;
}

export interface ProcessorFiles {
  /** Image-processor keys (image_mean, size, patch_size, ...). Empty when neither file has them. */
  image: Json;
  /** Top-level processor_config.json keys (image_seq_length, ...). */
  processor: Json;
}

export function readProcessorFiles(dir: string): ProcessorFiles {
  const pre = readJsonObject(join(dir, 'preprocessor_config.json'));
  const proc = readJsonObject(join(dir, 'processor_config.json')) ?? {};
  const nested = proc.image_processor;
  const image = pre ?? (typeof nested === 'object' && nested !== null && !Array.isArray(nested) ? (nested as Json) : {});
  return { image, processor: proc };
}

export function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

export function bool(v: unknown): boolean | undefined {
  return typeof v === 'boolean' ? v : undefined;
}

export function obj(v: unknown): Json | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Json) : undefined;
}

/** image_mean / image_std: a list of 3 numbers or one number for all channels. */
export function triple(v: unknown, fallback: readonly number[]): [number, number, number] {
  if (typeof v === 'number') return [v, v, v];
  if (Array.isArray(v) && v.length === 3 && v.every((x) => typeof x === 'number')) return [v[0], v[1], v[2]];
  return [fallback[0], fallback[1], fallback[2]];
}

/** PILImageResampling codes in configs: 2 = BILINEAR, 3 = BICUBIC (others are not used by these families). */
export function resampleFilter(v: unknown, fallback: 'bilinear' | 'bicubic', where: string): 'bilinear' | 'bicubic' {
  if (v === undefined || v === null) return fallback;
  if (v === 2 || v === 'bilinear') return 'bilinear';
  if (v === 3 || v === 'bicubic') return 'bicubic';
  throw new Error(`${where}: resample ${JSON.stringify(v)} is not supported (only 2 = bilinear, 3 = bicubic)`);
}

/** transformers' OPENAI_CLIP_MEAN / OPENAI_CLIP_STD: the default normalization of Qwen2.5-VL and Pixtral. */
export const OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073] as const;
export const OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711] as const;

/** do_rescale / rescale_factor / do_normalize / image_mean / image_std, with the family's defaults. */
export function normalizeParams(image: Json, defaults: { doNormalize: boolean; mean: readonly number[]; std: readonly number[] }): NormalizeParams {
  return {
    doRescale: bool(image.do_rescale) ?? true,
    rescaleFactor: num(image.rescale_factor) ?? 1 / 255,
    doNormalize: bool(image.do_normalize) ?? defaults.doNormalize,
    mean: triple(image.image_mean, defaults.mean),
    std: triple(image.image_std, defaults.std),
  };
}
