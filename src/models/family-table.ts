// The one table of what each runnable architecture's checkpoint holds, as native/src/models/* reads it:
// which decoder, which optional tensors (biases, q/k norms, sandwich norms, experts), the tied-head
// default, config defaults the loader fills in, and the vision tower it loads when its tensors exist.
export type VisionFamily = 'gemma3' | 'gemma4' | 'pixtral' | 'qwen2_5_vl' | 'qwen3_vl';

export interface FamilySpec {
  family: string; // native registry family (ModelInfo.family)
  modelType: string; // config model_type when architectures is absent
  decoder: 'generic' | 'gemma4'; // generic: native/src/models/decoder.cpp; gemma4: its own decoder
  qkvBias: 'always' | 'attention_bias' | 'never';
  oBias: 'attention_bias' | 'never';
  qkNorm: boolean;
  sandwichNorms: boolean; // pre/post feed-forward norms around the MLP (Gemma)
  moe: boolean; // Qwen3-MoE experts (num_experts / num_local_experts)
  mrope: boolean; // rope_parameters.mrope_section over head_dim / 2
  tieDefault: boolean;
  /** Values the native loader assumes when the text config omits them (transformers class defaults). */
  textDefaults?: Record<string, number>;
  vision?: VisionFamily;
  /** An embedding model: the decoder without an LM head (keys may have no "model." prefix); serves /v1/embeddings only. */
  embeddingOnly?: boolean;
}

const qwen3 = { qkvBias: 'attention_bias', oBias: 'attention_bias', qkNorm: true, sandwichNorms: false } as const;
const llama = { qkvBias: 'attention_bias', oBias: 'attention_bias', qkNorm: false, sandwichNorms: false } as const;
const plain = { decoder: 'generic', moe: false, mrope: false, tieDefault: false } as const;
// Gemma3TextConfig defaults (native/src/models/gemma3.cpp with_gemma3_defaults).
const GEMMA3_DEFAULTS = {
  vocab_size: 262208, hidden_size: 2304, intermediate_size: 9216, num_hidden_layers: 26, num_attention_heads: 8,
  num_key_value_heads: 4, head_dim: 256, max_position_embeddings: 131072, rms_norm_eps: 1e-6,
  rope_theta: 1000000, rope_local_base_freq: 10000, query_pre_attn_scalar: 256, sliding_window: 4096,
  sliding_window_pattern: 6,
};
const gemma3 = {
  ...plain, family: 'gemma3', qkvBias: 'attention_bias', oBias: 'attention_bias', qkNorm: true, sandwichNorms: true,
  tieDefault: true, textDefaults: GEMMA3_DEFAULTS,
} as const;
// Gemma4TextConfig defaults (native/src/models/gemma4.cpp with_gemma4_defaults).
const GEMMA4_DEFAULTS = {
  vocab_size: 262144, hidden_size: 2304, intermediate_size: 9216, num_hidden_layers: 30, num_attention_heads: 8,
  num_key_value_heads: 4, head_dim: 256, max_position_embeddings: 131072, rms_norm_eps: 1e-6, sliding_window: 512,
  vocab_size_per_layer_input: 262144, hidden_size_per_layer_input: 256, num_kv_shared_layers: 0, global_head_dim: 512,
  pad_token_id: 0,
};
const gemma4 = {
  ...plain, family: 'gemma4', decoder: 'gemma4', qkvBias: 'never', oBias: 'never', qkNorm: true, sandwichNorms: true,
  tieDefault: true, textDefaults: GEMMA4_DEFAULTS,
} as const;
const mistral3 = { ...plain, family: 'mistral3', qkvBias: 'never', oBias: 'never', qkNorm: false, sandwichNorms: false } as const;

/** By config.json architectures[0]; mirrors native/src/models/registry.cpp. */
export const FAMILIES: Record<string, FamilySpec> = {
  Qwen2ForCausalLM: { ...plain, family: 'qwen2', modelType: 'qwen2', qkvBias: 'always', oBias: 'never', qkNorm: false, sandwichNorms: false },
  Qwen3ForCausalLM: { ...plain, ...qwen3, family: 'qwen3', modelType: 'qwen3' },
  Qwen3Model: { ...plain, ...qwen3, family: 'qwen3', modelType: 'qwen3', embeddingOnly: true },
  LlamaForCausalLM: { ...plain, ...llama, family: 'llama', modelType: 'llama' },
  MistralForCausalLM: { ...plain, ...llama, family: 'llama', modelType: 'mistral' },
  Gemma3ForCausalLM: { ...gemma3, modelType: 'gemma3_text' },
  Gemma3ForConditionalGeneration: { ...gemma3, modelType: 'gemma3', vision: 'gemma3' },
  Gemma4ForConditionalGeneration: { ...gemma4, modelType: 'gemma4', vision: 'gemma4' },
  Gemma4ForCausalLM: { ...gemma4, modelType: 'gemma4_text' },
  Qwen2_5_VLForConditionalGeneration: { ...plain, family: 'qwen2_5_vl', modelType: 'qwen2_5_vl', qkvBias: 'always', oBias: 'never', qkNorm: false, sandwichNorms: false, mrope: true, vision: 'qwen2_5_vl' },
  Qwen3VLForConditionalGeneration: { ...plain, ...qwen3, family: 'qwen3_vl', modelType: 'qwen3_vl', mrope: true, vision: 'qwen3_vl' },
  Mistral3ForConditionalGeneration: { ...mistral3, modelType: 'mistral3', vision: 'pixtral' },
  Ministral3ForCausalLM: { ...mistral3, modelType: 'ministral3' },
  Qwen3MoeForCausalLM: { ...plain, ...qwen3, family: 'qwen3_moe', modelType: 'qwen3_moe', moe: true },
  Qwen3VLMoeForConditionalGeneration: { ...plain, ...qwen3, family: 'qwen3_vl_moe', modelType: 'qwen3_vl_moe', moe: true, mrope: true, vision: 'qwen3_vl' },
};

/** Vision layer counts the native towers assume when vision_config omits them. */
export const VISION_DEFAULT_LAYERS: Record<VisionFamily, number> = { gemma3: 27, gemma4: 16, pixtral: 24, qwen2_5_vl: 32, qwen3_vl: 27 };

/** Key prefixes the native loader probes for the text decoder and the head (decoder.cpp find_decoder_names). */
export const DECODER_PREFIXES = ['model', 'language_model.model', 'model.language_model'];
export const HEAD_PREFIXES = ['lm_head', 'language_model.lm_head'];
