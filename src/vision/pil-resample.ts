// Pillow's Image.resize (libImaging/Resample.c) for 8-bit RGB, reproduced bit for bit: the Hugging Face
// PIL-backend image processors resize with it, so exact pixel_values parity needs its fixed-point arithmetic.

import type { DecodedImage } from './decode-image.js';

export type ResampleFilter = 'bilinear' | 'bicubic';

interface Filter {
  fn: (x: number) => number;
  support: number;
}

// Same expression order as Resample.c so every double rounds identically.
function bilinearFilter(x: number): number {
  if (x < 0.0) x = -x;
  if (x < 1.0) return 1.0 - x;
  return 0.0;
}

// Keys cubic with a = -0.5 (Pillow's BICUBIC).
function bicubicFilter(x: number): number {
  const a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

const FILTERS: Record<ResampleFilter, Filter> = {
  bilinear: { fn: bilinearFilter, support: 1.0 },
  bicubic: { fn: bicubicFilter, support: 2.0 },
};

// 8 bits for the result, 2 for overflow of negative/above-one lobes (PRECISION_BITS = 32 - 8 - 2).
const PRECISION_BITS = 22;
const ONE = 1 << PRECISION_BITS;
const HALF = 1 << (PRECISION_BITS - 1);

/** Per output pixel: first source index, tap count, and `ksize` fixed-point weights. */
export interface ResampleCoeffs {
  ksize: number;
  bounds: Int32Array; // [outSize, 2] (xmin, count)
  weights: Int32Array; // [outSize, ksize]
}

/** precompute_coeffs + normalize_coeffs_8bpc for the box [0, inSize). */
export function resampleCoeffs(inSize: number, outSize: number, filterName: ResampleFilter): ResampleCoeffs {
  const filter = FILTERS[filterName];
  const scale = inSize / outSize;
  const filterscale = scale < 1.0 ? 1.0 : scale;
  const support = filter.support * filterscale;
  const ksize = Math.ceil(support) * 2 + 1;
  const bounds = new Int32Array(outSize * 2);
  const weights = new Int32Array(outSize * ksize);
  const k = new Float64Array(ksize);
  const ss = 1.0 / filterscale;
  for (let xx = 0; xx < outSize; xx++) {
    const center = (xx + 0.5) * scale;
    // C casts with (int): truncation toward zero, then clamps.
    let xmin = Math.trunc(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    let xmax = Math.trunc(center + support + 0.5);
    if (xmax > inSize) xmax = inSize;
    xmax -= xmin;
    let ww = 0.0;
    for (let x = 0; x < xmax; x++) {
      const w = filter.fn((x + xmin - center + 0.5) * ss);
      k[x] = w;
      ww += w;
    }
    for (let x = 0; x < xmax; x++) {
      const v = ww !== 0.0 ? k[x] / ww : k[x];
      weights[xx * ksize + x] = v < 0 ? Math.trunc(-0.5 + v * ONE) : Math.trunc(0.5 + v * ONE);
    }
    bounds[xx * 2] = xmin;
    bounds[xx * 2 + 1] = xmax;
  }
  return { ksize, bounds, weights };
}

// clip8: arithmetic shift then saturate (Pillow's lookup table covers -640..639, i.e. the same clamp).
function clip8(v: number): number {
  const s = v >> PRECISION_BITS;
  return s < 0 ? 0 : s > 255 ? 255 : s;
}

/** Horizontal pass over rows [rowStart, rowStart + rows) of an interleaved image with `ch` channels. */
function resampleHorizontal(
  src: Uint8Array,
  srcW: number,
  rowStart: number,
  rows: number,
  outW: number,
  ch: number,
  c: ResampleCoeffs,
): Uint8Array {
  const out = new Uint8Array(rows * outW * ch);
  const { ksize, bounds, weights } = c;
  if (ch === 3) {
    // The common case, with the three accumulators in locals (sums stay inside int32 by Pillow's design).
    for (let y = 0; y < rows; y++) {
      const rowBase = (y + rowStart) * srcW * 3;
      let o = y * outW * 3;
      for (let xx = 0; xx < outW; xx++) {
        const n = bounds[xx * 2 + 1];
        const kb = xx * ksize;
        let p = rowBase + bounds[xx * 2] * 3;
        let s0 = HALF;
        let s1 = HALF;
        let s2 = HALF;
        for (let x = 0; x < n; x++, p += 3) {
          const w = weights[kb + x];
          s0 += src[p] * w;
          s1 += src[p + 1] * w;
          s2 += src[p + 2] * w;
        }
        out[o++] = clip8(s0);
        out[o++] = clip8(s1);
        out[o++] = clip8(s2);
      }
    }
    return out;
  }
  const acc = new Int32Array(ch);
  for (let y = 0; y < rows; y++) {
    const rowBase = (y + rowStart) * srcW * ch;
    const outBase = y * outW * ch;
    for (let xx = 0; xx < outW; xx++) {
      const xmin = bounds[xx * 2];
      const n = bounds[xx * 2 + 1];
      const kb = xx * ksize;
      acc.fill(HALF);
      for (let x = 0; x < n; x++) {
        const w = weights[kb + x];
        const p = rowBase + (x + xmin) * ch;
        for (let k = 0; k < ch; k++) acc[k] += src[p + k] * w;
      }
      for (let k = 0; k < ch; k++) out[outBase + xx * ch + k] = clip8(acc[k]);
    }
  }
  return out;
}

/** Vertical pass; `bounds` already shifted so row 0 of `src` is the first row used. */
function resampleVertical(src: Uint8Array, w: number, outH: number, ch: number, c: ResampleCoeffs, shift: number): Uint8Array {
  const out = new Uint8Array(outH * w * ch);
  const { ksize, bounds, weights } = c;
  const rowLen = w * ch;
  const acc = new Int32Array(rowLen);
  for (let yy = 0; yy < outH; yy++) {
    const ymin = bounds[yy * 2] - shift;
    const n = bounds[yy * 2 + 1];
    const kb = yy * ksize;
    const ob = yy * rowLen;
    // Taps in groups of four over contiguous rows (about 2x faster than one tap at a time); a missing
    // tap reads row 0 of the group with weight 0, which adds exactly nothing.
    for (let g = 0; g < n; g += 4) {
      const r0 = (ymin + g) * rowLen;
      const w0 = weights[kb + g];
      const w1 = g + 1 < n ? weights[kb + g + 1] : 0;
      const w2 = g + 2 < n ? weights[kb + g + 2] : 0;
      const w3 = g + 3 < n ? weights[kb + g + 3] : 0;
      const r1 = g + 1 < n ? r0 + rowLen : r0;
      const r2 = g + 2 < n ? r0 + 2 * rowLen : r0;
      const r3 = g + 3 < n ? r0 + 3 * rowLen : r0;
      const last = g + 4 >= n;
      if (g === 0 && last) {
        for (let i = 0; i < rowLen; i++) {
          out[ob + i] = clip8(HALF + src[r0 + i] * w0 + src[r1 + i] * w1 + src[r2 + i] * w2 + src[r3 + i] * w3);
        }
      } else if (g === 0) {
        for (let i = 0; i < rowLen; i++) acc[i] = HALF + src[r0 + i] * w0 + src[r1 + i] * w1 + src[r2 + i] * w2 + src[r3 + i] * w3;
      } else {
        for (let i = 0; i < rowLen; i++) acc[i] += src[r0 + i] * w0 + src[r1 + i] * w1 + src[r2 + i] * w2 + src[r3 + i] * w3;
        if (last) for (let i = 0; i < rowLen; i++) out[ob + i] = clip8(acc[i]);
      }
    }
  }
  return out;
}

/** Pillow `Image.resize((outW, outH), filter)` of an interleaved uint8 image [h, w, ch]. */
export function pilResize(
  src: Uint8Array,
  w: number,
  h: number,
  outW: number,
  outH: number,
  filter: ResampleFilter,
  ch = 3,
): Uint8Array {
  if (src.length !== w * h * ch) throw new Error(`pilResize: expected ${w * h * ch} bytes for ${w}x${h}x${ch}, got ${src.length}`);
  if (outW < 1 || outH < 1) throw new Error(`pilResize: bad output size ${outW}x${outH}`);
  if (outW === w && outH === h) return src.slice();
  const needH = outW !== w;
  const needV = outH !== h;
  const ch0 = resampleCoeffs(w, outW, filter);
  const cv = resampleCoeffs(h, outH, filter);
  // Rows of the source the vertical pass reads (Pillow trims the horizontal pass to them).
  const yFirst = cv.bounds[0];
  const yLast = cv.bounds[outH * 2 - 2] + cv.bounds[outH * 2 - 1];
  let cur = src;
  let shift = 0;
  if (needH) {
    cur = resampleHorizontal(src, w, yFirst, yLast - yFirst, outW, ch, ch0);
    shift = yFirst;
  }
  return needV ? resampleVertical(cur, outW, outH, ch, cv, shift) : cur;
}

/** A decoded image's RGB pixels at w x h: its own buffer, uncopied, when the size already matches. */
export function resizeDecoded(img: DecodedImage, w: number, h: number, filter: ResampleFilter): Uint8Array {
  return w === img.width && h === img.height ? img.data : pilResize(img.data, img.width, img.height, w, h, filter);
}
