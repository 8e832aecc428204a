// Bad model files: every fixture family corrupted in seeded ways (config fields, layer/head counts,
// tensors, safetensors files, quantization, unknown family, garbage JSON) and loaded through the library
// in a child process. Bar: 0 signals, 0 hangs, 0 silent loads (except the harmless classes below, each
// justified), and every error names the field or tensor. RAPID_CORRUPT_PER_CLASS / RAPID_CORRUPT_SEED scale
// the run (bench/corrupt-models.sh runs every corruption).
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { corruptionsOf, sample, type Corruption } from './checkpoint-corruptions.js';
import { runCorruptions, type Result } from './run-corruptions.js';
import { FAMILIES } from '../../src/models/family-table.js';

const ROOT = resolve(import.meta.dirname, '..', 'fixtures');
// One fixture per family, quantized (codes/scales/biases and quantization config) and, for the VLMs, f32 too
// (dense vision towers and float experts load through other code than their quantized twins).
const FIXTURES = [
  'models/qwen2-q4',
  'models/qwen3-q4',
  'models/llama-q4',
  'models/gemma3-q4',
  'models/qwen2-f32',
  'vlm/gemma3-q4',
  'vlm/gemma4-e-q4',
  'vlm/gemma4-moe-q4',
  'vlm/mistral3-q4',
  'vlm/qwen2_5_vl-q4',
  'vlm/qwen3_vl-q4',
  'vlm/qwen3_vl_moe-q4',
  'vlm/gemma3-f32',
  'vlm/gemma4-e-f32',
  'vlm/gemma4-moe-f32',
  'vlm/mistral3-f32',
  'vlm/qwen2_5_vl-f32',
  'vlm/qwen3_vl-f32',
  'vlm/qwen3_vl_moe-f32',
];
const PER_CLASS = Number(process.env.RAPID_CORRUPT_PER_CLASS ?? 2);
const SEED = Number(process.env.RAPID_CORRUPT_SEED ?? 38);

const leaf = (path: string): string => {
  const keys = path.split('.').filter((k) => !/^\d+$/.test(k));
  return keys[keys.length - 1] as string;
};

/**
 * Why a corruption may load: config keys the runtime never reads (training knobs, tokens of modalities
 * rapid does not serve, bookkeeping). Changing them cannot change what is computed.
 */
export const UNUSED_CONFIG_KEYS: Record<string, string> = {
  initializer_range: 'weight init for training',
  attention_dropout: 'dropout is training-only',
  pretraining_tp: 'tensor-parallel slicing during pretraining',
  router_aux_loss_coef: 'MoE training loss weight',
  chunk_size_feed_forward: 'training memory knob',
  LABEL_0: 'classification-head labels',
  LABEL_1: 'classification-head labels',
  video_token_id: 'video input is not served',
  audio_token_id: 'audio input is not served',
  boa_token_id: 'audio input is not served',
  eoa_token_index: 'audio input is not served',
  tokens_per_second: 'video temporal positions; images use t=0',
  bos_token_id: 'special tokens come from the tokenizer files',
  eos_token_id: 'stop tokens come from generation_config.json and the tokenizer',
  pad_token_id: 'padding is never used (rows are ragged)',
  boi_token_id: 'image markers come from the tokenizer (src/vision/processor.ts)',
  eoi_token_id: 'image markers come from the tokenizer',
  boi_token_index: 'image markers come from the tokenizer',
  eoi_token_index: 'image markers come from the tokenizer',
  vision_start_token_id: 'image markers come from the tokenizer',
  vision_end_token_id: 'image markers come from the tokenizer',
};

