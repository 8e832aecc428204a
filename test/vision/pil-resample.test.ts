import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { pilResize, type ResampleFilter } from '../../src/vision/pil-resample.js';

interface Case {
  filter: ResampleFilter;
  w: number;
  h: number;
  outW: number;
  outH: number;
  src: number;
  dst: number;
}

const dir = join(import.meta.dirname, 'fixtures');
const meta = JSON.parse(readFileSync(join(dir, 'resample.json'), 'utf8')) as { cases: Case[] };
const bin = new Uint8Array(readFileSync(join(dir, 'resample.bin')));

describe('pilResize matches Pillow Image.resize byte for byte', () => {
  for (const c of meta.cases) {
    it(`${c.filter} ${c.w}x${c.h} -> ${c.outW}x${c.outH}`, () => {
      const src = bin.subarray(c.src, c.src + c.w * c.h * 3);
      const want = bin.subarray(c.dst, c.dst + c.outW * c.outH * 3);
      const got = pilResize(src, c.w, c.h, c.outW, c.outH, c.filter);
      expect(got.length).toBe(want.length);
      let diffs = 0;
      for (let i = 0; i < got.length; i++) if (got[i] !== want[i]) diffs++;
      expect(diffs).toBe(0);
    });
  }

  it('returns a copy for an unchanged size and rejects a wrong buffer length', () => {
    const src = new Uint8Array([1, 2, 3, 4, 5, 6]);
    const out = pilResize(src, 2, 1, 2, 1, 'bicubic');
    expect(Array.from(out)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(out).not.toBe(src);
    expect(() => pilResize(src, 3, 1, 2, 1, 'bicubic')).toThrow(/expected 9 bytes/);
  });
});
