// Generates (once, cached) a random-weight bf16 Qwen2.5-VL checkpoint whose vision tower has the 3B
// model's shape (depth 32, hidden 1280, 16 heads, MLP 3420, window attention, full attention in blocks
// 7/15/23/31, merger to 2048) in front of a small text decoder: the bench needs the tower's real cost.
import { copyFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { bf16, checkpointBytes, checkpointComplete, hash32, writeCheckpoint } from './random-checkpoint.js';
import { type TensorSpec, tensorBytes } from './safetensors-writer.js';

export interface VlmTowerShape {
  depth: number;
  hidden: number;
  heads: number;
  ffn: number;
  outHidden: number; // = the text decoder's hidden size
  fullAttBlocks: number[];
  windowSize: number;
  patchSize: number;
}

/** Qwen2.5-VL-3B-Instruct's vision_config. */
export const QWEN25_VL_3B_TOWER: VlmTowerShape = {
  depth: 32,
  hidden: 1280,
  heads: 16,
  ffn: 3420,
  outHidden: 2048,
  fullAttBlocks: [7, 15, 23, 31],
  windowSize: 112,
  patchSize: 14,
};

export interface TextDecoderShape {
  layers: number;
  heads: number;
  kvHeads: number;
  ffn: number;
}

/** Two layers at the 3B text widths: enough to produce a first token, cheap next to the tower. */
export const SMALL_TEXT_DECODER: TextDecoderShape = { layers: 2, heads: 16, kvHeads: 2, ffn: 11008 };

export interface RandomVlmCheckpoint {
  dir: string;
  towerBytes: number;
  towerParameters: number;
  tensorBytes: number;
  cached: boolean;
  generateMs: number;
}

const FORMAT_VERSION = 1;

// 65536 bf16 normal draws per (mean, std); a tensor indexes them with random 16-bit words: a fill costs
// one xorshift per two values, so the 1.3 GB tower is written in seconds.
const tables = new Map<string, Uint16Array>();
function normalTable(mean: number, std: number): Uint16Array {
  const key = `${mean}/${std}`;
  let t = tables.get(key);
  if (t === undefined) {
    t = new Uint16Array(65536);
    for (let i = 0; i < t.length; i++) {
      const u1 = (hash32(2 * i + 1) + 1) / 2 ** 32;
      const u2 = hash32(2 * i + 2) / 2 ** 32;
      t[i] = bf16(mean + std * Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2));
    }
    tables.set(key, t);
  }
  return t;
}

function fillNormal(seed: number, mean: number, std: number): TensorSpec['fill'] {
  const table = normalTable(mean, std);
  return (chunk, byteOffset) => {
    const out = new Uint16Array(chunk.buffer, chunk.byteOffset, chunk.length >>> 1);
    let s = hash32(seed ^ hash32(byteOffset)) || 1;
    for (let i = 0; i + 1 < out.length; i += 2) {
      s ^= s << 13;
      s ^= s >>> 17;
      s ^= s << 5;
      out[i] = table[s & 0xffff];
      out[i + 1] = table[s >>> 16];
    }
    if (out.length % 2 === 1) out[out.length - 1] = table[s & 0xffff];
  };
}

