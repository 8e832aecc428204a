// The tensors of a VLM replica, named, typed and shaped as mlx-vlm's convert writes them: its sanitize
// (language_model.model. / language_model.lm_head / vision_tower. / multi_modal_projector. prefixes, conv patch
// embeddings channels-last [O, (T,) kH, kW, C], MoE experts stacked as switch_mlp / switch_glu) and its
// quantization predicate (text Linear/Embedding at the config's bits when the input dim divides the group;
// skip_multimodal_module keeps vision_tower / vision_model / multi_modal_projector bf16; per-module overrides
// from the family's quant_predicate). Read from Blaizzy/mlx-vlm 9b13f52 (2026-08-22); see docs/replicas.md.
import { byName, dense, linear, textDecoder, vec } from './tensor-plan.mjs';

const LM = 'language_model.model.';
const HEAD = 'language_model.lm_head';

/** transformers' defaults for fields the published configs leave out (Gemma3TextConfig, SiglipVisionConfig). */
const GEMMA3_TEXT_DEFAULTS = { vocab_size: 262208, head_dim: 256, rms_norm_eps: 1e-6 };
const SIGLIP_DEFAULTS = { num_channels: 3 };

/** The text config of a VLM: text_config (with defaults), or the top level (Qwen2.5-VL's flat file). */
export function textConfigOf(config, family) {
  const t = config.text_config ?? config;
  return family === 'gemma3' ? { ...GEMMA3_TEXT_DEFAULTS, ...t } : t;
}

function qwenTower(out, v, family, seed) {
  const p = 'vision_tower.';
  const h = v.hidden_size;
  const m2 = v.spatial_merge_size ** 2;
  const C = v.in_chans ?? v.in_channels ?? 3;
  const v3 = family !== 'qwen2_5_vl';
  dense(out, `${p}patch_embed.proj.weight`, [h, v.temporal_patch_size, v.patch_size, v.patch_size, C], seed);
  if (v3) {
    vec(out, `${p}patch_embed.proj.bias`, h, 0);
    dense(out, `${p}pos_embed.weight`, [v.num_position_embeddings, h], seed);
  }
  const norm = (name, n) => {
    vec(out, `${name}.weight`, n, 1);
    if (v3) vec(out, `${name}.bias`, n, 0); // Qwen3-VL: LayerNorm; Qwen2.5-VL: RMSNorm
  };
  const lin = (name, o, i) => (linear(out, name, o, i, undefined, seed), vec(out, `${name}.bias`, o, 0));
  for (let i = 0; i < v.depth; i++) {
    const b = `${p}blocks.${i}`;
    norm(`${b}.norm1`, h);
    norm(`${b}.norm2`, h);
    lin(`${b}.attn.qkv`, 3 * h, h);
    lin(`${b}.attn.proj`, h, h);
    if (v3) {
      lin(`${b}.mlp.linear_fc1`, v.intermediate_size, h);
      lin(`${b}.mlp.linear_fc2`, h, v.intermediate_size);
    } else {
      lin(`${b}.mlp.gate_proj`, v.intermediate_size, h);
      lin(`${b}.mlp.up_proj`, v.intermediate_size, h);
      lin(`${b}.mlp.down_proj`, h, v.intermediate_size);
    }
  }
  if (!v3) {
    vec(out, `${p}merger.ln_q.weight`, h, 1);
    lin(`${p}merger.mlp.0`, h * m2, h * m2);
    lin(`${p}merger.mlp.2`, v.out_hidden_size, h * m2);
    return;
  }
  // the main merger normalises before the spatial merge (hidden), the DeepStack ones after it (hidden * merge^2)
  const mergers = [[`${p}merger`, h], ...(v.deepstack_visual_indexes ?? []).map((_, k) => [`${p}deepstack_merger_list.${k}`, h * m2])];
  for (const [name, n] of mergers) {
    norm(`${name}.norm`, n);
    lin(`${name}.linear_fc1`, h * m2, h * m2);
    lin(`${name}.linear_fc2`, v.out_hidden_size, h * m2);
  }
}

