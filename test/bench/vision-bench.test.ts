// bench:vision's pieces on a small shape: the random Qwen2.5-VL checkpoint generator writes a model the
// runtime loads (tower found, window + full-attention blocks, merger to the text width) and the bench's
// engine path encodes one image and reaches a first token; the FLOP model matches the 3B tower by hand.

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { ensureRandomVlmCheckpoint, QWEN25_VL_3B_TOWER } from '../../src/bench/random-vlm-checkpoint.js';
import { benchModel, towerFlops } from '../../src/bench/vision.js';

const fixtures = join(import.meta.dirname, '..', 'fixtures', 'vlm');
const work = mkdtempSync(join(tmpdir(), 'rapid-vision-bench-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('bench:vision', () => {
  it('generates a loadable random Qwen2.5-VL checkpoint and times one image request through the engine', async () => {
    const tower = { depth: 4, hidden: 32, heads: 2, ffn: 48, outHidden: 64, fullAttBlocks: [1, 3], windowSize: 56, patchSize: 14 };
    const text = { layers: 2, heads: 4, kvHeads: 2, ffn: 96 };
    const ck = ensureRandomVlmCheckpoint(work, join(fixtures, 'qwen2_5_vl-f32'), tower, text);
    expect(ck.cached).toBe(false);
    expect(ensureRandomVlmCheckpoint(work, join(fixtures, 'qwen2_5_vl-f32'), tower, text).cached).toBe(true);
    const config = JSON.parse(readFileSync(join(ck.dir, 'config.json'), 'utf8')) as { vision_config: Record<string, unknown>; text_config: Record<string, unknown> };
    expect(config.vision_config).toMatchObject({ depth: 4, hidden_size: 32, fullatt_block_indexes: [1, 3], out_hidden_size: 64 });
    expect(config.text_config.rope_parameters).toMatchObject({ mrope_section: [2, 3, 3] });

    // 90x60 -> 84x56 (smart_resize) -> 6x4 patches -> 6 tokens.
    const png = readFileSync(join(fixtures, 'images', 'wide_90x60.png'));
    const c = await benchModel('tiny', ck.dir, 'wide_90x60.png', new Uint8Array(png), 2, 2);
    expect(c.grid).toEqual([1, 4, 6]);
    expect(c.imageTokens).toBe(6);
    expect(c.runs).toHaveLength(2);
    for (const r of c.runs) {
      expect(r.encodeMs).toBeGreaterThan(0); // every run encodes (a fresh engine: empty encoder cache)
      expect(r.ttftMs).toBeGreaterThanOrEqual(r.encodeMs);
    }
  }, 120_000);

  it('counts the 3B tower at ~1.3 TFLOP per 448x448 image, almost all of it in linear layers', () => {
    const g = towerFlops(QWEN25_VL_3B_TOWER, 1024);
    // 32 blocks x 2 x 1024 x 1280 x (3*1280 + 1280 + 3*3420)
    expect(g.linear).toBeCloseTo((32 * 2 * 1024 * 1280 * (4 * 1280 + 3 * 3420)) / 1e9, 6);
    // 28 window blocks over 64-patch windows + 4 full blocks over all 1024 patches
    expect(g.attention).toBeCloseTo((28 * 4 * 1024 * 64 * 1280 + 4 * 4 * 1024 * 1024 * 1280) / 1e9, 6);
    expect(g.linear / (g.linear + g.attention + g.merger + g.patchEmbed)).toBeGreaterThan(0.95);
  });
});
