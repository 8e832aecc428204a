// One image through a family's preprocessing, from a plain-data spec: the same code runs on the main
// thread (VisionProcessor.prepareImage) and in the preprocessing workers, so both give identical bytes.

import type { NativeImageInput } from '../native/types.js';
import type { DecodedImage } from './decode-image.js';
import { gemma3Preprocess, type Gemma3ImageConfig } from './gemma3-image-processor.js';
import { type Gemma4ImageConfig, gemma4Preprocess, gemma4SoftTokensFor } from './gemma4-image-processor.js';
import { imageHash, variantHash } from './image-hash.js';
import { type PixtralImageConfig, pixtralPreprocess } from './pixtral-image-processor.js';
import { qwenPreprocess, type QwenImageConfig } from './qwen-image-processor.js';

/** What a worker needs to preprocess for one model: structured-clone safe (numbers, strings, arrays). */
export type PreprocessSpec =
  | { kind: 'qwen'; image: QwenImageConfig }
  | { kind: 'gemma3'; image: Gemma3ImageConfig }
  | { kind: 'gemma4'; image: Gemma4ImageConfig }
  | { kind: 'pixtral'; image: PixtralImageConfig };

export interface PreparedImage {
  hash: string; // imageHash of the decoded pixels
  input: NativeImageInput; // the HF processor's pixel_values rows + grid for this one image
  tokens: number; // placeholder tokens this image expands to
}

export interface PrepareImageOptions {
  /** Qwen: a lower max_pixels than the processor config's; Gemma 4: the largest max_soft_tokens that fits
   *  (Gemma 3 always uses its fixed size). */
  maxPixels?: number;
}

/** Resize, normalize and lay out one decoded image (synchronous CPU work). */
export function prepareWithSpec(spec: PreprocessSpec, img: DecodedImage, options: PrepareImageOptions = {}): PreparedImage {
  const hash = imageHash(img);
  if (spec.kind === 'gemma3') return { hash, ...gemma3Preprocess(spec.image, img) };
  if (spec.kind === 'gemma4') {
    // A pixel cap picks a smaller max_soft_tokens (the processor's own per-call knob); a different cache key.
    const t = gemma4SoftTokensFor(spec.image, options.maxPixels);
    if (t === spec.image.maxSoftTokens) return { hash, ...gemma4Preprocess(spec.image, img) };
    return { hash: variantHash(hash, `max_soft_tokens=${t}`), ...gemma4Preprocess({ ...spec.image, maxSoftTokens: t }, img) };
  }
  if (spec.kind === 'pixtral') return { hash, ...pixtralPreprocess(spec.image, img) };
  const cap = options.maxPixels;
  if (cap === undefined || cap >= spec.image.maxPixels) return { hash, ...qwenPreprocess(spec.image, img) };
  // A lower pixel budget (e.g. OpenAI detail "low"), never below min_pixels; a different cache key.
  const maxPixels = Math.max(cap, spec.image.minPixels);
  return { hash: variantHash(hash, `max_pixels=${maxPixels}`), ...qwenPreprocess({ ...spec.image, maxPixels }, img) };
}
