// A served vision model over the FakeModel's vision tower: images are fetched and decoded by the real
// src/vision code (data: URIs, SSRF-guarded http, sharp), then "preprocessed" to a small grid of
// patch means; chat prompts are the byte format of byteModel with placeholder runs for images.
import sharp from 'sharp';
import type { ServedModel, ServedVision, LoadedImage } from '../../src/server/served-model.js';
import { decodeImage, fetchImageBytes, imageHash, type DecodedImage } from '../../src/vision/index.js';
import type { NativeImageInput } from '../../src/native/types.js';
import { byteModel } from './helpers.js';
import { imagePrompt } from '../engine/multimodal-helpers.js';

export interface FakeLoaded extends LoadedImage {
  input: NativeImageInput;
}

/** Grid [1, gh, gw] with even gh, gw (one patch per ~16 pixels, at most 8x8; detail low: 2x2). */
export function fakePreprocess(img: DecodedImage, low: boolean): FakeLoaded {
  const clamp = (x: number) => Math.min(8, Math.max(2, 2 * Math.round(x / 32)));
  const gh = low ? 2 : clamp(img.height);
  const gw = low ? 2 : clamp(img.width);
  const pixels = new Float32Array(gh * gw * 3);
  for (let y = 0; y < img.height; y++) {
    for (let x = 0; x < img.width; x++) {
      const p = (Math.floor((y * gh) / img.height) * gw + Math.floor((x * gw) / img.width)) * 3;
      for (let c = 0; c < 3; c++) pixels[p + c]! += img.data[(y * img.width + x) * 3 + c]! / 255;
    }
  }
  return { hash: imageHash(img) + (low ? ':low' : ''), tokens: (gh * gw) / 4, input: { pixels, grid: [1, gh, gw] } };
}

export function fakeVision(opts: { allowRemote?: boolean; maxImages?: number; maxPixels?: number } = {}): ServedVision {
  return {
    maxImagesPerRequest: opts.maxImages ?? 4,
    allowRemote: opts.allowRemote ?? false,
    async loadImage(url, detail) {
      // allowLoopback: the test's own HTTP server is on 127.0.0.1.
      const bytes = await fetchImageBytes(url, { allowRemote: opts.allowRemote ?? false, allowLoopback: true, maxBytes: 1024 * 1024, timeoutMs: 2000 });
      return fakePreprocess(await decodeImage(bytes, { maxPixels: opts.maxPixels ?? 1_000_000 }), detail === 'low');
    },
    encodeChat(messages, images) {
      const parts: (string | { hash: string; input: NativeImageInput; tokens: number })[] = [];
      let k = 0;
      for (const m of messages) {
        parts.push(`${m.role}: `);
        if (typeof m.content === 'string') parts.push(m.content);
        else for (const p of m.content ?? []) parts.push(p.type === 'image' ? (images[k++] as FakeLoaded) : (p.text ?? ''));
        parts.push('\n');
      }
      parts.push('assistant:');
      return imagePrompt(parts, true);
    },
  };
}

export function visionByteModel(contextLength: number, vision: ServedVision): ServedModel {
  return { ...byteModel(contextLength), vision };
}

/** A PNG of w x h with a pattern from `seed`. */
export async function png(w: number, h: number, seed: number): Promise<Buffer> {
  const raw = Buffer.alloc(w * h * 3);
  for (let i = 0; i < raw.length; i++) raw[i] = (i * (seed * 7 + 3) + seed * 31) & 0xff;
  return sharp(raw, { raw: { width: w, height: h, channels: 3 } }).png().toBuffer();
}

export const dataUri = (buf: Buffer, type = 'image/png') => `data:${type};base64,${buf.toString('base64')}`;
