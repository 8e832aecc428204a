// A request's images as the engine sees them: where each image's placeholder tokens sit in the
// prompt, its preprocessed pixels (for the encoder) and its content hash (for the encoder cache and
// the prefix cache), plus the request's own mRoPE positions and rope delta. All of it travels with
// the request; the model never holds per-request state.
import type { NativeImageEmbedding, NativeImageInput, NativeRowEmbeds } from '../native/types.js';
import { InvalidRequestError } from '../errors/request-errors.js';

export interface RequestImage {
  /** Content hash of the decoded image (TV's imageHash). */
  hash: string;
  input: NativeImageInput;
  /** First placeholder token of this image in promptIds. */
  offset: number;
  /** Placeholder tokens (= embedding rows the encoder returns for it, unless embedAt is given). */
  length: number;
  /**
   * Pixtral: the span also holds [IMG_BREAK]/[IMG_END] text tokens; these increasing offsets inside it are the
   * tokens that take the embedding rows, in order. Absent: every token of the span.
   */
  embedAt?: Int32Array;
}

export interface MultimodalInput {
  /** In prompt order, spans disjoint. */
  images: RequestImage[];
  /** mRoPE models: [3 * promptIds.length] axis-major (T, H, W) positions of the prompt tokens. */
  positions?: Int32Array;
  /** mRoPE models: tokens at index i >= promptIds.length use position i + ropeDelta on all axes. */
  ropeDelta?: number;
  /** Gemma 3: each image span attends to itself both ways during prefill. */
  bidirectional?: boolean;
}

/** A validated span [start, end) of prompt tokens that one image's embeddings replace. */
export interface ImageSpan {
  start: number;
  end: number;
  /** Encoder cache key: content hash + preprocessed geometry (the same image at another size differs). */
  key: string;
  image: RequestImage;
}

/** Throws InvalidRequestError when the images do not fit the prompt (the message says how). */
export function checkMultimodal(mm: MultimodalInput, promptLength: number, mrope: boolean, hasVision: boolean): ImageSpan[] {
  if (mm.images.length > 0 && !hasVision) throw new InvalidRequestError('this model does not accept images (it has no vision tower)', 'messages');
  const spans: ImageSpan[] = [];
  let prevEnd = 0;
  for (const [i, img] of mm.images.entries()) {
    const { offset, length } = img;
    if (!Number.isInteger(offset) || !Number.isInteger(length) || length < 1 || offset < prevEnd || offset + length > promptLength) {
      throw new InvalidRequestError(
        `image ${i}: placeholder span [${offset}, ${offset + length}) does not fit a ${promptLength}-token prompt after the previous image`,
        'messages',
      );
    }
    if (img.embedAt !== undefined) {
      const at = img.embedAt;
      const ok = at.length >= 1 && at.every((x, j) => Number.isInteger(x) && x >= 0 && x < length && (j === 0 || x > at[j - 1]!));
      if (!ok) throw new InvalidRequestError(`image ${i}: embedAt must be increasing offsets inside its ${length}-token span`, 'messages');
    }
    const g = img.input.grid;
    if (g.length !== 3 || g.some((x) => !Number.isInteger(x) || x < 1)) throw new InvalidRequestError(`image ${i}: bad grid ${JSON.stringify(g)}`, 'messages');
    spans.push({ start: offset, end: offset + length, key: `${img.hash}:${g.join('x')}:${img.input.pixels.length}`, image: img });
    prevEnd = offset + length;
  }
  if (mm.positions !== undefined) {
    if (!mrope) throw new InvalidRequestError('3-axis positions given for a model without mRoPE', 'messages');
    if (mm.positions.length !== 3 * promptLength) {
      throw new InvalidRequestError(`mRoPE positions have ${mm.positions.length} entries; the prompt needs ${3 * promptLength}`, 'messages');
    }
    if (!Number.isInteger(mm.ropeDelta ?? 0)) throw new InvalidRequestError('ropeDelta must be an integer', 'messages');
  } else if (mrope && mm.images.length > 0) {
    throw new InvalidRequestError('an image request on an mRoPE model needs its 3-axis positions', 'messages');
  }
  return spans;
}

/**
 * Where a chunk that starts at `start` and may take up to `budget` tokens (computing at most up to
 * `limit`) should end so that no image span is split: before the first span it would cut; when that
 * span starts the chunk and does not fit, after it (a span is never starved), unless `mayDefer` and
 * the span fits in a whole step's budget (`fullBudget`): then `start` (wait for the next step).
 */