function siglipTower(out, v, seed) {
  v = { ...SIGLIP_DEFAULTS, ...v };
  const p = 'vision_tower.vision_model.';
  const h = v.hidden_size;
  const ln = (name) => (vec(out, `${name}.weight`, h, 1), vec(out, `${name}.bias`, h, 0));
  const lin = (name, o, i) => (linear(out, name, o, i, undefined, seed), vec(out, `${name}.bias`, o, 0));
  dense(out, `${p}embeddings.patch_embedding.weight`, [h, v.patch_size, v.patch_size, v.num_channels], seed);
  vec(out, `${p}embeddings.patch_embedding.bias`, h, 0);
  dense(out, `${p}embeddings.position_embedding.weight`, [(v.image_size / v.patch_size) ** 2, h], seed);
  for (let i = 0; i < v.num_hidden_layers; i++) {
    const l = `${p}encoder.layers.${i}`;
    ln(`${l}.layer_norm1`);
    ln(`${l}.layer_norm2`);
    for (const n of ['q_proj', 'k_proj', 'v_proj', 'out_proj']) lin(`${l}.self_attn.${n}`, h, h);
    lin(`${l}.mlp.fc1`, v.intermediate_size, h);
    lin(`${l}.mlp.fc2`, h, v.intermediate_size);
  }
  ln(`${p}post_layernorm`);
}

function pixtralTower(out, v, seed) {
  const p = 'vision_tower.vision_model.';
  const h = v.hidden_size;
  dense(out, `${p}patch_conv.weight`, [h, v.patch_size, v.patch_size, v.num_channels ?? 3], seed);
  vec(out, `${p}ln_pre.weight`, h, 1);
  for (let i = 0; i < v.num_hidden_layers; i++) {
    const l = `${p}transformer.layers.${i}`;
    vec(out, `${l}.attention_norm.weight`, h, 1);
    vec(out, `${l}.ffn_norm.weight`, h, 1);
    for (const n of ['q_proj', 'k_proj', 'v_proj', 'o_proj']) linear(out, `${l}.attention.${n}`, h, h, undefined, seed);
    linear(out, `${l}.feed_forward.gate_proj`, v.intermediate_size, h, undefined, seed);
    linear(out, `${l}.feed_forward.up_proj`, v.intermediate_size, h, undefined, seed);
    linear(out, `${l}.feed_forward.down_proj`, h, v.intermediate_size, undefined, seed);
  }
}

