// Gemma 4 image preprocessing, as transformers 5's Gemma4ImageProcessorPil: aspect-preserving resize to a
// patch budget (max_soft_tokens x k^2 patches, sides multiples of k*patch), PIL bicubic, rescale 1/255, no
// mean/std by default, patch rows in (py, px, c) order. The processor pads rows to max_patches with position
// -1; those rows are dropped here (the native tower takes only the real h*w patches and derives positions).

import { InvalidRequestError } from '../errors/request-errors.js';
import type { NativeImageInput } from '../native/types.js';
import type { DecodedImage } from './decode-image.js';
import { bool, type Json, normalizeParams, num, obj, resampleFilter } from './image-processor-config.js';
import { normalizeToChw, type NormalizeParams } from './normalize-image.js';
import { resizeDecoded, type ResampleFilter } from './pil-resample.js';

/** The soft-token budgets the processor accepts (Gemma4ImageProcessorPil._SUPPORTED_SOFT_TOKENS). */
export const GEMMA4_SOFT_TOKENS = [70, 140, 280, 560, 1120] as const;

export interface Gemma4ImageConfig {
  patchSize: number; // pixels per patch side (16)
  poolingKernelSize: number; // k: k x k patches pool into one soft token (3)
  maxSoftTokens: number; // one of GEMMA4_SOFT_TOKENS; max_patches = maxSoftTokens * k^2
  doResize: boolean;
  resample: ResampleFilter;
  norm: NormalizeParams;
}

export function gemma4ImageConfig(image: Json, config: Json, where: string): Gemma4ImageConfig {
  const vision = obj(config.vision_config);
  const maxSoftTokens = num(image.max_soft_tokens) ?? 280;
  if (!(GEMMA4_SOFT_TOKENS as readonly number[]).includes(maxSoftTokens)) {
    throw new Error(`${where}: max_soft_tokens ${maxSoftTokens} is not one of ${GEMMA4_SOFT_TOKENS.join(', ')}`);
  }
  return {
    patchSize: num(image.patch_size) ?? num(vision?.patch_size) ?? 16,
    poolingKernelSize: num(image.pooling_kernel_size) ?? num(vision?.pooling_kernel_size) ?? 3,
    maxSoftTokens,
    doResize: bool(image.do_resize) ?? true,
    resample: resampleFilter(image.resample, 'bicubic', where),
    norm: normalizeParams(image, { doNormalize: false, mean: [0, 0, 0], std: [1, 1, 1] }),
  };
}

/**
 * The soft-token budget for a pixel cap (e.g. OpenAI detail "low"): the largest supported budget, at most the
 * configured one, whose resized area (budget x k^2 patches of P^2 px) fits in maxPixels; never below the smallest.
 */
export function gemma4SoftTokensFor(cfg: Gemma4ImageConfig, maxPixels: number | undefined): number {
  if (maxPixels === undefined) return cfg.maxSoftTokens;
  const px = (t: number) => t * cfg.poolingKernelSize ** 2 * cfg.patchSize ** 2;
  const fits = GEMMA4_SOFT_TOKENS.filter((t) => t <= cfg.maxSoftTokens && px(t) <= maxPixels);
  return fits.length > 0 ? fits[fits.length - 1] : GEMMA4_SOFT_TOKENS[0];
}

/**
 * get_aspect_ratio_preserving_size: the largest size with sides multiples of k*patch and at most
 * max_patches patches; a side that rounds to 0 becomes one unit and the other follows the aspect ratio.
 */
export function gemma4TargetSize(height: number, width: number, cfg: Gemma4ImageConfig): { height: number; width: number } {
  const k = cfg.poolingKernelSize;
  const maxPatches = cfg.maxSoftTokens * k * k;
  const targetPx = maxPatches * cfg.patchSize ** 2;
  const factor = Math.sqrt(targetPx / (height * width));
  const unit = k * cfg.patchSize;
  let h = Math.floor((factor * height) / unit) * unit;
  let w = Math.floor((factor * width) / unit) * unit;
  const tooExtreme = (): InvalidRequestError =>
    new InvalidRequestError(
      `image of ${width}x${height} px has too extreme an aspect ratio for this model's ${maxPatches}-patch budget`,
      'image',
    );
  if (h === 0 && w === 0) throw tooExtreme();
  const maxSide = Math.floor(maxPatches / (k * k)) * unit;
  if (h === 0) {
    h = unit;
    w = Math.min(Math.floor(width / height) * unit, maxSide);
  } else if (w === 0) {
    w = unit;
    h = Math.min(Math.floor(height / width) * unit, maxSide);
  }
  if (h * w > targetPx) throw tooExtreme();
  return { height: h, width: w };
}

/** pixel_values rows [h*w, 3*P*P] in (py, px, c) order (real patches only) and grid [1, h, w]. */
export function gemma4Preprocess(cfg: Gemma4ImageConfig, img: DecodedImage): { input: NativeImageInput; tokens: number } {
  const size = cfg.doResize ? gemma4TargetSize(img.height, img.width, cfg) : { height: img.height, width: img.width };
  const { height: H, width: W } = size;
  const P = cfg.patchSize;
  const k = cfg.poolingKernelSize;
  if (H % (P * k) !== 0 || W % (P * k) !== 0) {
    throw new InvalidRequestError(`image of ${W}x${H} px: both sides must be multiples of ${P * k} px (do_resize is off)`, 'image');
  }
  const chw = normalizeToChw(resizeDecoded(img, W, H, cfg.resample), W, H, cfg.norm); // [3, H, W]
  const gh = H / P;
  const gw = W / P;
  const rowLen = 3 * P * P;
  const pixels = new Float32Array(gh * gw * rowLen); // [gh*gw, P, P, 3]
  const plane = H * W;
  for (let py = 0; py < gh; py++) {
    for (let px = 0; px < gw; px++) {
      let o = (py * gw + px) * rowLen;
      for (let iy = 0; iy < P; iy++) {
        const rowBase = (py * P + iy) * W + px * P;
        for (let ix = 0; ix < P; ix++) {
          const at = rowBase + ix;
          pixels[o++] = chw[at];
          pixels[o++] = chw[plane + at];
          pixels[o++] = chw[2 * plane + at];
        }
      }
    }
  }
  return { input: { pixels, grid: [1, gh, gw] }, tokens: (gh / k) * (gw / k) };
}