export function chunkEnd(spans: readonly ImageSpan[], start: number, limit: number, budget: number, fullBudget: number, mayDefer: boolean): number {
  const end = Math.min(limit, start + budget);
  for (const s of spans) {
    if (s.end <= start) continue;
    if (s.start >= end) break;
    if (s.end <= end) continue; // wholly inside
    if (s.start > start) return s.start; // cut before it
    return mayDefer && budget < fullBudget && s.end - s.start <= fullBudget ? start : s.end;
  }
  return end;
}

/** Positions of tokens [from, from + n) of a request: [n] (1-D) or [3n] axis-major (mRoPE). */
export function rowPositions(from: number, n: number, mrope: boolean, promptLength: number, mm: MultimodalInput | null): Int32Array {
  if (!mrope) {
    const p = new Int32Array(n);
    for (let i = 0; i < n; i++) p[i] = from + i;
    return p;
  }
  const p = new Int32Array(3 * n);
  const stored = mm?.positions;
  const delta = mm?.ropeDelta ?? 0;
  for (let i = 0; i < n; i++) {
    const idx = from + i;
    for (let a = 0; a < 3; a++) {
      p[a * n + i] = stored !== undefined && idx < promptLength ? stored[a * promptLength + idx]! : idx + delta;
    }
  }
  return p;
}

/** The embeds (and Gemma 3 bidirectional pairs) of row tokens [from, from + n). */
export function rowEmbeds(
  spans: readonly ImageSpan[],
  embeddings: ReadonlyMap<number, NativeImageEmbedding>,
  from: number,
  n: number,
  hidden: number,
  bidirectional: boolean,
): { embeds?: NativeRowEmbeds; bidirectional?: Int32Array } {
  // image rows [a, b) of span i; `at` (Pixtral): the span offsets of rows a.. (tokens between rows get none)
  const parts: { span: number; a: number; b: number; at?: Int32Array }[] = [];
  for (const [i, s] of spans.entries()) {
    const a = Math.max(s.start, from);
    const b = Math.min(s.end, from + n);
    if (a >= b) continue;
    const at = s.image.embedAt;
    if (at === undefined) {
      parts.push({ span: i, a: a - s.start, b: b - s.start });
      continue;
    }
    let r0 = 0;
    while (r0 < at.length && at[r0]! < a - s.start) r0++;
    let r1 = r0;
    while (r1 < at.length && at[r1]! < b - s.start) r1++;
    if (r0 < r1) parts.push({ span: i, a: r0, b: r1, at });
  }
  if (parts.length === 0) return {};
  let m = 0;
  for (const p of parts) m += p.b - p.a;
  const offsets = new Int32Array(m);
  const data = new Float32Array(m * hidden);
  const first = embeddings.get(parts[0]!.span);
  const layers = first?.deepstack !== undefined ? first.deepstack.length / (first.tokens * hidden) : 0;
  const deepstack = layers > 0 ? new Float32Array(layers * m * hidden) : undefined;
  const pairs: number[] = [];
  let k = 0;
  for (const p of parts) {
    const s = spans[p.span]!;
    const e = embeddings.get(p.span);
    if (e === undefined) throw new Error(`image ${p.span} has no embeddings at step time`);
    const rows = p.b - p.a;
    for (let r = 0; r < rows; r++) offsets[k + r] = s.start + (p.at !== undefined ? p.at[p.a + r]! : p.a + r) - from;
    data.set(e.embeddings.subarray(p.a * hidden, p.b * hidden), k * hidden);
    if (deepstack !== undefined) {
      if (e.deepstack === undefined) throw new Error(`image ${p.span} has no DeepStack features`);
      for (let l = 0; l < layers; l++) {
        const src = e.deepstack.subarray((l * e.tokens + p.a) * hidden, (l * e.tokens + p.b) * hidden);
        deepstack.set(src, (l * m + k) * hidden);
      }
    }
    if (bidirectional) {
      const [a, b] = p.at !== undefined ? [p.at[p.a]!, p.at[p.b - 1]! + 1] : [p.a, p.b];
      pairs.push(s.start + a - from, s.start + b - from);
    }
    k += rows;
  }
  const embeds: NativeRowEmbeds = deepstack !== undefined ? { offsets, data, deepstack } : { offsets, data };
  return bidirectional ? { embeds, bidirectional: Int32Array.from(pairs) } : { embeds };
}
