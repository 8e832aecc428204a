// Image requests for the FakeModel's vision tower: prompts with placeholder spans, pixels derived
// from a seed, and Qwen2-VL-style 3-axis positions with their rope delta.
import type { MultimodalInput, RequestImage } from '../../src/engine/multimodal.js';
import { bytes } from './helpers.js';

export const PLACEHOLDER = 1; // a token id the fake never emits

/** An image of grid [1, h, w] patches (the fake merges 2x2: h*w/4 tokens); pixels from `seed`. */
export function fakeImage(seed: number, h: number, w: number): { hash: string; input: RequestImage['input']; tokens: number } {
  const pixels = new Float32Array(h * w * 3);
  let s = seed >>> 0;
  for (let i = 0; i < pixels.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    pixels[i] = s / 2 ** 32;
  }
  return { hash: `img-${seed}-${h}x${w}`, input: { pixels, grid: [1, h, w] }, tokens: (h * w) / 4 };
}

export interface ImagePrompt {
  promptIds: number[];
  multimodal: MultimodalInput;
}

/**
 * A prompt of text pieces and images in order, e.g. ['look: ', img, ' and ', img2, ' now'], with
 * mRoPE positions (when `mrope`) computed as Qwen2-VL does: text advances all axes together; an
 * image's tokens get (t, row, col) offsets; the next text starts after the largest position.
 */
export function imagePrompt(parts: (string | ReturnType<typeof fakeImage>)[], mrope: boolean, bidirectional = false): ImagePrompt {
  const ids: number[] = [];
  const images: RequestImage[] = [];
  const axes: number[][] = [[], [], []];
  let cur = 0;
  for (const p of parts) {
    if (typeof p === 'string') {
      for (const t of bytes(p)) {
        ids.push(t);
        for (const a of axes) a.push(cur);
        cur++;
      }
      continue;
    }
    const [, h, w] = p.input.grid;
    images.push({ hash: p.hash, input: p.input, offset: ids.length, length: p.tokens });
    let max = cur;
    for (let r = 0; r < h / 2; r++) {
      for (let c = 0; c < w / 2; c++) {
        ids.push(PLACEHOLDER);
        axes[0]!.push(cur);
        axes[1]!.push(cur + r);
        axes[2]!.push(cur + c);
        max = Math.max(max, cur + r, cur + c);
      }
    }
    cur = max + 1;
  }
  const mm: MultimodalInput = { images };
  if (mrope) {
    mm.positions = Int32Array.from([...axes[0]!, ...axes[1]!, ...axes[2]!]);
    mm.ropeDelta = cur - ids.length;
  }
  if (bidirectional) mm.bidirectional = true;
  return { promptIds: ids, multimodal: mm };
}
