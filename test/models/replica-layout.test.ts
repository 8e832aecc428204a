// The replica generator's layout facts, checked without writing weights: every text catalog model's
// tensor plan weighs what its published repository downloads (catalog sizeBytes), and the
// family-specific tensors (biases, q/k norms, heads, prefixes, quantized shapes) are where mlx-lm puts them.
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { catalogEntry, replicaConfig } from '../../scripts/replicas/make-replica.mjs';
import { tensorPlan } from '../../scripts/replicas/tensor-plan.mjs';
import { tensorBytes } from '../../scripts/replicas/random-fills.mjs';

interface Tensor {
  name: string;
  dtype: string;
  shape: number[];
}
type Plan = (alias: string) => { tensors: Tensor[]; config: Record<string, unknown>; size: number };

const ROOT = resolve(import.meta.dirname, '..', '..');
const CONFIGS = join(ROOT, 'scripts', 'replicas', 'configs');
// the text catalog models: the folder also holds VLM configs and processor files built by parity_full.py
const catalog = JSON.parse(readFileSync(join(ROOT, 'src', 'models', 'catalog.json'), 'utf8')) as { models: { alias: string; modalities: string[]; status: string }[] };
const aliases = catalog.models.filter((m) => m.status === 'supported' && m.modalities.join() === 'text').map((m) => m.alias);
const plan: Plan = (alias) => {
  const { config, layout } = replicaConfig(catalogEntry(alias)) as { config: Record<string, unknown>; layout: unknown };
  return { tensors: tensorPlan(config, layout) as Tensor[], config, size: (catalogEntry(alias) as { sizeBytes: number }).sizeBytes };
};
const names = (t: Tensor[]) => new Set(t.map((x) => x.name));

describe('replica layouts', () => {
  it('has a config, with its source, for every supported text catalog model', () => {
    const sources = JSON.parse(readFileSync(join(CONFIGS, '..', 'sources.json'), 'utf8')) as { configs: Record<string, unknown> };
    expect(aliases.length).toBeGreaterThanOrEqual(20);
    for (const a of aliases) {
      expect(existsSync(join(CONFIGS, `${a}.json`)), a).toBe(true);
      expect(sources.configs[a], a).toBeDefined();
    }
  });

  it.each(aliases)('%s weighs its catalog download size', (alias) => {
    const { tensors, size } = plan(alias);
    const bytes = tensors.reduce((a, t) => a + (tensorBytes(t) as number), 0);
    // the published sizes are rounded; gemma-3-text-4b's repo also holds files a replica does not
    expect(Math.abs(bytes / size - 1)).toBeLessThan(alias === 'gemma-3-4b-text-4bit' ? 0.02 : 0.005);
  });

  it('puts each family\'s tensors where mlx-lm writes them', () => {
    const q05 = plan('qwen2.5-0.5b-4bit');
    expect(q05.config.quantization).toEqual({ group_size: 64, bits: 4 });
    const n = names(q05.tensors);
    expect(n.has('model.layers.0.self_attn.q_proj.bias')).toBe(true); // Qwen2 q/k/v biases stay bf16
    expect(n.has('lm_head.weight')).toBe(false); // tied: sanitize pops it
    expect(q05.tensors.find((t) => t.name === 'model.embed_tokens.weight')).toMatchObject({ dtype: 'U32', shape: [151936, 112] });

    const q3 = plan('qwen3-0.6b-8bit');
    expect(q3.config.quantization_config).toEqual({ group_size: 64, bits: 8 });
    expect(names(q3.tensors).has('model.layers.27.self_attn.k_norm.weight')).toBe(true);
    expect(q3.tensors.find((t) => t.name === 'model.layers.0.mlp.down_proj.weight')).toMatchObject({ shape: [1024, 768] });

    expect(names(plan('llama-3.1-8b-4bit').tensors).has('lm_head.scales')).toBe(true); // untied head, quantized
    const g = names(plan('gemma-3-1b-4bit').tensors);
    expect(g.has('lm_head.weight') && g.has('model.layers.0.pre_feedforward_layernorm.weight')).toBe(true);

    const emb = plan('qwen3-embedding-0.6b');
    expect(emb.config.quantization).toBeUndefined();
    expect(names(emb.tensors).has('embed_tokens.weight') && !names(emb.tensors).has('lm_head.weight')).toBe(true);
    expect(emb.tensors.every((t) => t.dtype === 'BF16')).toBe(true);
  });

  it('writes a per-module override as mlx-lm records one, with that module at its bits', () => {
    const entry = catalogEntry('qwen3-0.6b-4bit');
    const { config, layout } = replicaConfig(entry, { 'model.layers.0.mlp.down_proj': { group_size: 32, bits: 8 } }) as { config: Record<string, unknown>; layout: unknown };
    expect((config.quantization as Record<string, unknown>)['model.layers.0.mlp.down_proj']).toEqual({ group_size: 32, bits: 8 });
    const t = tensorPlan(config, layout) as Tensor[];
    expect(t.find((x) => x.name === 'model.layers.0.mlp.down_proj.scales')).toMatchObject({ shape: [1024, 96] });
    expect(t.find((x) => x.name === 'model.layers.1.mlp.down_proj.scales')).toMatchObject({ shape: [1024, 48] });
  });
});
