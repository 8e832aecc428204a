// The tensors of a replica, named, typed and shaped as the published checkpoint holds them after
// mlx-lm's sanitize and quantization predicate (or transformers' save_pretrained for bf16 repos).
// Values come from the bench's position-seeded fills (src/bench/random-checkpoint.ts, compiled to dist/).
import { MLX_AFFINE_GROUP_SIZE } from './layouts.mjs';
import { bf16, fillConst, fillRandomBits, fillScales, fillUniform, hash32 } from './random-fills.mjs';

/** @typedef {{ name: string, dtype: 'U32' | 'BF16', shape: number[], fill: (chunk: Buffer, byteOffset: number) => void }} TensorSpec */

/** Quantization of one module: the per-module override when config.quantization names it, else the default. */
function quantOf(q, path) {
  const o = q[path];
  return o && typeof o === 'object' ? { bits: o.bits, groupSize: o.group_size } : { bits: q.bits, groupSize: q.group_size };
}

/** Weight std of every projection: the bench checkpoints' 0.02, which keeps activations finite at any depth. */
const WEIGHT_STD = 0.02;

/**
 * A weight [out, inp] as mlx stores it: quantized (affine) as packed codes U32 [out, inp*bits/32] with
 * scales and biases BF16 [out, inp/group] (mean 0, std 0.02), or BF16 [out, inp] when not quantized
 * (bf16 repos, or a module whose input dim does not divide the group size: mlx-lm's predicate).
 */
export function linear(out, path, outDim, inDim, q, seed0, lead = []) {
  const seed = hash32(seed0 + out.length);
  if (!q || inDim % (quantOf(q, path).groupSize ?? MLX_AFFINE_GROUP_SIZE) !== 0) {
    const amp = WEIGHT_STD * Math.sqrt(3); // uniform with std 0.02
    out.push({ name: `${path}.weight`, dtype: 'BF16', shape: [...lead, outDim, inDim], fill: fillUniform(seed, amp) });
    return;
  }
  const { bits, groupSize } = quantOf(q, path);
  out.push({ name: `${path}.weight`, dtype: 'U32', shape: [...lead, outDim, (inDim * bits) / 32], fill: fillRandomBits(seed) });
  out.push({ name: `${path}.scales`, dtype: 'BF16', shape: [...lead, outDim, inDim / groupSize], fill: fillScales(seed, bits, false) });
  out.push({ name: `${path}.biases`, dtype: 'BF16', shape: [...lead, outDim, inDim / groupSize], fill: fillScales(seed, bits, true) });
}

/** A bf16 tensor of one value (norm weights, biases, clip bounds). */
export const vec = (out, name, n, value) => out.push({ name, dtype: 'BF16', shape: Array.isArray(n) ? n : [n], fill: fillConst(bf16(value)) });

/** bf16 tensor of any shape (convolutions, position tables), uniform with std 0.02. */
export function dense(out, name, shape, seed0) {
  out.push({ name, dtype: 'BF16', shape, fill: fillUniform(hash32(seed0 + out.length), WEIGHT_STD * Math.sqrt(3)) });
}

export const byName = (a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

/** Every tensor of the checkpoint, sorted by name (mlx and transformers both write sorted weight maps). */
export function tensorPlan(config, layout, seed = 1) {
  const q = layout.format === 'mlx' ? config.quantization : undefined;
  const out = textDecoder(config, layout, q, seed, layout.prefix);
  if (layout.lmHead === 'copied' || (layout.lmHead === 'config' && config.tie_word_embeddings === false)) linear(out, 'lm_head', config.vocab_size, config.hidden_size, q, seed);
  return out.sort(byName);
}

/**
 * The decoder of a dense text family under `p` (embeddings, layers, final norm; no head). `mlp(out, l, i)`
 * replaces a layer's gate/up/down MLP (mixture-of-experts layers).
 */
export function textDecoder(config, layout, q, seed, p, mlp = undefined) {
  const h = config.hidden_size;
  const nh = config.num_attention_heads;
  const kv = config.num_key_value_heads ?? nh;
  const hd = config.head_dim ?? h / nh;
  const inter = config.intermediate_size;
  const out = [];
  linear(out, `${p}embed_tokens`, config.vocab_size, h, q, seed);
  vec(out, `${p}norm.weight`, h, layout.normCenter);
  for (let i = 0; i < config.num_hidden_layers; i++) {
    const l = `${p}layers.${i}`;
    vec(out, `${l}.input_layernorm.weight`, h, layout.normCenter);
    vec(out, `${l}.post_attention_layernorm.weight`, h, layout.normCenter);
    if (layout.sandwichNorms) {
      vec(out, `${l}.pre_feedforward_layernorm.weight`, h, layout.normCenter);
      vec(out, `${l}.post_feedforward_layernorm.weight`, h, layout.normCenter);
    }
    linear(out, `${l}.self_attn.q_proj`, nh * hd, h, q, seed);
    linear(out, `${l}.self_attn.k_proj`, kv * hd, h, q, seed);
    linear(out, `${l}.self_attn.v_proj`, kv * hd, h, q, seed);
    linear(out, `${l}.self_attn.o_proj`, h, nh * hd, q, seed);
    if (layout.qkvBias) {
      for (const [n, d] of [['q', nh * hd], ['k', kv * hd], ['v', kv * hd]]) vec(out, `${l}.self_attn.${n}_proj.bias`, d, 0);
    }
    if (layout.qkNorm) {
      vec(out, `${l}.self_attn.q_norm.weight`, hd, layout.normCenter);
      vec(out, `${l}.self_attn.k_norm.weight`, hd, layout.normCenter);
    }
    if (mlp?.(out, l, i)) continue;
    linear(out, `${l}.mlp.gate_proj`, inter, h, q, seed);
    linear(out, `${l}.mlp.up_proj`, inter, h, q, seed);
    linear(out, `${l}.mlp.down_proj`, h, inter, q, seed);
  }
  return out;
}