/** Absent keys with a default the runtime shares with transformers: the config is still what it was meant to be. */
export const OPTIONAL_CONFIG_KEYS: Record<string, string> = {
  image_token_id: "the image token comes from the tokenizer; config.json's id is only cross-checked when present",
  image_token_index: "the image token comes from the tokenizer; config.json's id is only cross-checked when present",
  partial_rotary_factor: 'absent: the whole head rotates, as in transformers',
  llama_4_scaling_beta: 'absent: no Llama-4 query scaling, as in transformers',
  layer_norm_eps: 'absent: 1e-6, the SigLIP default',
  in_channels: 'absent: 3 (RGB), the class default',
  num_channels: 'absent: 3 (RGB), the class default',
  rms_norm_eps: 'absent: 1e-6, the transformers default of every supported class',
  head_dim: 'absent: hidden_size / num_attention_heads, as transformers (a mismatch then fails on the tensor shapes)',
  max_window_layers: 'read only with use_sliding_window, false in every fixture',
  sliding_window: 'absent: unused (use_sliding_window false / layer_types) or the Gemma class default',
  window_size: 'absent: 112 pixels, the Qwen2.5-VL class default',
  beta_fast: 'absent: 32, the YaRN default in transformers',
  beta_slow: 'absent: 1, the YaRN default in transformers',
  mscale: 'absent: 1, the YaRN default in transformers',
  mscale_all_dim: 'absent: 0, the YaRN default in transformers',
  spatial_merge_size: 'absent: 2, the Mistral 3 class default (Qwen towers require it)',
  image_size: 'absent: derived from the position-embedding table',
  num_position_embeddings: 'absent: read from the position-embedding table',
  vision_feature_layer: 'absent: -1 (the last layer), the class default',
  pooling_kernel_size: 'absent: 3, the Gemma 4 vision default',
  position_embedding_size: 'absent: read from the position-embedding table',
  num_key_value_heads: 'absent: num_attention_heads (no grouping), as transformers; a mismatch fails on the k/v shapes',
  decoder_sparse_step: 'absent: 1 (every layer MoE), the class default',
  num_experts_per_tok: 'absent: 8, the class default (checked against the expert count)',
  vocab_size_per_layer_input: 'read only with hidden_size_per_layer_input > 0 (0 in the MoE fixture)',
  num_kv_shared_layers: 'absent: 0, the class default; a mismatch fails on the k/v tensors',
  bits: 'absent per module: the global bits; a different width fails the codes/scales shape check',
  group_size: 'absent per module: the global group size; a different one fails the codes/scales shape check',
};

/** Valid values among the generated ones: they change the model the way a user might, not corrupt it. */
const VALID_VALUES: Record<string, (cls: string) => boolean> = {
  fullatt_block_indexes: (cls) => cls === 'config-zero', // layer 0 is a valid index
  deepstack_visual_indexes: (cls) => cls === 'config-zero',
  image_token_index: (cls) => cls === 'config-zero', // a valid token id; the image token comes from the tokenizer
  image_token_id: (cls) => cls === 'config-zero',
  mscale: (cls) => cls === 'config-zero', // no attention scaling
  mscale_all_dim: (cls) => cls === 'config-zero',
  llama_4_scaling_beta: (cls) => cls === 'config-zero', // scaling off
  _sliding_window_pattern: () => true, // private transformers bookkeeping next to layer_types: never read
};

/** Keys whose values are floats: x + 0.5 is another valid setting, not a corruption. */
const FLOAT_KEYS = new Set(['rope_theta', 'factor', 'rope_local_base_freq', 'partial_rotary_factor', 'beta_fast', 'beta_slow', 'mscale', 'mscale_all_dim', 'llama_4_scaling_beta', 'query_pre_attn_scalar', 'final_logit_softcapping', 'low_freq_factor', 'high_freq_factor', 'rms_norm_eps', 'layer_norm_eps']);

export function harmless(r: Result): string | undefined {
  const c = r.c;
  const key = leaf(c.target);
  if (c.cls.startsWith('config-')) {
    const why = UNUSED_CONFIG_KEYS[key];
    if (why) return why;
    if (c.cls === 'config-missing' && OPTIONAL_CONFIG_KEYS[key]) return OPTIONAL_CONFIG_KEYS[key];
    if (VALID_VALUES[key]?.(c.cls)) return 'a valid value';
    const defaults = Object.values(FAMILIES).find((f) => f.textDefaults && c.fixture.includes(f.family))?.textDefaults;
    if (c.cls === 'config-missing' && defaults?.[key] !== undefined) return 'absent: the class default (transformers writes config.json as a diff against it)';
    if (c.cls === 'config-missing' && key === 'rope_local_base_freq' && c.fixture.includes('gemma3')) return 'absent: 10000, the Gemma 3 class default';
    // Gemma's per-layer-type RoPE objects default to theta 1e6 (full) and 1e4 (sliding), as transformers does.
    if (c.cls === 'config-missing' && key === 'rope_theta' && /(full|sliding)_attention/.test(c.target)) return 'Gemma per-layer-type RoPE default';
    if (c.cls === 'config-missing' && key === 'rope_theta' && c.target.startsWith('vision_config.')) return 'absent: 10000, the vision towers\' class default';
    if (c.cls === 'config-missing' && key === 'max_position_embeddings' && c.fixture.includes('gemma')) return 'absent: 131072, the Gemma class default';
    if (c.cls === 'config-fraction' && FLOAT_KEYS.has(key)) return 'a float field: x + 0.5 is a valid value';
    // Every fixture has use_sliding_window false, so max_window_layers is not read; 0 is still a valid value.
    if (c.cls === 'config-zero' && key === 'max_window_layers') return 'max_window_layers applies only with use_sliding_window';
  }
  // A one-element tensor (gemma4's clip bounds) holds the same value in any shape.
  if (c.cls === 'tensor-reshaped' && /_(min|max)$/.test(c.target)) return 'one-element tensor: any shape holds the same value';
  return undefined;
}

