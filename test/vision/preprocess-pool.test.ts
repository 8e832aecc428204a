// The preprocessing worker pool: bit-identical to the in-thread path on every family's real settings,
// the event loop keeps turning while a large image is preprocessed, and the bounds (queue, deadline,
// crashed/stuck worker) turn into clean errors instead of hung requests. Needs dist/ (npm run compile).

import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { EngineUnavailableError } from '../../src/errors/request-errors.js';
import { InvalidRequestError } from '../../src/errors/request-errors.js';
import { loadTokenizerDir } from '../../src/tokenizer/load-tokenizer.js';
import { decodeImage, type DecodedImage } from '../../src/vision/decode-image.js';
import { gemma3ImageConfig } from '../../src/vision/gemma3-image-processor.js';
import { type PreparedImage, type PreprocessSpec, prepareWithSpec } from '../../src/vision/prepare-image.js';
import { PreprocessPool } from '../../src/vision/preprocess-pool.js';
import { VisionProcessor } from '../../src/vision/processor.js';
import { qwenImageConfig } from '../../src/vision/qwen-image-processor.js';

const root = join(import.meta.dirname, '..', 'fixtures', 'vlm');

/** A deterministic noisy gradient, so resampling sees real structure. */
function synthetic(width: number, height: number, seed = 1): DecodedImage {
  const data = new Uint8Array(width * height * 3);
  let s = seed >>> 0;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
      const o = (y * width + x) * 3;
      data[o] = (x * 255) / width + (s & 31);
      data[o + 1] = (y * 255) / height + ((s >> 5) & 31);
      data[o + 2] = (s >> 10) & 255;
    }
  }
  return { width, height, data };
}

function expectIdentical(a: PreparedImage, b: PreparedImage): void {
  expect(a.hash).toBe(b.hash);
  expect(a.tokens).toBe(b.tokens);
  expect(a.input.grid).toEqual(b.input.grid);
  expect(a.input.pixels.length).toBe(b.input.pixels.length);
  const bytes = (p: Float32Array) => Buffer.from(p.buffer, p.byteOffset, p.byteLength);
  expect(bytes(a.input.pixels).equals(bytes(b.input.pixels))).toBe(true);
}

// The families' production settings (hub defaults), not the tiny fixtures' shrunken ones.
const SPECS: Record<string, PreprocessSpec> = {
  qwen2_5_vl: { kind: 'qwen', image: qwenImageConfig('qwen2_5_vl', {}, undefined, 'test') },
  qwen3_vl: { kind: 'qwen', image: qwenImageConfig('qwen3_vl', {}, undefined, 'test') },
  gemma3: { kind: 'gemma3', image: gemma3ImageConfig({}, {}, { vision_config: {} }, 'test') },
};

const pools: PreprocessPool[] = [];
function pool(options?: ConstructorParameters<typeof PreprocessPool>[0]): PreprocessPool {
  const p = new PreprocessPool(options);
  pools.push(p);
  return p;
}
afterAll(async () => {
  await Promise.all(pools.map((p) => p.close()));
});

