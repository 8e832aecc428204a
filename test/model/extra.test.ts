// Parity for paths the family fixtures do not cover (fixtures in test/model/extra, made by
// extra/generate.py with transformers 5.18): Llama 3 RoPE scaling and Mistral's sliding window.
// Every prompt position's logits, prefilled at once and in chunks of 3, within 1e-3·max(1, max|logit|).
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { NativeStepRow } from '../../src/native/types.js';
import { addon } from '../helpers/addon.js';

const root = resolve(import.meta.dirname, 'extra');

describe.each(['llama3-rope', 'mistral-sw'])('%s', (name) => {
  const dir = join(root, name);
  const ids = JSON.parse(readFileSync(join(dir, 'ids.json'), 'utf8')) as number[];
  const buf = readFileSync(join(dir, 'ref.f32'));
  const ref = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));

  for (const chunk of [ids.length, 3]) {
    it(`matches transformers at every position (chunks of ${chunk})`, async () => {
      const m = addon().loadModel(dir, { threads: 2, kvCacheBytes: 1 << 20, blockSize: 4, precision: 'exact' });
      try {
        const blockTable = Int32Array.from({ length: Math.ceil(ids.length / 4) }, (_, i) => i);
        const got: number[] = [];
        for (let s = 0; s < ids.length; s += chunk) {
          const toks = ids.slice(s, s + chunk);
          const row: NativeStepRow = {
            requestId: 'a',
            tokens: Int32Array.from(toks),
            positions: Int32Array.from(toks, (_, i) => s + i),
            blockTable,
            contextLen: s,
            wantLogits: true,
          };
          const r = (await m.step({ rows: [row] })).rows[0]!;
          expect(r.error).toBeUndefined();
          got.push(...r.logits!);
        }
        let maxAbs = 0;
        let diff = 0;
        for (let i = 0; i < ref.length; i++) {
          maxAbs = Math.max(maxAbs, Math.abs(ref[i]!));
          diff = Math.max(diff, Math.abs(ref[i]! - got[i]!));
        }
        expect(got).toHaveLength(ref.length);
        expect(diff).toBeLessThanOrEqual(1e-3 * Math.max(1, maxAbs));
      } finally {
        m.close();
      }
    });
  }
});
