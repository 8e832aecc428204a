// Rescale + normalize of an RGB uint8 image into channel-major float32, with the exact float arithmetic
// of transformers' PIL backend: rescale in float64 then cast to f32; (x - mean) / std in f32.

export interface NormalizeParams {
  doRescale: boolean;
  rescaleFactor: number;
  doNormalize: boolean;
  mean: readonly [number, number, number];
  std: readonly [number, number, number];
}

/** [h, w, 3] uint8 -> [3, h, w] float32. */
export function normalizeToChw(rgb: Uint8Array, w: number, h: number, p: NormalizeParams): Float32Array {
  const plane = w * h;
  const out = new Float32Array(3 * plane);
  // One lookup table per channel: 256 possible inputs, each computed exactly as numpy does.
  for (let c = 0; c < 3; c++) {
    const lut = new Float32Array(256);
    const m = Math.fround(p.mean[c]);
    const s = Math.fround(p.std[c]);
    for (let v = 0; v < 256; v++) {
      let x = p.doRescale ? Math.fround(v * p.rescaleFactor) : v;
      // f32 - f32 and f32 / f32 are exact in double then rounded once: identical to numpy float32 ops.
      if (p.doNormalize) x = Math.fround(Math.fround(x - m) / s);
      lut[v] = x;
    }
    const base = c * plane;
    for (let i = 0; i < plane; i++) out[base + i] = lut[rgb[i * 3 + c]];
  }
  return out;
}