/** Gemma 4's text decoder: per-layer embeddings, KV-shared tail layers, double-wide MLP, optional MoE block. */
function gemma4Text(out, t, q, seed) {
  const h = t.hidden_size;
  const L = t.num_hidden_layers;
  const ple = t.hidden_size_per_layer_input ?? 0;
  linear(out, `${LM}embed_tokens`, t.vocab_size, h, q, seed);
  vec(out, `${LM}norm.weight`, h, 0);
  if (ple > 0) {
    linear(out, `${LM}embed_tokens_per_layer`, t.vocab_size_per_layer_input, L * ple, q, seed);
    linear(out, `${LM}per_layer_model_projection`, L * ple, h, q, seed);
    vec(out, `${LM}per_layer_projection_norm.weight`, ple, 0);
  }
  const firstShared = L - (t.num_kv_shared_layers ?? 0);
  for (let i = 0; i < L; i++) {
    const l = `${LM}layers.${i}`;
    const full = t.layer_types[i] === 'full_attention';
    // full layers: global_head_dim / num_global_key_value_heads (or the tiny fixtures' per_layer_config)
    const per = t.per_layer_config?.[String(i)] ?? {};
    const hd = (full ? t.global_head_dim : undefined) ?? per.head_dim ?? t.head_dim;
    const kv = (full ? t.num_global_key_value_heads : undefined) ?? per.num_key_value_heads ?? t.num_key_value_heads;
    const shared = i >= firstShared; // reads another layer's KV: no k/v projections of its own
    for (const n of ['input_layernorm', 'post_attention_layernorm', 'pre_feedforward_layernorm', 'post_feedforward_layernorm']) vec(out, `${l}.${n}.weight`, h, 0);
    vec(out, `${l}.layer_scalar`, 1, 1);
    linear(out, `${l}.self_attn.q_proj`, t.num_attention_heads * hd, h, q, seed);
    linear(out, `${l}.self_attn.o_proj`, h, t.num_attention_heads * hd, q, seed);
    vec(out, `${l}.self_attn.q_norm.weight`, hd, 0);
    if (!shared) {
      linear(out, `${l}.self_attn.k_proj`, kv * hd, h, q, seed);
      if (!(full && t.attention_k_eq_v)) linear(out, `${l}.self_attn.v_proj`, kv * hd, h, q, seed);
      vec(out, `${l}.self_attn.k_norm.weight`, hd, 0);
    }
    const inter = t.intermediate_size * (shared && t.use_double_wide_mlp ? 2 : 1);
    linear(out, `${l}.mlp.gate_proj`, inter, h, q, seed);
    linear(out, `${l}.mlp.up_proj`, inter, h, q, seed);
    linear(out, `${l}.mlp.down_proj`, h, inter, q, seed);
    if (ple > 0) {
      linear(out, `${l}.per_layer_input_gate`, ple, h, q, seed);
      linear(out, `${l}.per_layer_projection`, h, ple, q, seed);
      vec(out, `${l}.post_per_layer_input_norm.weight`, h, 0);
    }
    if (t.enable_moe_block) {
      const E = t.num_experts;
      const mi = t.moe_intermediate_size;
      for (const n of ['post_feedforward_layernorm_1', 'post_feedforward_layernorm_2', 'pre_feedforward_layernorm_2']) vec(out, `${l}.${n}.weight`, h, 0);
      linear(out, `${l}.router.proj`, E, h, q, seed);
      vec(out, `${l}.router.scale`, h, 1);
      vec(out, `${l}.router.per_expert_scale`, E, 1);
      linear(out, `${l}.experts.switch_glu.gate_proj`, mi, h, q, seed, [E]);
      linear(out, `${l}.experts.switch_glu.up_proj`, mi, h, q, seed, [E]);
      linear(out, `${l}.experts.switch_glu.down_proj`, h, mi, q, seed, [E]);
    }
  }
}

function gemma4Tower(out, v, textHidden, q, seed) {
  const p = 'vision_tower.';
  const h = v.hidden_size;
  const hd = v.head_dim;
  // use_clipped_linears: each tower Linear is wrapped (.linear) with 0-d input/output clip bounds (transformers'
  // scalar buffers, kept as they are by mlx-vlm's sanitize); wide, so random activations are not clipped
  const lin = (name, o, i) => {
    linear(out, `${name}.linear`, o, i, undefined, seed);
    if (v.use_clipped_linears) for (const [b, x] of [['input_min', -1e4], ['input_max', 1e4], ['output_min', -1e4], ['output_max', 1e4]]) vec(out, `${name}.${b}`, [], x);
  };
  linear(out, `${p}patch_embedder.input_proj`, h, 3 * v.patch_size ** 2, undefined, seed);
  dense(out, `${p}patch_embedder.position_embedding_table`, [2, v.position_embedding_size, h], seed);
  for (let i = 0; i < v.num_hidden_layers; i++) {
    const l = `${p}encoder.layers.${i}`;
    for (const n of ['input_layernorm', 'post_attention_layernorm', 'pre_feedforward_layernorm', 'post_feedforward_layernorm']) vec(out, `${l}.${n}.weight`, h, 0);
    lin(`${l}.self_attn.q_proj`, v.num_attention_heads * hd, h);
    lin(`${l}.self_attn.k_proj`, v.num_key_value_heads * hd, h);
    lin(`${l}.self_attn.v_proj`, v.num_key_value_heads * hd, h);
    lin(`${l}.self_attn.o_proj`, h, v.num_attention_heads * hd);
    vec(out, `${l}.self_attn.q_norm.weight`, hd, 0);
    vec(out, `${l}.self_attn.k_norm.weight`, hd, 0);
    lin(`${l}.mlp.gate_proj`, v.intermediate_size, h);
    lin(`${l}.mlp.up_proj`, v.intermediate_size, h);
    lin(`${l}.mlp.down_proj`, h, v.intermediate_size);
  }
  if (v.standardize) {
    vec(out, `${p}std_bias`, h, 0);
    vec(out, `${p}std_scale`, h, 1);
  }
  // embed_vision is not in mlx-vlm's multimodal skip list: quantized like the text
  linear(out, 'embed_vision.embedding_projection', textHidden, h, q, seed);
}

