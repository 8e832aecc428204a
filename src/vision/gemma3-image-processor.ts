// Gemma 3 image preprocessing, as transformers 5's Gemma3ImageProcessorPil without pan-and-scan (the
// processor's default): PIL resize to size.height x size.width, rescale, normalize, [3, H, W].

import type { NativeImageInput } from '../native/types.js';
import type { DecodedImage } from './decode-image.js';
import { bool, type Json, normalizeParams, num, obj, resampleFilter } from './image-processor-config.js';
import { normalizeToChw, type NormalizeParams } from './normalize-image.js';
import { resizeDecoded, type ResampleFilter } from './pil-resample.js';

export interface Gemma3ImageConfig {
  height: number;
  width: number;
  patchSize: number; // vision_config.patch_size: grid = [1, H/patch, W/patch]
  tokens: number; // image_seq_length / mm_tokens_per_image
  doResize: boolean;
  resample: ResampleFilter;
  norm: NormalizeParams;
}

export function gemma3ImageConfig(image: Json, processor: Json, config: Json, where: string): Gemma3ImageConfig {
  const size = obj(image.size);
  const vision = obj(config.vision_config);
  const imageSize = num(vision?.image_size) ?? 896;
  // Pan-and-scan (extra crops per image) is off in every published config (null/false); not implemented.
  if (bool(image.do_pan_and_scan) === true || bool(processor.do_pan_and_scan) === true) {
    throw new Error(`${where}: do_pan_and_scan is true, but rapid preprocesses Gemma 3 images without pan-and-scan; set it to false (the transformers default)`);
  }
  return {
    height: num(size?.height) ?? imageSize,
    width: num(size?.width) ?? imageSize,
    patchSize: num(vision?.patch_size) ?? 14,
    tokens: num(processor.image_seq_length) ?? num(config.mm_tokens_per_image) ?? num(image.image_seq_length) ?? 256,
    doResize: bool(image.do_resize) ?? true,
    resample: resampleFilter(image.resample, 'bilinear', where),
    norm: normalizeParams(image, { doNormalize: true, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5] }),
  };
}

/** pixel_values [3, H, W] and grid [1, H/patch, W/patch]. */
export function gemma3Preprocess(cfg: Gemma3ImageConfig, img: DecodedImage): { input: NativeImageInput; tokens: number } {
  const h = cfg.doResize ? cfg.height : img.height;
  const w = cfg.doResize ? cfg.width : img.width;
  const pixels = normalizeToChw(resizeDecoded(img, w, h, cfg.resample), w, h, cfg.norm);
  return {
    input: { pixels, grid: [1, Math.floor(h / cfg.patchSize), Math.floor(w / cfg.patchSize)] },
    tokens: cfg.tokens,
  };
}
