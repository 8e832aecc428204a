import sharp from 'sharp';
import { describe, expect, it } from 'vitest';

import { decodeImage } from '../../src/vision/decode-image.js';
import { imageHash } from '../../src/vision/image-hash.js';

describe('imageHash', () => {
  const raw = Buffer.alloc(16 * 8 * 3);
  for (let i = 0; i < raw.length; i++) raw[i] = (i * 37) & 255;
  const encode = (fmt: 'png' | 'webp' | 'jpeg') => {
    const s = sharp(raw, { raw: { width: 16, height: 8, channels: 3 } });
    const out = fmt === 'png' ? s.png() : fmt === 'webp' ? s.webp({ lossless: true }) : s.jpeg({ quality: 90 });
    return out.toBuffer();
  };

  it('depends on decoded pixels, not on the container', async () => {
    const png = await decodeImage(await encode('png'));
    const webp = await decodeImage(await encode('webp'));
    const jpeg = await decodeImage(await encode('jpeg'));
    expect(imageHash(png)).toMatch(/^[0-9a-f]{64}$/);
    expect(imageHash(webp)).toBe(imageHash(png)); // lossless re-encode: same pixels, cache hit
    expect(imageHash(jpeg)).not.toBe(imageHash(png)); // lossy re-encode: different pixels
  });
  it('includes the dimensions', () => {
    const data = new Uint8Array(12);
    expect(imageHash({ width: 4, height: 1, data })).not.toBe(imageHash({ width: 2, height: 2, data }));
  });
});