/**
 * Gemma 4 E2B/E4B's audio tower (a conformer rapid does not run, but the repos hold it): mlx-vlm keeps it bf16
 * (audio_tower is in the skip list), drops the model. prefix, stores the subsampling Conv2d weights
 * [O, kH, kW, C] and the depthwise Conv1d [C, k, 1]; embed_audio is quantized like embed_vision.
 */
function gemma4Audio(out, a, textHidden, q, seed) {
  const p = 'audio_tower.';
  const H = a.hidden_size;
  const [c0, c1] = a.subsampling_conv_channels;
  const clipped = (name, o, i) => {
    linear(out, `${name}.linear`, o, i, undefined, seed);
    if (a.use_clipped_linears) for (const [b, x] of [['input_min', -1e4], ['input_max', 1e4], ['output_min', -1e4], ['output_max', 1e4]]) vec(out, `${name}.${b}`, [], x);
  };
  dense(out, `${p}subsample_conv_projection.layer0.conv.weight`, [c0, 3, 3, 1], seed);
  vec(out, `${p}subsample_conv_projection.layer0.norm.weight`, c0, 1);
  dense(out, `${p}subsample_conv_projection.layer1.conv.weight`, [c1, 3, 3, c0], seed);
  vec(out, `${p}subsample_conv_projection.layer1.norm.weight`, c1, 1);
  // two stride-2 convolutions: the 128 mel bins become 32 per channel
  linear(out, `${p}subsample_conv_projection.input_proj_linear`, H, (c1 * (a.input_feat_size ?? 128)) / 4, undefined, seed);
  for (let i = 0; i < a.num_hidden_layers; i++) {
    const l = `${p}layers.${i}`;
    for (const ff of ['feed_forward1', 'feed_forward2']) {
      clipped(`${l}.${ff}.ffw_layer_1`, 4 * H, H);
      clipped(`${l}.${ff}.ffw_layer_2`, H, 4 * H);
      vec(out, `${l}.${ff}.pre_layer_norm.weight`, H, 1);
      vec(out, `${l}.${ff}.post_layer_norm.weight`, H, 1);
    }
    vec(out, `${l}.self_attn.per_dim_scale`, H / a.num_attention_heads, 0);
    for (const n of ['q_proj', 'k_proj', 'v_proj', 'post']) clipped(`${l}.self_attn.${n}`, H, H);
    linear(out, `${l}.self_attn.relative_k_proj`, H, H, undefined, seed);
    clipped(`${l}.lconv1d.linear_start`, 2 * H, H);
    clipped(`${l}.lconv1d.linear_end`, H, H);
    dense(out, `${l}.lconv1d.depthwise_conv1d.weight`, [H, a.conv_kernel_size, 1], seed);
    vec(out, `${l}.lconv1d.pre_layer_norm.weight`, H, 1);
    vec(out, `${l}.lconv1d.conv_norm.weight`, H, 1);
    for (const n of ['norm_pre_attn', 'norm_post_attn', 'norm_out']) vec(out, `${l}.${n}.weight`, H, 1);
  }
  linear(out, `${p}output_proj`, a.output_proj_dims, H, undefined, seed);
  vec(out, `${p}output_proj.bias`, a.output_proj_dims, 0);
  linear(out, 'embed_audio.embedding_projection', textHidden, a.output_proj_dims, q, seed);
}

/**
 * Per-module quantization entries mlx-vlm records for a family (its quant_predicate returns a dict for them):
 * Qwen3-VL-MoE router gates (mlp.gate) and Gemma 4 routers (router.proj) at 8 bits, group 64.
 */
