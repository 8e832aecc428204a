// Which config.json architectures `rapid run`/`serve` can run, checked right after config.json
// arrives so an unsupported model fails before gigabytes of weights are downloaded.
// Mirrors native/src/models/registry.cpp; a vision-language class stays planned until its vision
// runtime lands (the same rule as the catalog's "planned" status).
export const RUNNABLE_ARCHITECTURES = [
  'Qwen2ForCausalLM',
  'Qwen3ForCausalLM',
  'LlamaForCausalLM',
  'MistralForCausalLM',
  'Gemma3ForCausalLM',
  'Gemma3ForConditionalGeneration',
  'Gemma4ForConditionalGeneration',
  'Gemma4ForCausalLM',
  'Qwen2_5_VLForConditionalGeneration',
  'Qwen3VLForConditionalGeneration',
  'Qwen3MoeForCausalLM',
  'Qwen3VLMoeForConditionalGeneration',
  'Mistral3ForConditionalGeneration',
  'Ministral3ForCausalLM',
];

export const PLANNED_ARCHITECTURES: Record<string, string> = {};

/** undefined when runnable; otherwise why not, in one sentence. */
export function unsupportedArchitecture(config: Record<string, unknown>): string | undefined {
  const archs = Array.isArray(config.architectures) ? (config.architectures as unknown[]).filter((a): a is string => typeof a === 'string') : [];
  const arch = archs[0];
  if (!arch) return undefined; // the native loader falls back to model_type; let it decide
  if (RUNNABLE_ARCHITECTURES.includes(arch)) return undefined;
  if (PLANNED_ARCHITECTURES[arch]) return `its architecture ${arch} (${PLANNED_ARCHITECTURES[arch]}) is planned, not runnable yet`;
  return `its architecture ${arch} is not supported (rapid runs ${RUNNABLE_ARCHITECTURES.join(', ')})`;
}
