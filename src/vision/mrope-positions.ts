// Qwen2.5-VL / Qwen3-VL 3-axis (T, H, W) RoPE position ids of a prompt, as transformers' get_rope_index
// for images: text runs count up on all axes; an image block gets (cur, cur + row, cur + col) and then
// advances cur by max(h, w) merged units. Decode positions continue at index + ropeDelta on every axis.

export interface MropeImageSpan {
  offset: number; // first image token in the prompt
  grid: readonly [number, number, number]; // image_grid_thw in patches
}

export interface MropePositions {
  positions: Int32Array; // [3 * n] axis-major: T[0..n), H[0..n), W[0..n)
  ropeDelta: number; // max position + 1 - n
}

export function mropePositions(n: number, images: readonly MropeImageSpan[], mergeSize: number): MropePositions {
  const pos = new Int32Array(3 * n);
  let cur = 0;
  let i = 0;
  let max = -1;
  const text = (end: number): void => {
    if (end <= i) return;
    for (; i < end; i++, cur++) {
      pos[i] = cur;
      pos[n + i] = cur;
      pos[2 * n + i] = cur;
    }
    max = Math.max(max, cur - 1);
  };
  for (const img of images) {
    if (img.offset < i) throw new Error(`mropePositions: image spans overlap or are out of order at ${img.offset}`);
    text(img.offset);
    const [t, gh, gw] = img.grid;
    const h = Math.floor(gh / mergeSize);
    const w = Math.floor(gw / mergeSize);
    if (img.offset + t * h * w > n) throw new Error(`mropePositions: image at ${img.offset} runs past the prompt end ${n}`);
    for (let ti = 0; ti < t; ti++) {
      for (let r = 0; r < h; r++) {
        for (let c = 0; c < w; c++, i++) {
          pos[i] = cur + ti;
          pos[n + i] = cur + r;
          pos[2 * n + i] = cur + c;
        }
      }
    }
    max = Math.max(max, cur + Math.max(t - 1, h - 1, w - 1));
    cur += Math.max(h, w);
  }
  text(n);
  return { positions: pos, ropeDelta: n === 0 ? 0 : max + 1 - n };
}

/** Positions of prompt tokens [start, end) out of an axis-major [3 * n] array, as [3 * (end - start)]. */
export function slicePositions(positions: Int32Array, n: number, start: number, end: number): Int32Array {
  const m = end - start;
  const out = new Int32Array(3 * m);
  for (let a = 0; a < 3; a++) out.set(positions.subarray(a * n + start, a * n + end), a * m);
  return out;
}

/** Positions of generated tokens at sequence indices [start, start + m): index + ropeDelta on all axes. */
export function decodePositions(start: number, m: number, ropeDelta: number): Int32Array {
  const out = new Int32Array(3 * m);
  for (let a = 0; a < 3; a++) for (let i = 0; i < m; i++) out[a * m + i] = start + i + ropeDelta;
  return out;
}