/** The error must name what is wrong: the config key, the tensor, or the file. */
export function namesTarget(c: Corruption, message: string): boolean {
  if (c.cls.startsWith('tensor-')) {
    // The tensor, its renamed copy, or its module (native names modules: "vision_tower.blocks.1.attn.proj: ...").
    const module = c.target.replace(/\.(weight|bias|scales|biases)$/, '');
    const named = (m: string): boolean => new RegExp(`${m.replace(/\./g, '\\.')}(\\.weight)?[: ]`).test(message);
    return message.includes(c.target) || message.includes(c.target.replace(/(\.[a-z_]+)$/, '_x$1')) || named(module) || named(module.replace(/\.linear$/, ''));
  }
  if (c.cls.startsWith('file-') || c.cls === 'offsets-past-end' || c.cls === 'header-length-huge') return message.includes(c.target);
  if (c.cls === 'family-unknown') return message.includes('FooBarForCausalLM');
  if (c.cls === 'config-garbage' || c.cls === 'config-not-object' || c.cls === 'config-deep-nesting') return message.includes('config.json');
  return message.includes(leaf(c.target));
}

const LEAKS = /vector::|std::|basic_string|bad_alloc|_M_|terminate called|Segmentation/;

function summarize(results: Result[]): string {
  const byClass = new Map<string, Record<string, number>>();
  for (const r of results) {
    const row = byClass.get(r.c.cls) ?? {};
    const key = r.outcome === 'loaded' ? (harmless(r) ? 'loaded-harmless' : 'loaded-SILENT') : r.outcome;
    row[key] = (row[key] ?? 0) + 1;
    byClass.set(r.c.cls, row);
  }
  return [...byClass].map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join('\n');
}

function pick(): Corruption[] {
  const all = FIXTURES.flatMap((f) => corruptionsOf(f, join(ROOT, f)));
  return PER_CLASS > 0 ? FIXTURES.flatMap((f, i) => sample(all.filter((c) => c.fixture === f), PER_CLASS, SEED + i)) : all;
}

describe('corrupted model directories', () => {
  it('never signal, hang or load silently; errors name the field or tensor', { timeout: 600_000 }, async () => {
    expect(existsSync(resolve(import.meta.dirname, '..', '..', 'dist', 'engine', 'text-model.js')), 'run npm run compile first').toBe(true);
    const picked = pick();
    const results = await runCorruptions(picked, (f) => join(ROOT, f));
    const classes = new Set(picked.map((c) => c.cls));
    console.log(`${picked.length} corruptions, ${classes.size} classes, ${FIXTURES.length} fixtures (seed ${SEED})\n${summarize(results)}`);
    const bad = results.filter(
      (r) =>
        r.outcome === 'signal' ||
        r.outcome === 'hang' ||
        r.outcome === 'generator' ||
        (r.outcome === 'loaded' && !harmless(r)) ||
        (r.outcome === 'error' && (!namesTarget(r.c, r.message ?? '') || LEAKS.test(r.message ?? ''))),
    );
    expect(bad.map((r) => `${r.c.id}: ${r.outcome} ${r.signal ?? ''} ${r.message ?? ''}`.slice(0, 400))).toEqual([]);
  });

  // Defence in depth: the same corruptions straight into the addon, no TypeScript validation in front.
  // Loads are allowed here (validation is the gate); signals, hangs and C++ library messages are not.
  it('the bare addon never signals, hangs or leaks C++ library messages', { timeout: 600_000 }, async () => {
    const results = await runCorruptions(pick(), (f) => join(ROOT, f), 'native');
    const counts: Record<string, number> = {};
    for (const r of results) counts[r.outcome] = (counts[r.outcome] ?? 0) + 1;
    console.log(`bare addon: ${results.length} corruptions ${JSON.stringify(counts)}`);
    const bad = results.filter((r) => r.outcome === 'signal' || r.outcome === 'hang' || r.outcome === 'generator' || (r.outcome === 'error' && LEAKS.test(r.message ?? '')));
    expect(bad.map((r) => `${r.c.id}: ${r.outcome} ${r.signal ?? ''} ${r.message ?? ''}`.slice(0, 400))).toEqual([]);
  });
});
