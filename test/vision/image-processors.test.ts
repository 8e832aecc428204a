import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';

import { describe, expect, it } from 'vitest';

import { InvalidRequestError } from '../../src/errors/request-errors.js';
import { gemma3ImageConfig, gemma3Preprocess } from '../../src/vision/gemma3-image-processor.js';
import type { Json } from '../../src/vision/image-processor-config.js';
import { qwenImageConfig, qwenPreprocess, roundHalfEven, smartResize } from '../../src/vision/qwen-image-processor.js';

interface Case {
  config: string;
  w: number;
  h: number;
  src: number;
  pixels: number;
  shape: number[];
  grid: number[] | null;
}

const dir = join(import.meta.dirname, 'fixtures');
const meta = JSON.parse(readFileSync(join(dir, 'processor.json'), 'utf8')) as {
  configs: Record<string, { family: 'qwen2_5_vl' | 'qwen3_vl' | 'gemma3'; config: Json }>;
  cases: Case[];
};
const bin = gunzipSync(readFileSync(join(dir, 'processor.bin.gz')));

function preprocess(c: Case) {
  const spec = meta.configs[c.config];
  const img = { width: c.w, height: c.h, data: new Uint8Array(bin.buffer, bin.byteOffset + c.src, c.w * c.h * 3) };
  if (spec.family === 'gemma3') {
    return gemma3Preprocess(gemma3ImageConfig(spec.config, {}, { vision_config: { patch_size: 4 } }, 'test'), img);
  }
  return qwenPreprocess(qwenImageConfig(spec.family, spec.config, undefined, 'test'), img);
}

describe('image processors reproduce transformers 5 (PIL backend) pixel_values exactly', () => {
  for (const c of meta.cases) {
    it(`${c.config} ${c.w}x${c.h}`, () => {
      const { input, tokens } = preprocess(c);
      const n = c.shape.reduce((a, b) => a * b, 1);
      const want = new Float32Array(bin.buffer.slice(bin.byteOffset + c.pixels, bin.byteOffset + c.pixels + n * 4));
      expect(input.pixels.length).toBe(n);
      let maxDiff = 0;
      for (let i = 0; i < n; i++) maxDiff = Math.max(maxDiff, Math.abs(input.pixels[i] - want[i]));
      expect(maxDiff).toBe(0);
      if (c.grid) {
        expect(input.grid).toEqual(c.grid);
        expect(tokens).toBe((c.grid[0] * c.grid[1] * c.grid[2]) / 4);
      } else {
        expect(input.grid).toEqual([1, c.shape[2] / 4, c.shape[3] / 4]); // shape [1, 3, H, W]
      }
    });
  }
});

describe('smart_resize', () => {
  it('rounds half to even like Python', () => {
    expect([0.5, 1.5, 2.5, 3.5, 2.4999, 2.5001].map(roundHalfEven)).toEqual([0, 2, 2, 4, 2, 3]);
    // 42/28 = 1.5 -> 2, 70/28 = 2.5 -> 2 (Python round), not 3.
    expect(smartResize(70, 42, 28, 56 * 56, 28 * 28 * 1280)).toEqual([56, 56]);
  });
  it('applies min and max pixels like transformers (values from its smart_resize)', () => {
    expect(smartResize(1000, 2000, 28, 3136, 12845056)).toEqual([1008, 1988]);
    expect(smartResize(4000, 3000, 28, 3136, 1003520)).toEqual([1148, 840]);
    expect(smartResize(10, 10, 32, 65536, 16777216)).toEqual([256, 256]);
  });
  it('refuses aspect ratios beyond 200:1', () => {
    expect(() => smartResize(1, 201, 28, 3136, 12845056)).toThrow(InvalidRequestError);
    expect(() => smartResize(1, 201, 28, 3136, 12845056)).toThrow(/200:1/);
  });
});
