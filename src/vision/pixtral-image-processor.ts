// Pixtral (Mistral 3) image preprocessing, as transformers 5's PixtralImageProcessorPil under PixtralProcessor:
// scale down so the longest side fits longest_edge (floor), round each side up to a multiple of
// patch_size * spatial_merge_size, PIL resize, rescale + normalize, [3, H, W] with grid [1, H/patch, W/patch].

import type { NativeImageInput } from '../native/types.js';
import { InvalidRequestError } from '../errors/request-errors.js';
import type { DecodedImage } from './decode-image.js';
import { bool, type Json, normalizeParams, num, obj, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, resampleFilter } from './image-processor-config.js';
import { normalizeToChw, type NormalizeParams } from './normalize-image.js';
import { resizeDecoded, type ResampleFilter } from './pil-resample.js';

export interface PixtralImageConfig {
  patchSize: number; // vision tower patch (grid unit)
  mergeSize: number; // spatial_merge_size: one [IMG] token per merge x merge patches
  longestEdge: number;
  doResize: boolean;
  resample: ResampleFilter;
  norm: NormalizeParams;
}

/** Settings from preprocessor_config.json, processor_config.json (patch_size, spatial_merge_size) and config.json. */
export function pixtralImageConfig(image: Json, processor: Json, config: Json, where: string): PixtralImageConfig {
  const vision = obj(config.vision_config);
  const patchSize = num(processor.patch_size) ?? num(vision?.patch_size) ?? 16;
  const mergeSize = num(processor.spatial_merge_size) ?? num(config.spatial_merge_size) ?? 1;
  const size = obj(image.size);
  const longestEdge = num(size?.longest_edge) ?? num(size?.height) ?? 1024;
  if (!Number.isInteger(patchSize) || patchSize < 1 || !Number.isInteger(mergeSize) || mergeSize < 1 || !(longestEdge >= 1)) {
    throw new Error(`${where}: bad Pixtral sizes (patch_size ${patchSize}, spatial_merge_size ${mergeSize}, longest_edge ${longestEdge})`);
  }
  return {
    patchSize,
    mergeSize,
    longestEdge,
    doResize: bool(image.do_resize) ?? true,
    resample: resampleFilter(image.resample, 'bicubic', where),
    norm: normalizeParams(image, { doNormalize: true, mean: OPENAI_CLIP_MEAN, std: OPENAI_CLIP_STD }),
  };
}

/** transformers' pixtral get_resize_output_image_size with size (L, L) and patch (p, p). Returns [h, w]. */
export function pixtralResizeSize(height: number, width: number, longestEdge: number, patch: number): [number, number] {
  const ratio = Math.max(height / longestEdge, width / longestEdge);
  let h = height;
  let w = width;
  if (ratio > 1) {
    h = Math.floor(height / ratio);
    w = Math.floor(width / ratio);
  }
  // (x - 1) // p + 1 patches per side; a side scaled down to 0 still gets one patch, as in Python.
  const side = (x: number): number => (Math.floor((x - 1) / patch) + 1) * patch;
  return [side(h), side(w)];
}

/** pixel_values [3, H, W], grid [1, H/patch, W/patch]; tokens = [IMG] count (one per merged cell). */
export function pixtralPreprocess(cfg: PixtralImageConfig, img: DecodedImage): { input: NativeImageInput; tokens: number } {
  const unit = cfg.patchSize * cfg.mergeSize;
  const [h, w] = cfg.doResize ? pixtralResizeSize(img.height, img.width, cfg.longestEdge, unit) : [img.height, img.width];
  if (h < unit || w < unit || h % unit !== 0 || w % unit !== 0) {
    throw new InvalidRequestError(`image ${img.width}x${img.height} cannot be laid out in ${unit}-pixel cells without resizing`, 'image');
  }
  const pixels = normalizeToChw(resizeDecoded(img, w, h, cfg.resample), w, h, cfg.norm);
  return {
    input: { pixels, grid: [1, h / cfg.patchSize, w / cfg.patchSize] },
    tokens: (h / unit) * (w / unit),
  };
}
