// Image bytes -> RGB uint8 pixels with sharp (libvips runs off the main thread), matching what the
// Hugging Face processors see after transformers' load_image: EXIF orientation applied, then
// PIL convert("RGB"), which drops alpha (transformers 5 does not composite on white) and ignores ICC.

import sharp, { type Metadata } from 'sharp';

import { InvalidRequestError } from '../errors/request-errors.js';

/** Decoded pixels, row-major [height, width, 3] RGB. */
export interface DecodedImage {
  width: number;
  height: number;
  data: Uint8Array;
}

export interface DecodeImageOptions {
  /** Largest accepted width*height of the encoded image (checked before decoding). Default 50 MP. */
  maxPixels?: number;
  /** Request parameter named in error messages. Default 'image'. */
  param?: string;
}

export const DEFAULT_MAX_IMAGE_PIXELS = 50_000_000;

/** Formats accepted; names as sharp's metadata().format reports them. SVG, raw and PDF are refused. */
const FORMATS = new Set(['jpeg', 'png', 'webp', 'gif', 'tiff', 'heif']);
const FORMAT_LIST = 'PNG, JPEG, WebP, GIF, TIFF or AVIF';

function describe(err: unknown): string {
  const msg = err instanceof Error ? err.message : String(err);
  // libvips messages are multi-line; the first line says what failed.
  return msg.split('\n')[0].trim();
}

/** Decodes one image; every client-caused failure is an InvalidRequestError naming the problem. */
export async function decodeImage(bytes: Uint8Array, options: DecodeImageOptions = {}): Promise<DecodedImage> {
  const param = options.param ?? 'image';
  const maxPixels = options.maxPixels ?? DEFAULT_MAX_IMAGE_PIXELS;
  if (bytes.length === 0) throw new InvalidRequestError('image is empty (0 bytes)', param);
  const input = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

  let meta: Metadata;
  try {
    meta = await sharp(input, { limitInputPixels: false }).metadata();
  } catch (err) {
    throw new InvalidRequestError(
      `image could not be read: not a supported image (${FORMAT_LIST}) or corrupt bytes (${describe(err)})`,
      param,
    );
  }
  if (!meta.format || !FORMATS.has(meta.format)) {
    throw new InvalidRequestError(`unsupported image format ${meta.format ?? 'unknown'}: send ${FORMAT_LIST}`, param);
  }
  const w = meta.width ?? 0;
  const h = meta.height ?? 0;
  if (w <= 0 || h <= 0) throw new InvalidRequestError(`image has zero size (${w}x${h})`, param);
  if (w * h > maxPixels) {
    throw new InvalidRequestError(
      `image is too large: ${w}x${h} = ${w * h} pixels, the limit is ${maxPixels}; downscale it first`,
      param,
    );
  }

  try {
    const { data, info } = await sharp(input, {
      limitInputPixels: maxPixels,
      failOn: 'error',
      ignoreIcc: true, // PIL does not colour-manage; neither do the HF processors
      pages: 1, // animated GIF/WebP: first frame, as PIL opens it
    })
      .autoOrient()
      .toColourspace('srgb')
      .removeAlpha()
      .raw({ depth: 'uchar' })
      .toBuffer({ resolveWithObject: true });
    if (info.channels !== 3) throw new Error(`expected 3 channels after conversion, got ${info.channels}`);
    return { width: info.width, height: info.height, data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength) };
  } catch (err) {
    throw new InvalidRequestError(`image could not be decoded (corrupt or truncated ${meta.format}): ${describe(err)}`, param);
  }
}