/** Every tensor, in the key layout of transformers' Qwen2.5-VL checkpoints (visual.*, model.*, lm_head). */
export function qwen25VlTensors(tower: VlmTowerShape, text: TextDecoderShape, vocab: number): { tensors: TensorSpec[]; towerBytes: number; towerParameters: number } {
  const tensors: TensorSpec[] = [];
  let seed = 0x71e5;
  const add = (name: string, shape: number[], mean = 0, std = 0.02): void => {
    seed = hash32(seed + 1);
    tensors.push({ name, dtype: 'BF16', shape, fill: fillNormal(seed, mean, std) });
  };
  const H = tower.hidden;
  const P = tower.patchSize;
  add('visual.patch_embed.proj.weight', [H, 3, 2, P, P]); // [hidden, C, T, P, P]
  for (let i = 0; i < tower.depth; i++) {
    const b = `visual.blocks.${i}.`;
    add(`${b}norm1.weight`, [H], 1);
    add(`${b}norm2.weight`, [H], 1);
    add(`${b}attn.qkv.weight`, [3 * H, H]);
    add(`${b}attn.qkv.bias`, [3 * H]);
    add(`${b}attn.proj.weight`, [H, H]);
    add(`${b}attn.proj.bias`, [H]);
    add(`${b}mlp.gate_proj.weight`, [tower.ffn, H]);
    add(`${b}mlp.gate_proj.bias`, [tower.ffn]);
    add(`${b}mlp.up_proj.weight`, [tower.ffn, H]);
    add(`${b}mlp.up_proj.bias`, [tower.ffn]);
    add(`${b}mlp.down_proj.weight`, [H, tower.ffn]);
    add(`${b}mlp.down_proj.bias`, [H]);
  }
  add('visual.merger.ln_q.weight', [H], 1);
  add('visual.merger.mlp.0.weight', [4 * H, 4 * H]); // 2x2 merge: [4*hidden, 4*hidden]
  add('visual.merger.mlp.0.bias', [4 * H]);
  add('visual.merger.mlp.2.weight', [tower.outHidden, 4 * H]);
  add('visual.merger.mlp.2.bias', [tower.outHidden]);
  const towerBytes = tensors.reduce((n, t) => n + tensorBytes(t), 0);
  const towerParameters = towerBytes / 2;

  const D = tower.outHidden;
  const headDim = D / text.heads;
  add('model.embed_tokens.weight', [vocab, D]);
  for (let l = 0; l < text.layers; l++) {
    const p = `model.layers.${l}.`;
    add(`${p}input_layernorm.weight`, [D], 1);
    add(`${p}post_attention_layernorm.weight`, [D], 1);
    add(`${p}self_attn.q_proj.weight`, [text.heads * headDim, D]);
    add(`${p}self_attn.q_proj.bias`, [text.heads * headDim]);
    add(`${p}self_attn.k_proj.weight`, [text.kvHeads * headDim, D]);
    add(`${p}self_attn.k_proj.bias`, [text.kvHeads * headDim]);
    add(`${p}self_attn.v_proj.weight`, [text.kvHeads * headDim, D]);
    add(`${p}self_attn.v_proj.bias`, [text.kvHeads * headDim]);
    add(`${p}self_attn.o_proj.weight`, [D, text.heads * headDim]);
    add(`${p}mlp.gate_proj.weight`, [text.ffn, D]);
    add(`${p}mlp.up_proj.weight`, [text.ffn, D]);
    add(`${p}mlp.down_proj.weight`, [D, text.ffn]);
  }
  add('model.norm.weight', [D], 1);
  add('lm_head.weight', [vocab, D]);
  return { tensors, towerBytes, towerParameters };
}

/** config.json in transformers 5's Qwen2.5-VL form; token ids are those of the tokenizer (copied from `tokenizerDir`). */
function qwen25VlConfig(tower: VlmTowerShape, text: TextDecoderShape, ids: Record<string, unknown>): Record<string, unknown> {
  const D = tower.outHidden;
  const headDim = D / text.heads;
  // mrope_section splits head_dim/2 frequency pairs over (T, H, W) as the real 3B does (16, 24, 24 of 64).
  const half = headDim / 2;
  const t = Math.round(half / 4);
  const hw = (half - t) / 2;
  return {
    architectures: ['Qwen2_5_VLForConditionalGeneration'],
    model_type: 'qwen2_5_vl',
    image_token_id: ids.image_token_id,
    video_token_id: ids.video_token_id,
    vision_start_token_id: ids.vision_start_token_id,
    vision_end_token_id: ids.vision_end_token_id,
    tie_word_embeddings: false,
    text_config: {
      model_type: 'qwen2_5_vl_text',
      hidden_act: 'silu',
      hidden_size: D,
      intermediate_size: text.ffn,
      num_hidden_layers: text.layers,
      num_attention_heads: text.heads,
      num_key_value_heads: text.kvHeads,
      max_position_embeddings: 32768,
      rms_norm_eps: 1e-6,
      vocab_size: ids.vocab_size,
      bos_token_id: ids.bos_token_id,
      eos_token_id: ids.eos_token_id,
      tie_word_embeddings: false,
      rope_parameters: { rope_type: 'default', rope_theta: 1_000_000, mrope_section: [t, hw, hw] },
    },
    vision_config: {
      model_type: 'qwen2_5_vl_vision',
      depth: tower.depth,
      hidden_size: tower.hidden,
      hidden_act: 'silu',
      intermediate_size: tower.ffn,
      num_heads: tower.heads,
      in_channels: 3,
      out_hidden_size: D,
      patch_size: tower.patchSize,
      spatial_merge_size: 2,
      temporal_patch_size: 2,
      window_size: tower.windowSize,
      fullatt_block_indexes: tower.fullAttBlocks,
      tokens_per_second: 2,
    },
  };
}