describe('PreprocessPool', () => {
  const big = synthetic(1000, 750); // larger than every family's low-detail budget, so both paths resize

  it('matches the in-thread path bit for bit on each family at production settings', async () => {
    const p = pool({ threads: 2 });
    for (const [family, spec] of Object.entries(SPECS)) {
      const [off, offLow] = await Promise.all([p.prepare(spec, big), p.prepare(spec, big, { maxPixels: 256 * 28 * 28 })]);
      expectIdentical(off, prepareWithSpec(spec, big));
      expectIdentical(offLow, prepareWithSpec(spec, big, { maxPixels: 256 * 28 * 28 }));
      expect(off.tokens, family).toBeGreaterThan(0);
    }
    // The caller's pixels are not detached or changed by the transfer.
    expect(big.data.length).toBe(1000 * 750 * 3);
  }, 120_000);

  it('matches the in-thread path through VisionProcessor on every VLM fixture and fixture image', async () => {
    const images = await Promise.all(
      ['big_200x150.png', 'tall_64x100.png', 'tiny_rgba_48x40.png'].map((f) => decodeImage(new Uint8Array(readFileSync(join(root, 'images', f))))),
    );
    for (const d of ['qwen2_5_vl-f32', 'qwen3_vl-f32', 'gemma3-f32']) {
      const dir = join(root, d);
      const processor = VisionProcessor.load(dir, loadTokenizerDir(dir))!;
      expect(processor, d).not.toBeNull();
      for (const img of images) expectIdentical(await processor.prepareImageOffThread(img), processor.prepareImage(img));
    }
  }, 60_000);

  it('keeps the event loop turning while a large image is preprocessed', async () => {
    const p = pool({ threads: 1 });
    let ticks = 0;
    let done = false;
    const spin = () => {
      ticks++;
      if (!done) setImmediate(spin);
    };
    setImmediate(spin);
    const result = await p.prepare(SPECS.qwen2_5_vl, big);
    done = true;
    expect(result.tokens).toBeGreaterThan(0);
    // In-thread, the work is one synchronous block: not a single tick could run before it returns.
    expect(ticks).toBeGreaterThan(1);
  }, 60_000);

  it('re-raises a client error from the worker as the same InvalidRequestError', async () => {
    const thin = synthetic(201 * 28, 28);
    let inThread: unknown;
    try {
      prepareWithSpec(SPECS.qwen2_5_vl, thin);
    } catch (err) {
      inThread = err;
    }
    expect(inThread).toBeInstanceOf(InvalidRequestError);
    const off = await pool({ threads: 1 }).prepare(SPECS.qwen2_5_vl, thin).catch((e: unknown) => e);
    expect(off).toBeInstanceOf(InvalidRequestError);
    expect((off as InvalidRequestError).message).toBe((inThread as InvalidRequestError).message);
    expect((off as InvalidRequestError).param).toBe('image');
  }, 60_000);

  it('refuses work beyond its queue bound with a retryable error, and still serves the rest', async () => {
    const p = pool({ threads: 1, maxQueue: 1 });
    const small = synthetic(64, 48);
    const running = p.prepare(SPECS.gemma3, small);
    const queued = p.prepare(SPECS.gemma3, small);
    expect(p.stats()).toEqual({ threads: 1, busy: 1, queued: 1 });
    const refused = await p.prepare(SPECS.gemma3, small).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(EngineUnavailableError);
    expect((refused as EngineUnavailableError).reason).toBe('overloaded');
    const expected = prepareWithSpec(SPECS.gemma3, small);
    expectIdentical(await running, expected);
    expectIdentical(await queued, expected);
    expect(p.stats()).toEqual({ threads: 1, busy: 0, queued: 0 });
  }, 60_000);

  it('ends an overrunning task at its deadline, replaces the worker, and keeps working', async () => {
    const p = pool({ threads: 1, timeoutMs: 1 });
    const late = await p.prepare(SPECS.qwen2_5_vl, big).catch((e: unknown) => e);
    expect(late).toBeInstanceOf(EngineUnavailableError);
    expect((late as Error).message).toMatch(/did not finish within 1 ms/);
    expect(p.stats()).toEqual({ threads: 0, busy: 0, queued: 0 }); // the stuck worker was terminated

    const relaxed = pool({ threads: 1 });
    const small = synthetic(300, 200);
    expectIdentical(await relaxed.prepare(SPECS.qwen3_vl, small), prepareWithSpec(SPECS.qwen3_vl, small));
  }, 60_000);

  it('rejects pending work when closed', async () => {
    const p = new PreprocessPool({ threads: 1 });
    const pending = p.prepare(SPECS.qwen2_5_vl, big).catch((e: unknown) => e);
    await p.close();
    expect(await pending).toBeInstanceOf(Error);
    await expect(p.prepare(SPECS.gemma3, synthetic(8, 8))).rejects.toThrow(/closed/);
  });
});
