// Checkpoint layouts the loader must accept: Gemma 3 as the text lane of
// Gemma3ForConditionalGeneration (language_model.model.* = MLX/legacy, model.language_model.* = HF 5),
// and a config with model_type but no architectures.
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { addon } from '../helpers/addon.js';
import { FIXTURE_ROOT, loadFixture, maxAbsDiff, refRow } from '../helpers/fixtures.js';
import { runSequences } from '../helpers/runner.js';
import { readSafetensors, writeSafetensors, type RawTensor } from '../helpers/safetensors.js';

const temps: string[] = [];
afterAll(() => {
  for (const t of temps) rmSync(t, { recursive: true, force: true });
});

function variant(name: string, rename: (k: string) => string, config: (c: Record<string, unknown>) => Record<string, unknown>): string {
  const src = join(FIXTURE_ROOT, name);
  const dst = mkdtempSync(join(tmpdir(), `rapid-layout-${name}-`));
  temps.push(dst);
  for (const f of readdirSync(src)) if (f !== 'model.safetensors' && f !== 'config.json') copyFileSync(join(src, f), join(dst, f));
  const t = readSafetensors(join(src, 'model.safetensors'));
  const out = new Map<string, RawTensor>();
  for (const [k, v] of t) out.set(rename(k), v);
  writeSafetensors(join(dst, 'model.safetensors'), out);
  const cfg = JSON.parse(readFileSync(join(src, 'config.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(dst, 'config.json'), JSON.stringify(config(cfg), null, 2));
  return dst;
}

function asConditional(text: Record<string, unknown>): Record<string, unknown> {
  const { architectures: _a, quantization, quantization_config, ...rest } = text;
  const top: Record<string, unknown> = {
    architectures: ['Gemma3ForConditionalGeneration'],
    model_type: 'gemma3',
    text_config: rest,
    vision_config: { model_type: 'siglip_vision_model', hidden_size: 32 },
  };
  if (quantization) {
    // MLX keys quantization entries by the module path as stored.
    const q = JSON.parse(JSON.stringify(quantization).replaceAll('"model.', '"language_model.model.')) as unknown;
    top.quantization = q;
    top.quantization_config = quantization_config ? q : undefined;
  }
  return top;
}

async function checkPrompt0(dir: string, fixture: string): Promise<void> {
  const fx = loadFixture(fixture);
  const pr = fx.ref.prompts[0]!;
  const model = addon().loadModel(dir, { threads: 2, kvCacheBytes: 8 << 20, precision: 'exact' });
  try {
    const out = (await runSequences(model, [{ id: 'a', prompt: pr.ids, maxTokens: 32, logitRows: 1 }])).get('a')!;
    expect(maxAbsDiff(out.logits[0]!, refRow(fx, 0, 0))).toBeLessThanOrEqual(1e-3 * Math.max(1, pr.max_abs_logit));
    expect(out.tokens).toEqual(pr.greedy);
  } finally {
    model.close();
  }
}

describe('checkpoint layouts', () => {
  for (const fixture of ['gemma3-f32', 'gemma3-q4']) {
    it(`${fixture} as Gemma3ForConditionalGeneration with language_model.model.* keys`, async () => {
      const dir = variant(fixture, (k) => `language_model.${k}`, asConditional);
      const m = addon().loadModel(dir, {});
      expect(m.info().architecture).toBe('Gemma3ForConditionalGeneration');
      m.close();
      await checkPrompt0(dir, fixture);
    });
  }

  it('gemma3-f32 as Gemma3ForConditionalGeneration with model.language_model.* keys (transformers 5)', async () => {
    const dir = variant('gemma3-f32', (k) => k.replace(/^model\./, 'model.language_model.'), asConditional);
    await checkPrompt0(dir, 'gemma3-f32');
  });

  it('a config with model_type and no architectures', async () => {
    const dir = variant('qwen3-f32', (k) => k, (c) => {
      const { architectures: _a, ...rest } = c;
      return rest;
    });
    const m = addon().loadModel(dir, {});
    expect(m.info().family).toBe('qwen3');
    m.close();
    await checkPrompt0(dir, 'qwen3-f32');
  });
});