/** Qwen2.5-VL's hub preprocessor_config.json (min/max_pixels as the 3B repo ships them). */
const PREPROCESSOR_CONFIG = {
  do_convert_rgb: true,
  do_normalize: true,
  do_rescale: true,
  do_resize: true,
  image_mean: [0.48145466, 0.4578275, 0.40821073],
  image_std: [0.26862954, 0.26130258, 0.27577711],
  image_processor_type: 'Qwen2VLImageProcessor',
  max_pixels: 12845056,
  min_pixels: 3136,
  merge_size: 2,
  patch_size: 14,
  processor_class: 'Qwen2_5_VLProcessor',
  resample: 3,
  rescale_factor: 0.00392156862745098,
  temporal_patch_size: 2,
};

/**
 * The checkpoint under `root` (generated if missing or stale). `tokenizerDir` supplies tokenizer.json,
 * tokenizer_config.json and the special-token ids (a Qwen2.5-VL tokenizer; its vocab sizes the embedding).
 */
export function ensureRandomVlmCheckpoint(
  root: string,
  tokenizerDir: string,
  tower: VlmTowerShape = QWEN25_VL_3B_TOWER,
  text: TextDecoderShape = SMALL_TEXT_DECODER,
): RandomVlmCheckpoint {
  const srcConfig = JSON.parse(readFileSync(join(tokenizerDir, 'config.json'), 'utf8')) as Record<string, unknown>;
  const srcText = (srcConfig.text_config ?? {}) as Record<string, unknown>;
  const ids = {
    image_token_id: srcConfig.image_token_id,
    video_token_id: srcConfig.video_token_id,
    vision_start_token_id: srcConfig.vision_start_token_id,
    vision_end_token_id: srcConfig.vision_end_token_id,
    vocab_size: srcText.vocab_size ?? srcConfig.vocab_size,
    bos_token_id: srcText.bos_token_id,
    eos_token_id: srcText.eos_token_id,
  };
  const vocab = ids.vocab_size;
  if (typeof vocab !== 'number') throw new Error(`${tokenizerDir}/config.json has no vocab_size`);
  const name = `qwen2_5_vl-tower-d${tower.depth}-h${tower.hidden}-text-l${text.layers}-h${tower.outHidden}-v${vocab}`;
  const dir = join(root, name);
  const { tensors, towerBytes, towerParameters } = qwen25VlTensors(tower, text, vocab);
  const total = checkpointBytes(tensors);
  const result = (cached: boolean, generateMs: number): RandomVlmCheckpoint => ({ dir, towerBytes, towerParameters, tensorBytes: total, cached, generateMs });
  if (checkpointComplete(dir, FORMAT_VERSION)) return result(true, 0);

  const t0 = performance.now();
  writeCheckpoint(dir, FORMAT_VERSION, qwen25VlConfig(tower, text, ids), tensors, (tmp) => {
    writeFileSync(join(tmp, 'preprocessor_config.json'), `${JSON.stringify(PREPROCESSOR_CONFIG, null, 2)}\n`);
    for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) {
      if (existsSync(join(tokenizerDir, f))) copyFileSync(join(tokenizerDir, f), join(tmp, f));
    }
  });
  return result(false, performance.now() - t0);
}
