import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';

import { describe, expect, it } from 'vitest';

import { InvalidRequestError } from '../../src/errors/request-errors.js';
import { decodeImage } from '../../src/vision/decode-image.js';

const dir = join(import.meta.dirname, 'fixtures', 'decode');
const expected = (
  JSON.parse(readFileSync(join(dir, 'expected.json'), 'utf8')) as {
    images: Record<string, { width: number; height: number; rgb: string }>;
  }
).images;

function maxDiff(a: Uint8Array, b: Uint8Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

describe('decodeImage matches PIL (exif_transpose + convert("RGB"))', () => {
  for (const [name, e] of Object.entries(expected)) {
    it(name, async () => {
      const img = await decodeImage(new Uint8Array(readFileSync(join(dir, name))));
      expect([img.width, img.height]).toEqual([e.width, e.height]);
      const want = new Uint8Array(Buffer.from(e.rgb, 'base64'));
      expect(img.data.length).toBe(want.length);
      // Exact for JPEG too: mozjpeg (sharp) and libjpeg-turbo (PIL) share the islow IDCT and fancy upsampling.
      expect(maxDiff(img.data, want)).toBe(0);
    });
  }
});

async function rejects(bytes: Uint8Array, pattern: RegExp, maxPixels?: number): Promise<void> {
  const err = await decodeImage(bytes, { maxPixels }).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(InvalidRequestError);
  expect((err as Error).message).toMatch(pattern);
}

describe('decodeImage refuses bad input with a clear message', () => {
  const png = new Uint8Array(readFileSync(join(dir, 'rgb.png')));

  it('empty bytes', () => rejects(new Uint8Array(0), /empty/));
  it('random bytes', () => rejects(new Uint8Array(64).fill(7), /not a supported image/));
  it('truncated PNG', () => rejects(png.subarray(0, 60), /could not be (read|decoded)/));
  it('truncated JPEG body', async () => {
    const jpg = new Uint8Array(readFileSync(join(dir, 'rgb.jpg')));
    await rejects(jpg.subarray(0, Math.floor(jpg.length * 0.6)), /could not be (read|decoded)/);
  });
  it('SVG is refused', () =>
    rejects(new TextEncoder().encode('<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"></svg>'), /unsupported image format svg/));
  it('more pixels than the limit', () => rejects(png, /too large: 13x9 = 117 pixels, the limit is 100/, 100));
  it('zero width', async () => {
    const zero = Buffer.from(png);
    zero.writeUInt32BE(0, 16);
    zero.writeUInt32BE(crc32(zero.subarray(12, 29)), 29);
    await rejects(new Uint8Array(zero), /zero size|could not be read/);
  });
  it('a huge declared size is refused before decoding', async () => {
    // The small PNG with its IHDR patched to 30000x30000 (CRC fixed): refused from the header alone.
    const big = Buffer.from(png);
    big.writeUInt32BE(30000, 16);
    big.writeUInt32BE(30000, 20);
    big.writeUInt32BE(crc32(big.subarray(12, 29)), 29);
    await rejects(new Uint8Array(big), /too large: 30000x30000/);
  });
});
