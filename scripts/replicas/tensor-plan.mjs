// The tensors of a replica, named, typed and shaped as the published checkpoint holds them after
// mlx-lm's sanitize and quantization predicate (or transformers' save_pretrained for bf16 repos).
import { MLX_AFFINE_GROUP_SIZE } from './layouts.mjs';

/**
 * @typedef {{ kind: 'codes' } | { kind: 'const', value: number } | { kind: 'uniform', amp: number }} Fill
 * @typedef {{ name: string, dtype: 'U32' | 'BF16', shape: number[], fill: Fill }} TensorSpec
 */

/** Quantization of one module: the per-module override when config.quantization names it, else the default. */
function quantOf(q, path) {
  const o = q[path];
  return o && typeof o === 'object' ? { bits: o.bits, groupSize: o.group_size } : { bits: q.bits, groupSize: q.group_size };
}

/**
 * A weight [out, inp] as mlx stores it. Quantized (affine): packed codes U32 [out, inp*bits/32], scales and
 * biases BF16 [out, inp/group]; w = scale*code + bias spans [-amp, amp], amp ~ 1/sqrt(inp) so every
 * projection keeps activations O(1) over any depth (RMSNorm re-centres each block).
 */
function linear(out, path, outDim, inDim, q, amp) {
  const a = amp ?? 0.5 / Math.sqrt(inDim);
  if (!q || inDim % (quantOf(q, path).groupSize ?? MLX_AFFINE_GROUP_SIZE) !== 0) {
    out.push({ name: `${path}.weight`, dtype: 'BF16', shape: [outDim, inDim], fill: { kind: 'uniform', amp: a } });
    return;
  }
  const { bits, groupSize } = quantOf(q, path);
  const levels = 2 ** bits - 1;
  out.push({ name: `${path}.weight`, dtype: 'U32', shape: [outDim, (inDim * bits) / 32], fill: { kind: 'codes' } });
  out.push({ name: `${path}.scales`, dtype: 'BF16', shape: [outDim, inDim / groupSize], fill: { kind: 'const', value: (2 * a) / levels } });
  out.push({ name: `${path}.biases`, dtype: 'BF16', shape: [outDim, inDim / groupSize], fill: { kind: 'const', value: -a } });
}

const vec = (out, name, n, value) => out.push({ name, dtype: 'BF16', shape: [n], fill: { kind: 'const', value } });

/** Every tensor of the checkpoint, sorted by name (mlx and transformers both write sorted weight maps). */
export function tensorPlan(config, layout) {
  const q = layout.format === 'mlx' ? config.quantization : undefined;
  const h = config.hidden_size;
  const nh = config.num_attention_heads;
  const kv = config.num_key_value_heads ?? nh;
  const hd = config.head_dim ?? h / nh;
  const inter = config.intermediate_size;
  const p = layout.prefix;
  const out = [];
  linear(out, `${p}embed_tokens`, config.vocab_size, h, q, 0.05);
  vec(out, `${p}norm.weight`, h, layout.normCenter);
  for (let i = 0; i < config.num_hidden_layers; i++) {
    const l = `${p}layers.${i}`;
    vec(out, `${l}.input_layernorm.weight`, h, layout.normCenter);
    vec(out, `${l}.post_attention_layernorm.weight`, h, layout.normCenter);
    if (layout.sandwichNorms) {
      vec(out, `${l}.pre_feedforward_layernorm.weight`, h, layout.normCenter);
      vec(out, `${l}.post_feedforward_layernorm.weight`, h, layout.normCenter);
    }
    linear(out, `${l}.self_attn.q_proj`, nh * hd, h, q);
    linear(out, `${l}.self_attn.k_proj`, kv * hd, h, q);
    linear(out, `${l}.self_attn.v_proj`, kv * hd, h, q);
    linear(out, `${l}.self_attn.o_proj`, h, nh * hd, q);
    if (layout.qkvBias) {
      for (const [n, d] of [['q', nh * hd], ['k', kv * hd], ['v', kv * hd]]) vec(out, `${l}.self_attn.${n}_proj.bias`, d, 0);
    }
    if (layout.qkNorm) {
      vec(out, `${l}.self_attn.q_norm.weight`, hd, layout.normCenter);
      vec(out, `${l}.self_attn.k_norm.weight`, hd, layout.normCenter);
    }
    linear(out, `${l}.mlp.gate_proj`, inter, h, q);
    linear(out, `${l}.mlp.up_proj`, inter, h, q);
    linear(out, `${l}.mlp.down_proj`, h, inter, q);
  }
  if (layout.lmHead === 'config' && config.tie_word_embeddings === false) linear(out, 'lm_head', config.vocab_size, h, q, 0.05);
  return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

export const DTYPE_BYTES = { U32: 4, BF16: 2 };
export const tensorBytes = (t) => t.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[t.dtype];