export function vlmQuantOverrides(config, family) {
  const t = textConfigOf(config, family);
  const eight = { group_size: 64, bits: 8, mode: 'affine' };
  const out = {};
  for (let i = 0; i < t.num_hidden_layers; i++) {
    if (family === 'qwen3_vl_moe' && isQwenMoeLayer(t, i)) out[`${LM}layers.${i}.mlp.gate`] = eight;
    if (family === 'gemma4' && t.enable_moe_block) out[`${LM}layers.${i}.router.proj`] = eight;
  }
  return out;
}

const expertCount = (t) => t.num_experts ?? t.num_local_experts ?? 0;
const isQwenMoeLayer = (t, i) => expertCount(t) > 0 && !(t.mlp_only_layers ?? []).includes(i) && (i + 1) % (t.decoder_sparse_step ?? 1) === 0;

/**
 * Every tensor of a VLM checkpoint, sorted by name. `layout` is the VLM family row (vlm-layouts.mjs): its
 * text layout flags, lmHead rule and which modules an older mlx-vlm quantized (lmHeadQuantized,
 * projectorQuantized).
 */
export function vlmTensorPlan(config, layout, seed = 1) {
  const q = config.quantization;
  const fam = layout.vlmFamily;
  const t = textConfigOf(config, fam);
  const v = config.vision_config;
  let out;
  if (fam === 'gemma4') {
    out = [];
    gemma4Text(out, t, q, seed);
    gemma4Tower(out, v, t.hidden_size, q, seed);
    if (config.audio_config) gemma4Audio(out, config.audio_config, t.hidden_size, q, seed);
  } else {
    const moe = fam === 'qwen3_vl_moe'
      ? (o, l, i) => {
          if (!isQwenMoeLayer(t, i)) return false;
          const E = expertCount(t);
          const h = t.hidden_size;
          const mi = t.moe_intermediate_size;
          linear(o, `${l}.mlp.gate`, E, h, q, seed);
          linear(o, `${l}.mlp.switch_mlp.gate_proj`, mi, h, q, seed, [E]);
          linear(o, `${l}.mlp.switch_mlp.up_proj`, mi, h, q, seed, [E]);
          linear(o, `${l}.mlp.switch_mlp.down_proj`, h, mi, q, seed, [E]);
          return true;
        }
      : undefined;
    out = textDecoder(t, layout, q, seed, LM, moe);
    if (fam === 'qwen2_5_vl' || fam === 'qwen3_vl' || fam === 'qwen3_vl_moe') qwenTower(out, v, fam, seed);
    if (fam === 'gemma3') {
      siglipTower(out, v, seed);
      // a plain parameter and a Gemma RMSNorm (1 + w): neither is a Linear, both stay bf16
      dense(out, 'multi_modal_projector.mm_input_projection_weight', [v.hidden_size, t.hidden_size], seed);
      vec(out, 'multi_modal_projector.mm_soft_emb_norm.weight', v.hidden_size, 0);
    }
    if (fam === 'mistral3') {
      pixtralTower(out, v, seed);
      const pq = layout.projectorQuantized ? q : undefined;
      const m2 = (config.spatial_merge_size ?? 2) ** 2;
      vec(out, 'multi_modal_projector.norm.weight', v.hidden_size, 1);
      linear(out, 'multi_modal_projector.patch_merger.merging_layer', v.hidden_size, v.hidden_size * m2, pq, seed);
      linear(out, 'multi_modal_projector.linear_1', t.hidden_size, v.hidden_size, pq, seed);
      linear(out, 'multi_modal_projector.linear_2', t.hidden_size, t.hidden_size, pq, seed);
    }
  }
  // transformers' default when a config leaves it out: MistralConfig unties, the other families tie
  const tied = t.tie_word_embeddings ?? config.tie_word_embeddings ?? fam !== 'mistral3';
  if (layout.lmHead === 'copied' || !tied) linear(out, HEAD, t.vocab_size, t.hidden_size, layout.lmHeadQuantized === false ? undefined : q, seed);
  return out.sort(byName);
}
