// bench:moe's pieces on a small shape: the random MLX 4-bit Qwen3-MoE checkpoint generator (SwitchLinear
// experts, 8-bit router gates) writes a model the runtime loads, and the decode measurement reports one
// expert pass per active expert: exactly top-k per MoE layer for one row, and fewer passes than routed
// rows for eight.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadNative } from '../../src/native/binding.js';
import { ensureMoeCheckpoint, expertPassBytes, measureDecode, type MoeShape } from '../../src/bench/moe.js';

const work = mkdtempSync(join(tmpdir(), 'rapid-moe-bench-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('bench:moe', () => {
  it('generates a loadable random MoE checkpoint and counts expert passes per decode step', async () => {
    const shape: MoeShape = { hidden: 128, layers: 2, heads: 2, kvHeads: 1, headDim: 64, experts: 8, topK: 2, moeFfn: 64, vocab: 512 };
    const ck = ensureMoeCheckpoint(work, shape);
    expect(ck.cached).toBe(false);
    expect(ensureMoeCheckpoint(work, shape).cached).toBe(true);
    const config = JSON.parse(readFileSync(join(ck.dir, 'config.json'), 'utf8')) as { quantization: Record<string, unknown> };
    expect(config.quantization['model.layers.1.mlp.gate']).toEqual({ group_size: 64, bits: 8 });
    const model = loadNative().addon.loadModel(ck.dir, { threads: 2, kvCacheBytes: 8 << 20, precision: 'fast' });
    try {
      expect(model.info().family).toBe('qwen3_moe');
      const one = await measureDecode(model, 1, 3, 8);
      expect(one.expertRunsPerStep).toBe(shape.topK * shape.layers);
      expect(one.expertBytesPerStep).toBe(shape.topK * shape.layers * expertPassBytes(shape));
      const eight = await measureDecode(model, 8, 3, 8);
      expect(eight.routedRowsPerStep).toBe(8 * shape.topK * shape.layers);
      expect(eight.expertRunsPerStep).toBeLessThanOrEqual(shape.experts * shape.layers);
      expect(eight.expertRunsPerStep).toBeLessThan(eight.routedRowsPerStep);
      expect(eight.expertBytesPerStep).toBe(eight.expertRunsPerStep * expertPassBytes(shape));
      expect(eight.tokS).toBeGreaterThan(0);
    } finally {
      model.close();
    }
  }, 120_000);
});
