// Qwen2.5-VL / Qwen3-VL image preprocessing, as transformers 5's Qwen2VLImageProcessorPil: smart_resize to
// a multiple of patch*merge, PIL resize, rescale + normalize, then patch rows in the processor's order.

import type { NativeImageInput } from '../native/types.js';
import { InvalidRequestError } from '../errors/request-errors.js';
import type { DecodedImage } from './decode-image.js';
import { bool, type Json, normalizeParams, num, obj, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, resampleFilter } from './image-processor-config.js';
import { normalizeToChw, type NormalizeParams } from './normalize-image.js';
import { resizeDecoded, type ResampleFilter } from './pil-resample.js';

export interface QwenImageConfig {
  patchSize: number;
  temporalPatchSize: number;
  mergeSize: number;
  minPixels: number;
  maxPixels: number;
  doResize: boolean;
  resample: ResampleFilter;
  norm: NormalizeParams;
}

/** Python's round(): ties to even. */
export function roundHalfEven(x: number): number {
  const f = Math.floor(x);
  const d = x - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

/** transformers' smart_resize, float for float (Python doubles = JS numbers). Returns [h, w]. */
export function smartResize(height: number, width: number, factor: number, minPixels: number, maxPixels: number): [number, number] {
  if (Math.max(height, width) / Math.min(height, width) > 200) {
    throw new InvalidRequestError(
      `image aspect ratio ${width}x${height} is more extreme than 200:1; crop or pad it first`,
      'image',
    );
  }
  let hBar = roundHalfEven(height / factor) * factor;
  let wBar = roundHalfEven(width / factor) * factor;
  if (hBar * wBar > maxPixels) {
    const beta = Math.sqrt((height * width) / maxPixels);
    hBar = Math.max(factor, Math.floor(height / beta / factor) * factor);
    wBar = Math.max(factor, Math.floor(width / beta / factor) * factor);
  } else if (hBar * wBar < minPixels) {
    const beta = Math.sqrt(minPixels / (height * width));
    hBar = Math.ceil((height * beta) / factor) * factor;
    wBar = Math.ceil((width * beta) / factor) * factor;
  }
  return [hBar, wBar];
}

/** Family defaults (Qwen2VLImageProcessor class attributes; Qwen3-VL as its preprocessor_config ships). */
export function qwenImageConfig(family: 'qwen2_5_vl' | 'qwen3_vl', image: Json, visionConfig: Json | undefined, where: string): QwenImageConfig {
  const q3 = family === 'qwen3_vl';
  const size = obj(image.size);
  // Top-level min/max_pixels win over size (as the processor's __init__ does); old configs nest them in size.
  const minPixels = num(image.min_pixels) ?? num(size?.shortest_edge) ?? num(size?.min_pixels) ?? (q3 ? 65536 : 56 * 56);
  const maxPixels = num(image.max_pixels) ?? num(size?.longest_edge) ?? num(size?.max_pixels) ?? (q3 ? 16777216 : 28 * 28 * 1280);
  return {
    patchSize: num(image.patch_size) ?? num(visionConfig?.patch_size) ?? (q3 ? 16 : 14),
    temporalPatchSize: num(image.temporal_patch_size) ?? num(visionConfig?.temporal_patch_size) ?? 2,
    mergeSize: num(image.merge_size) ?? num(visionConfig?.spatial_merge_size) ?? 2,
    minPixels,
    maxPixels,
    doResize: bool(image.do_resize) ?? true,
    resample: resampleFilter(image.resample, 'bicubic', where),
    norm: normalizeParams(image, { doNormalize: true, mean: q3 ? [0.5, 0.5, 0.5] : OPENAI_CLIP_MEAN, std: q3 ? [0.5, 0.5, 0.5] : OPENAI_CLIP_STD }),
  };
}

/** Resize target [h, w] for an image of this size. */
export function qwenTargetSize(cfg: QwenImageConfig, height: number, width: number): [number, number] {
  if (!cfg.doResize) return [height, width];
  return smartResize(height, width, cfg.patchSize * cfg.mergeSize, cfg.minPixels, cfg.maxPixels);
}

/** pixel_values [gh*gw, C*T*P*P] and grid [1, gh, gw]; rows in (gh/m, gw/m, m, m) order, columns (C, T, P, P). */
export function qwenPreprocess(cfg: QwenImageConfig, img: DecodedImage): { input: NativeImageInput; tokens: number } {
  const [h, w] = qwenTargetSize(cfg, img.height, img.width);
  const P = cfg.patchSize;
  const m = cfg.mergeSize;
  const T = cfg.temporalPatchSize;
  if (h % (P * m) !== 0 || w % (P * m) !== 0) {
    throw new InvalidRequestError(`image size ${w}x${h} is not a multiple of ${P * m} (set do_resize in the processor config)`, 'image');
  }
  const chw = normalizeToChw(resizeDecoded(img, w, h, cfg.resample), w, h, cfg.norm);
  const gh = h / P;
  const gw = w / P;
  const cols = 3 * T * P * P;
  const out = new Float32Array(gh * gw * cols);
  const plane = w * h;
  let row = 0;
  for (let bh = 0; bh < gh / m; bh++) {
    for (let bw = 0; bw < gw / m; bw++) {
      for (let mh = 0; mh < m; mh++) {
        for (let mw = 0; mw < m; mw++) {
          const y0 = (bh * m + mh) * P;
          const x0 = (bw * m + mw) * P;
          let o = row * cols;
          for (let c = 0; c < 3; c++) {
            const first = o;
            for (let py = 0; py < P; py++) {
              const src = c * plane + (y0 + py) * w + x0;
              for (let px = 0; px < P; px++) out[o++] = chw[src + px];
            }
            // The temporal axis repeats the one frame T times.
            for (let t = 1; t < T; t++, o += P * P) out.copyWithin(o, first, first + P * P);
          }
          row++;
        }
      }
    }
  }
  return { input: { pixels: out, grid: [1, gh, gw] }, tokens: (gh * gw) / (m * m) };
}
