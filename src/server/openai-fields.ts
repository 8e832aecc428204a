// The request fields of OpenAI's Chat Completions and legacy Completions APIs (the openai SDK 6.x
// ChatCompletionCreateParamsBase / CompletionCreateParamsBase) and rapid's extensions: the one list
// validate.ts checks bodies against, and docs/serving.md lists.

/** The JSON type a field must have (null is always accepted: OpenAI's fields are nullable). */
export type FieldType = 'string' | 'boolean' | 'object' | 'array' | 'number';

/** OpenAI chat fields rapid applies (validate.ts, tools.ts, legacy-functions.ts parse them). */
export const APPLIED_CHAT_FIELDS: readonly string[] = [
  'messages', 'model', 'frequency_penalty', 'presence_penalty', 'logit_bias', 'logprobs', 'top_logprobs', 'max_tokens',
  'max_completion_tokens', 'n', 'seed', 'stop', 'stream', 'stream_options', 'temperature', 'top_p', 'response_format',
  'tools', 'tool_choice', 'parallel_tool_calls', 'functions', 'function_call', 'reasoning_effort',
];

/**
 * OpenAI chat fields accepted without effect on a local server (type-checked, then logged once).
 * prompt_cache_key is here too: every request already shares one prefix cache, so the key neither
 * routes nor splits it (cacheSalt would split it, the opposite of a hint).
 */
export const IGNORED_CHAT_FIELDS: Readonly<Record<string, FieldType>> = {
  audio: 'object',
  metadata: 'object',
  modalities: 'array',
  moderation: 'object',
  prediction: 'object',
  prompt_cache_key: 'string',
  prompt_cache_options: 'object',
  prompt_cache_retention: 'string',
  safety_identifier: 'string',
  service_tier: 'string',
  store: 'boolean',
  user: 'string',
  verbosity: 'string',
  web_search_options: 'object',
};

/** OpenAI legacy completion fields rapid applies. */
export const APPLIED_COMPLETION_FIELDS: readonly string[] = [
  'model', 'prompt', 'best_of', 'echo', 'frequency_penalty', 'presence_penalty', 'logit_bias', 'logprobs', 'max_tokens',
  'n', 'seed', 'stop', 'stream', 'stream_options', 'suffix', 'temperature', 'top_p',
];

export const IGNORED_COMPLETION_FIELDS: Readonly<Record<string, FieldType>> = { user: 'string' };

/** Fields OpenAI does not define that rapid applies (vLLM's names); never logged, never refused. */
export const RAPID_CHAT_EXTENSIONS: readonly string[] = ['top_k', 'min_p', 'repetition_penalty', 'chat_template_kwargs', 'rapid_budget_close'];
export const RAPID_COMPLETION_EXTENSIONS: readonly string[] = ['top_k', 'min_p', 'repetition_penalty', 'rapid_budget_close', 'response_format'];

/** stream_options members: include_usage is applied, include_obfuscation (a SSE padding) ignored. */
export const STREAM_OPTIONS_APPLIED: readonly string[] = ['include_usage'];
export const STREAM_OPTIONS_IGNORED: Readonly<Record<string, FieldType>> = { include_obfuscation: 'boolean' };

/** reasoning_effort values that turn a thinking model's thinking off; any other value turns it on. */
export const REASONING_OFF: ReadonlySet<string> = new Set(['none', 'minimal']);

/** How validate.ts treats each top-level field of one route. */
export interface RouteFields {
  readonly known: ReadonlySet<string>;
  readonly ignored: Readonly<Record<string, FieldType>>;
}

export const CHAT_ROUTE: RouteFields = {
  known: new Set([...APPLIED_CHAT_FIELDS, ...RAPID_CHAT_EXTENSIONS, ...Object.keys(IGNORED_CHAT_FIELDS)]),
  ignored: IGNORED_CHAT_FIELDS,
};

export const COMPLETION_ROUTE: RouteFields = {
  known: new Set([...APPLIED_COMPLETION_FIELDS, ...RAPID_COMPLETION_EXTENSIONS, ...Object.keys(IGNORED_COMPLETION_FIELDS)]),
  ignored: IGNORED_COMPLETION_FIELDS,
};

/** Whether a value has a field's type (null and undefined: absent, always fine). */
export function hasFieldType(value: unknown, type: FieldType): boolean {
  if (value === null || value === undefined) return true;
  switch (type) {
    case 'array':
      return Array.isArray(value);
    case 'object':
      return typeof value === 'object' && !Array.isArray(value);
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    default:
      return typeof value === type;
  }
}
