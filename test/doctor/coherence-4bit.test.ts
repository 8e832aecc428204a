// The MLX 4-bit default model (models/tiny-vlm-4bit, from `rapid convert models/tiny-vlm
// models/tiny-vlm-4bit --quantize 4 --group-size 64`): text weights 4-bit, the vision tower bf16, and
// the coherence gate through `rapid serve` keeps at least 90% of the bf16 checkpoint's reference score.
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadGoldenSet } from '../../src/doctor/coherence/golden-set.js';
import { runCoherenceGate, scoreOutputs } from '../../src/doctor/coherence/run-gate.js';
import { readSafetensorsHeader } from '../../src/models/safetensors-header.js';

const root = resolve(import.meta.dirname, '..', '..');
const q4 = join(root, 'models', 'tiny-vlm-4bit');
const goldenDir = join(root, 'models', 'tiny-vlm', 'golden');
const refFile = join(root, 'test', 'fixtures', 'tiny-vlm', 'golden_reference_f32.json');
const ready = existsSync(join(q4, 'model.safetensors')) && existsSync(refFile);

describe.skipIf(!ready)('models/tiny-vlm-4bit', () => {
  it('quantizes the text weights to 4 bits in groups of 64 and keeps the vision tower bf16', () => {
    const config = JSON.parse(readFileSync(join(q4, 'config.json'), 'utf8')) as { quantization?: { bits: number; group_size: number } };
    expect(config.quantization).toMatchObject({ bits: 4, group_size: 64 });
    const { tensors } = readSafetensorsHeader(join(q4, 'model.safetensors'));
    const packed = tensors.filter((t) => t.dtype === 'U32').map((t) => t.name);
    expect(packed).toContain('model.embed_tokens.weight');
    expect(packed.every((k) => k.startsWith('model.'))).toBe(true);
    const visual = tensors.filter((t) => t.name.startsWith('visual.'));
    expect(visual.length).toBeGreaterThan(0);
    expect(visual.every((t) => t.dtype === 'BF16')).toBe(true);
  });

  it("keeps at least 90% of the bf16 model's gate score (concurrency 1 and 16)", async () => {
    const set = loadGoldenSet(goldenDir);
    const ref = scoreOutputs(set, (JSON.parse(readFileSync(refFile, 'utf8')) as { outputs: Record<string, string> }).outputs);
    const report = await runCoherenceGate(q4, { goldenDir, concurrencies: [1, 16], precision: 'fast' });
    for (const run of report.runs) expect(run.score).toBeGreaterThanOrEqual(0.9 * ref.score);
    // Batching does not change greedy output: both concurrencies answer alike.
    expect(report.runs[1]!.results.map((r) => r.output)).toEqual(report.runs[0]!.results.map((r) => r.output));
  }, 300_000);
});
