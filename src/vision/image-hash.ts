// Content hash of a decoded image: the key of the encoder cache and of prefix-cache blocks that hold
// image tokens. Over decoded pixels (not the bytes), so any encoding of identical pixels hits.

import { createHash } from 'node:crypto';

import type { DecodedImage } from './decode-image.js';

/** Hex sha256 of "rgb8 {W}x{H}\n" followed by the [H, W, 3] RGB bytes. */
export function imageHash(img: DecodedImage): string {
  return createHash('sha256').update(`rgb8 ${img.width}x${img.height}\n`).update(img.data).digest('hex');
}

/** A distinct key for the same pixels preprocessed differently (e.g. a lower max_pixels for detail "low"). */
export function variantHash(base: string, variant: string): string {
  return createHash('sha256').update(`${base}|${variant}`).digest('hex');
}
