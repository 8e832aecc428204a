// The replica generator's layout facts, checked without writing weights: every catalog model's tensor plan
// weighs what its published repository downloads (catalog sizeBytes), the family-specific tensors (biases,
// q/k norms, heads, prefixes, quantized shapes) are where mlx-lm puts them, and each VLM family's plan names,
// types and shapes every tensor of its tiny mlx-vlm fixture (test/fixtures/vlm/*-q4) exactly.
import { closeSync, existsSync, ftruncateSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { catalogEntry, replicaConfig } from '../../scripts/replicas/make-replica.mjs';
import { tensorPlan } from '../../scripts/replicas/tensor-plan.mjs';
import { tensorBytes } from '../../scripts/replicas/random-fills.mjs';
import { vlmLayoutOf } from '../../scripts/replicas/vlm-layouts.mjs';
import { vlmTensorPlan } from '../../scripts/replicas/vlm-tensor-plan.mjs';
import { readSafetensorsHeader } from '../../src/models/safetensors-header.js';
import { validateCheckpoint } from '../../src/models/validate-checkpoint.js';

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
const vlmAliases = catalog.models.filter((m) => m.modalities.includes('image') && !('embedded' in m)).map((m) => m.alias);
const plan: Plan = (alias) => {
  const { config, layout } = replicaConfig(catalogEntry(alias)) as { config: Record<string, unknown>; layout: { vlmFamily?: string } };
  const tensors = (layout.vlmFamily ? vlmTensorPlan(config, layout) : tensorPlan(config, layout)) as Tensor[];
  return { tensors, config, size: (catalogEntry(alias) as { sizeBytes: number }).sizeBytes };
};
const bytesOf = (t: Tensor[]) => t.reduce((a, x) => a + (tensorBytes(x) as number), 0);
const get = (t: Tensor[], name: string) => t.find((x) => x.name === name);
/** VLM plans off their catalog size by more than 3.5%: gemma-4-e4b's sizeBytes is an estimate (catalog.json). */
const VLM_SIZE_TOLERANCE: Record<string, number> = { 'gemma-4-e4b-4bit': 0.07 };
const names = (t: Tensor[]) => new Set(t.map((x) => x.name));

describe('replica layouts', () => {
  it('has a config, with its source, for every supported text and every VLM catalog model', () => {
    const sources = JSON.parse(readFileSync(join(CONFIGS, '..', 'sources.json'), 'utf8')) as { configs: Record<string, unknown> };
    expect(aliases.length).toBeGreaterThanOrEqual(20);
    expect(vlmAliases.length).toBe(12);
    for (const a of [...aliases, ...vlmAliases]) {
      expect(existsSync(join(CONFIGS, `${a}.json`)), a).toBe(true);
      expect(sources.configs[a], a).toBeDefined();
    }
  });

  it.each(aliases)('%s weighs its catalog download size', (alias) => {
    const { tensors, size } = plan(alias);
    const bytes = bytesOf(tensors);
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

  it.each(vlmAliases)('%s (VLM) weighs its catalog download size', (alias) => {
    const { tensors, size } = plan(alias);
    expect(Math.abs(bytesOf(tensors) / size - 1)).toBeLessThan(VLM_SIZE_TOLERANCE[alias] ?? 0.035);
  });

  const fixtures = readdirSync(join(ROOT, 'test', 'fixtures', 'vlm')).filter((d) => d.endsWith('-q4'));
  it.each(fixtures)('names, types and shapes every tensor of the mlx-vlm fixture %s', (dir) => {
    const config = JSON.parse(readFileSync(join(ROOT, 'test', 'fixtures', 'vlm', dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    const fixture = readSafetensorsHeader(join(ROOT, 'test', 'fixtures', 'vlm', dir, 'model.safetensors')).tensors;
    const tensors = vlmTensorPlan(config, vlmLayoutOf({ alias: dir }, config)) as Tensor[];
    const want = Object.fromEntries(fixture.map((v) => [v.name, `${v.dtype} ${v.shape.join('x')}`]));
    // the Gemma 4 fixture generator stores the 0-d clip bounds as [1]
    const shapeOf = (t: Tensor) => (/\.(in|out)put_(min|max)$/.test(t.name) && !t.shape.length ? '1' : t.shape.join('x'));
    const got = Object.fromEntries(tensors.map((t) => [t.name, `${t.dtype} ${shapeOf(t)}`]));
    // mlx-vlm's gemma3 sanitize copies the tied embedding into language_model.lm_head; the fixture generator does not
    if (dir.startsWith('gemma3')) for (const k of ['weight', 'scales', 'biases']) delete got[`language_model.lm_head.${k}`];
    expect(got).toEqual(want);
  });

  // rapid's own checkpoint validation (headers only) on the full-size layout: a sparse file of the real size
  it.each(vlmAliases)('rapid\'s checkpoint validation accepts the %s layout', (alias) => {
    const { tensors, config } = plan(alias);
    const dir = mkdtempSync(join(tmpdir(), 'rapid-vlm-layout-'));
    try {
      const header: Record<string, unknown> = { __metadata__: { format: 'mlx' } };
      let off = 0;
      for (const t of tensors) {
        const n = tensorBytes(t) as number;
        header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + n] };
        off += n;
      }
      const json = Buffer.from(JSON.stringify(header));
      const len = Buffer.alloc(8);
      len.writeBigUInt64LE(BigInt(json.length));
      const fd = openSync(join(dir, 'model.safetensors'), 'w');
      writeSync(fd, len);
      writeSync(fd, json);
      ftruncateSync(fd, 8 + json.length + off);
      closeSync(fd);
      writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
      const checked = validateCheckpoint(dir);
      expect(checked.vision?.layers).toBeGreaterThan(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('puts each VLM family\'s tensors where mlx-vlm writes them, at full size', () => {
    const q25 = plan('qwen2.5-vl-3b-4bit').tensors;
    expect(get(q25, 'vision_tower.patch_embed.proj.weight')).toMatchObject({ dtype: 'BF16', shape: [1280, 2, 14, 14, 3] }); // channels-last Conv3d
    expect(get(q25, 'vision_tower.blocks.31.attn.qkv.weight')).toMatchObject({ dtype: 'BF16', shape: [3840, 1280] }); // tower stays bf16
    expect(get(q25, 'language_model.model.layers.0.self_attn.q_proj.bias')).toBeDefined();
    expect(get(q25, 'language_model.lm_head.weight')).toBeUndefined(); // tied

    const moe = plan('qwen3-vl-30b-a3b-4bit');
    expect(moe.config.quantization).toMatchObject({ 'language_model.model.layers.47.mlp.gate': { group_size: 64, bits: 8 } });
    expect(get(moe.tensors, 'language_model.model.layers.0.mlp.gate.weight')).toMatchObject({ dtype: 'U32', shape: [128, 512] });
    expect(get(moe.tensors, 'language_model.model.layers.0.mlp.switch_mlp.down_proj.weight')).toMatchObject({ shape: [128, 2048, 96] });
    expect(get(moe.tensors, 'vision_tower.deepstack_merger_list.2.norm.weight')).toMatchObject({ shape: [4608] });

    const g3 = plan('gemma-3-4b-4bit').tensors;
    expect(get(g3, 'language_model.lm_head.weight')).toMatchObject({ dtype: 'U32', shape: [262208, 320] }); // copied, quantized
    expect(get(g3, 'vision_tower.vision_model.embeddings.position_embedding.weight')).toMatchObject({ shape: [4096, 1152] });
    expect(get(g3, 'multi_modal_projector.mm_input_projection_weight')).toMatchObject({ dtype: 'BF16', shape: [1152, 2560] });

    // Mistral 3 repos converted before mlx-vlm 0917b35: projector quantized (and Mistral Small 3.1's lm_head)
    expect(get(plan('ministral-3-3b-4bit').tensors, 'multi_modal_projector.linear_1.scales')).toBeDefined();
    expect(get(plan('mistral-small-3.1-24b-4bit').tensors, 'language_model.lm_head.scales')).toBeDefined();
    expect(get(plan('ministral-3-3b-4bit').tensors, 'vision_tower.vision_model.patch_conv.weight')).toMatchObject({ shape: [1024, 14, 14, 3] });

    const e2b = plan('gemma-4-e2b-4bit').tensors;
    expect(get(e2b, 'language_model.model.embed_tokens_per_layer.weight')).toMatchObject({ dtype: 'U32', shape: [262144, 1120] });
    expect(get(e2b, 'language_model.model.layers.14.self_attn.k_proj.weight')).toMatchObject({ shape: [512, 192] }); // full layer: head_dim 512
    expect(get(e2b, 'language_model.model.layers.15.self_attn.k_proj.weight')).toBeUndefined(); // KV-shared
    expect(get(e2b, 'language_model.model.layers.15.mlp.up_proj.weight')).toMatchObject({ shape: [12288, 192] }); // double-wide
    expect(get(e2b, 'audio_tower.subsample_conv_projection.layer1.conv.weight')).toMatchObject({ dtype: 'BF16', shape: [32, 3, 3, 128] });
    expect(get(e2b, 'embed_audio.embedding_projection.scales')).toBeDefined();
    const a4b = plan('gemma-4-26b-a4b-4bit');
    expect(a4b.config.quantization).toMatchObject({ 'language_model.model.layers.0.router.proj': { bits: 8 } });
    expect(get(a4b.tensors, 'language_model.model.layers.5.self_attn.v_proj.weight')).toBeUndefined(); // K-eq-V full layer
  });
});
