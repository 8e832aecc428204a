// Request bodies of /v1/chat/completions and /v1/completions: type checks with the field at fault,
// OpenAI's fields without effect here accepted and logged, fields OpenAI does not define accepted
// and logged too unless the server is strict (openai-fields.ts lists them), then the engine's
// sampling parameters.
import { withSamplingDefaults } from '../engine/defaults.js';
import { InvalidRequestError } from '../errors/request-errors.js';
import { resolveSamplingParams, SAMPLING_LIMITS, type SamplingInput, type SamplingParams } from '../engine/sampling-params.js';
import { parseResponseFormat, type ResponseFormat } from './response-format.js';
import type { ChatContentPart, ChatMessage } from '../template/chat-template.js';
import { badRequest, notFound } from './http-errors.js';
import { IMAGE_TYPES, type RequestImages } from './images.js';
import type { MultimodalInput } from '../engine/multimodal.js';
import type { LoadedImage } from './served-model.js';
import { servedNames, servesName, type ServedModel } from './served-model.js';
import { CHAT_ROUTE, COMPLETION_ROUTE, hasFieldType, REASONING_OFF, STREAM_OPTIONS_APPLIED, STREAM_OPTIONS_IGNORED, type RouteFields } from './openai-fields.js';
import { SILENT_POLICY, type RequestPolicy } from './request-policy.js';
import { foldFunctionMessages, inFunctionTerms, toolsWithFunctions } from './legacy-functions.js';
import { parseToolRequest, prepareToolMessages, type ToolRequest } from './tools.js';
import { isObject } from '../engine/is-object.js';
import { REQUEST_LIMITS } from './request-limits.js';

export interface GenerationRequest {
  kind: 'chat' | 'text';
  promptIds: number[];
  /** The request's images (placeholder spans in promptIds) and mRoPE positions. */
  multimodal?: MultimodalInput;
  params: SamplingParams;
  stream: boolean;
  includeUsage: boolean;
  /** -1: no logprobs; 0: sampled token only; k: plus top k. */
  logprobs: number;
  /** Structured output (json_object / json_schema); absent for free text. */
  responseFormat?: ResponseFormat;
  /** Split <think> reasoning into reasoning_content (thinking model, thinking not turned off). */
  reasoning?: boolean;
  /** Tools in play: a forced call (required / named, grammar-constrained) or auto (parsed from the output). */
  tools?: ToolRequest;
  /** The request used the deprecated `functions`/`function_call`: answered in that shape (completions.ts). */
  legacyFunctions?: boolean;
  /** The detokenizer keeps special tokens (tool-call markers that are special tokens). */
  keepSpecialTokens?: boolean;
  /** rapid_budget_close: constrained output steers to a valid end before max_tokens cuts it (default true). */
  budgetClose?: boolean;
  /** Choices to generate (`n`), each its own engine request; absent: 1. */
  n?: number;
}

type Body = Record<string, unknown>;

const ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool', 'function']);
const MAX_TOP = SAMPLING_LIMITS.maxTopLogprobs;

function present(body: Body, key: string): boolean {
  return body[key] !== undefined && body[key] !== null;
}

function num(body: Body, key: string): number | undefined {
  if (!present(body, key)) return undefined;
  const v = body[key];
  if (typeof v !== 'number' || !Number.isFinite(v)) throw badRequest(`${key} must be a number`, key, 'invalid_type');
  return v;
}

function int(body: Body, key: string): number | undefined {
  const v = num(body, key);
  if (v !== undefined && !Number.isInteger(v)) throw badRequest(`${key} must be an integer`, key, 'invalid_type');
  return v;
}

function bool(body: Body, key: string): boolean | undefined {
  if (!present(body, key)) return undefined;
  if (typeof body[key] !== 'boolean') throw badRequest(`${key} must be a boolean`, key, 'invalid_type');
  return body[key] as boolean;
}

/** A field's type errors name it; an ignored field is logged once; an unknown one too, or refused when strict. */
function checkFields(body: Body, route: RouteFields, policy: RequestPolicy, prefix = ''): void {
  for (const key of Object.keys(body)) {
    const name = `${prefix}${key}`;
    if (!route.known.has(key)) {
      if (policy.strict) throw badRequest(`Unrecognized request argument supplied: ${name}`, name, 'unknown_field');
      policy.note(name, 'unrecognized');
      continue;
    }
    const type = route.ignored[key];
    if (type === undefined || !present(body, key)) continue;
    if (!hasFieldType(body[key], type)) throw badRequest(`${name} must be ${type === 'array' || type === 'object' ? 'an' : 'a'} ${type}`, name, 'invalid_type');
    policy.note(name, 'ignored');
  }
}

function checkCommon(body: unknown, route: RouteFields, model: ServedModel, policy: RequestPolicy): Body {
  if (!isObject(body)) throw badRequest('the request body must be a JSON object', null, 'invalid_body');
  checkFields(body, route, policy);
  if (present(body, 'model')) {
    if (typeof body.model !== 'string') throw badRequest('model must be a string', 'model', 'invalid_type');
    if (!servesName(model, body.model)) {
      const names = servedNames(model).map((n) => `'${n}'`).join(', ');
      throw notFound(`The model '${body.model}' does not exist; this server serves ${names} (rapid serve --accept-any-model-name accepts any name)`, 'model_not_found');
    }
  }
  bool(body, 'rapid_budget_close'); // checked on every request, used by constrained ones
  choiceCount(body);
  if (present(body, 'logit_bias') && !isObject(body.logit_bias)) throw badRequest('logit_bias must be an object', 'logit_bias', 'invalid_type');
  return body;
}

/** `n`, checked against REQUEST_LIMITS.maxChoices. */
function choiceCount(body: Body): number {
  const n = int(body, 'n') ?? 1;
  const { maxChoices } = REQUEST_LIMITS;
  if (n < 1 || n > maxChoices) throw badRequest(`n must be an integer in [1, ${maxChoices}] (maxChoices), got ${n}`, 'n', 'invalid_value');
  return n;
}

/** The request with its choice count, when more than one. */
function withChoices(raw: unknown, g: GenerationRequest): GenerationRequest {
  const n = choiceCount(raw as Body); // raw passed checkCommon: an object
  return n > 1 ? { ...g, n } : g;
}

const STREAM_OPTIONS: RouteFields = { known: new Set([...STREAM_OPTIONS_APPLIED, ...Object.keys(STREAM_OPTIONS_IGNORED)]), ignored: STREAM_OPTIONS_IGNORED };

function stream(body: Body, policy: RequestPolicy): { stream: boolean; includeUsage: boolean } {
  const s = bool(body, 'stream') ?? false;
  let includeUsage = false;
  if (present(body, 'stream_options')) {
    const so = body.stream_options;
    if (!isObject(so)) throw badRequest('stream_options must be an object', 'stream_options', 'invalid_type');
    checkFields(so, STREAM_OPTIONS, policy, 'stream_options.');
    const usage = bool(so, 'include_usage') ?? false;
    // OpenAI's SDKs and LangChain send stream_options on unstreamed requests too: it has no effect there.
    if (s) includeUsage = usage;
    else policy.note('stream_options', 'ignored', 'stream is false');
  }
  return { stream: s, includeUsage };
}

function stops(body: Body): string[] | undefined {
  if (!present(body, 'stop')) return undefined;
  const v = body.stop;
  if (typeof v === 'string') return v.length > 0 ? [v] : [];
  if (Array.isArray(v) && v.every((s) => typeof s === 'string')) return (v as string[]).filter((s) => s.length > 0);
  throw badRequest('stop must be a string or an array of strings', 'stop', 'invalid_type');
}

function sampling(body: Body, model: ServedModel, maxTokens: number | undefined, defaultMax: number, logprobs: number): SamplingParams {
  const given: SamplingInput = {
    temperature: num(body, 'temperature'),
    topP: num(body, 'top_p'),
    topK: int(body, 'top_k'), // -1 (vLLM: off) is 0 once resolved
    minP: num(body, 'min_p'),
    presencePenalty: num(body, 'presence_penalty'),
    frequencyPenalty: num(body, 'frequency_penalty'),
    repetitionPenalty: num(body, 'repetition_penalty'),
    seed: int(body, 'seed'),
    maxTokens: maxTokens ?? defaultMax,
    stop: stops(body),
    logprobs,
    logitBias: present(body, 'logit_bias') ? (body.logit_bias as Record<string, number>) : undefined,
  };
  try {
    return resolveSamplingParams(withSamplingDefaults(given, model.defaults), { maxTokens: defaultMax, vocabSize: model.vocabSize });
  } catch (err) {
    if (err instanceof InvalidRequestError) throw badRequest(err.message, err.param ?? null, 'invalid_value');
    throw err;
  }
}

function maxTokensField(body: Body, key: string): number | undefined {
  const v = int(body, key);
  if (v !== undefined && v < 1) throw badRequest(`${key} must be at least 1, got ${v}`, key, 'invalid_value');
  return v;
}

function contentText(content: unknown, where: string, images?: RequestImages): string | ChatContentPart[] | null {
  if (content === null || content === undefined) return null;
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw badRequest(`${where} must be a string or an array of content parts`, where, 'invalid_type');
  return content.map((part, j) => {
    if (!isObject(part) || typeof part.type !== 'string') throw badRequest(`${where}[${j}] must be a content part with a type`, `${where}[${j}]`, 'invalid_type');
    if (part.type === 'text') {
      if (typeof part.text !== 'string') throw badRequest(`${where}[${j}].text must be a string`, `${where}[${j}].text`, 'invalid_type');
      return { type: 'text', text: part.text };
    }
    if (IMAGE_TYPES.has(part.type)) {
      // Loaded by images.ts before validation (which refuses images for a text-only model).
      const image = images?.get(part);
      if (image === undefined) throw badRequest('this model does not accept images', `${where}[${j}]`, 'unsupported');
      return { type: 'image', image };
    }
    throw badRequest(`unsupported content part type "${part.type}"`, `${where}[${j}].type`, 'invalid_value');
  });
}

function messages(body: Body, images?: RequestImages): ChatMessage[] {
  const msgs = body.messages;
  if (!Array.isArray(msgs) || msgs.length === 0) throw badRequest('messages must be a non-empty array', 'messages', 'invalid_type');
  checkCounts(msgs);
  return msgs.map((m, i) => {
    const where = `messages[${i}]`;
    if (!isObject(m)) throw badRequest(`${where} must be an object`, where, 'invalid_type');
    if (typeof m.role !== 'string' || !ROLES.has(m.role)) {
      throw badRequest(`${where}.role must be one of ${[...ROLES].join(', ')}`, `${where}.role`, 'invalid_value');
    }
    const content = contentText(m.content, `${where}.content`, images);
    if (content === null && m.role !== 'assistant') throw badRequest(`${where}.content is required`, `${where}.content`, 'invalid_value');
    const out: ChatMessage = { ...m, role: m.role === 'developer' ? 'system' : m.role, content };
    return out;
  });
}

/** A chat body's messages checked and shaped for the template (text parts only), for /tokenize. */
export function chatMessagesOf(body: Record<string, unknown>): ChatMessage[] {
  return prepareToolMessages(foldFunctionMessages(messages(body)));
}

/** The named count limits (request-limits.ts), checked before anything walks the messages. */
function checkCounts(msgs: unknown[]): void {
  const { maxMessages, maxContentParts } = REQUEST_LIMITS;
  if (msgs.length > maxMessages) {
    throw badRequest(`messages has ${msgs.length} entries; at most ${maxMessages} are accepted (maxMessages)`, 'messages', 'too_many_messages');
  }
  let parts = 0;
  for (const m of msgs) if (isObject(m) && Array.isArray(m.content)) parts += m.content.length;
  if (parts > maxContentParts) {
    throw badRequest(`the messages have ${parts} content parts; at most ${maxContentParts} are accepted (maxContentParts)`, 'messages', 'too_many_content_parts');
  }
}

/** `images`: the request's image parts, loaded by loadRequestImages (images.ts). The prompt is
 * rendered and tokenized by the served model (off the event loop), hence async. */
export async function parseChatRequest(raw: unknown, model: ServedModel, images?: RequestImages, policy: RequestPolicy = SILENT_POLICY): Promise<GenerationRequest> {
  const out: { multimodal?: MultimodalInput } = {};
  const g = withChoices(raw, await parseChat(raw, model, images, out, policy));
  return out.multimodal ? { ...g, multimodal: out.multimodal } : g;
}

async function parseChat(raw: unknown, model: ServedModel, images: RequestImages | undefined, mm: { multimodal?: MultimodalInput }, policy: RequestPolicy): Promise<GenerationRequest> {
  const body = checkCommon(raw, CHAT_ROUTE, model, policy);
  const msgs = prepareToolMessages(foldFunctionMessages(messages(body, images)));
  const legacy = toolsWithFunctions(body);
  // Deprecated functions return one function_call: at most one call.
  const parallelToolCalls = legacy.legacy ? false : body.parallel_tool_calls;
  const parseTools = () => parseToolRequest(legacy.tools, legacy.toolChoice, { parallelToolCalls, formatName: model.toolFormat });
  const tools = legacy.legacy ? inFunctionTerms(parseTools) : parseTools();
  if (tools?.format && present(body, 'response_format') && !(isObject(body.response_format) && body.response_format.type === 'text')) {
    throw badRequest('a forced tool call and response_format cannot be combined', 'response_format', 'invalid_value');
  }
  let templateArgs: Record<string, unknown> | undefined;
  if (present(body, 'chat_template_kwargs')) {
    if (!isObject(body.chat_template_kwargs)) throw badRequest('chat_template_kwargs must be an object', 'chat_template_kwargs', 'invalid_type');
    templateArgs = body.chat_template_kwargs;
  }
  templateArgs = withReasoningEffort(body, model, templateArgs, policy);
  const { stream: s, includeUsage } = stream(body, policy);
  const wantLogprobs = bool(body, 'logprobs') ?? false;
  const top = int(body, 'top_logprobs');
  if (top !== undefined && (top < 0 || top > MAX_TOP)) throw badRequest(`top_logprobs must be an integer in [0, ${MAX_TOP}], got ${top}`, 'top_logprobs', 'invalid_value');
  if (top !== undefined && top > 0 && !wantLogprobs) throw badRequest('top_logprobs requires logprobs to be true', 'top_logprobs');
  const maxTokens = maxTokensField(body, 'max_completion_tokens') ?? maxTokensField(body, 'max_tokens');
  const args = tools ? { ...templateArgs, tools: tools.templateTools } : templateArgs;
  const withImages = images !== undefined && images.size > 0 ? await chatWithImages(model, msgs, args) : undefined;
  const promptIds = withImages?.promptIds ?? (await model.encodeChat(msgs, args));
  mm.multimodal = withImages?.multimodal;
  const defaultMax = Math.max(1, model.contextLength - promptIds.length);
  const params = sampling(body, model, maxTokens, defaultMax, wantLogprobs ? (top ?? 0) : -1);
  if (tools?.format) {
    // The grammar forces the call from the first token: no reasoning, no stop strings.
    return { kind: 'chat', promptIds, params: { ...params, stop: [] }, stream: s, includeUsage, logprobs: params.logprobs, responseFormat: tools.format, tools, budgetClose: budgetClose(body), ...(legacy.legacy ? { legacyFunctions: true } : {}) };
  }
  const reasoning = model.reasoning === true && templateArgs?.enable_thinking !== false;
  const g = withFormat(body, { kind: 'chat', promptIds, params, stream: s, includeUsage, logprobs: params.logprobs, reasoning });
  // tool_choice auto: the model's output is parsed into calls, unless a JSON format constrains it.
  if (!tools?.auto || g.responseFormat) return g;
  return { ...g, tools, keepSpecialTokens: tools.auto.needsSpecialTokens, ...(legacy.legacy ? { legacyFunctions: true } : {}) };
}

/**
 * reasoning_effort on a thinking model is its thinking switch (chat_template_kwargs.enable_thinking,
 * which wins when both are given): "none"/"minimal" turn thinking off, other values on.
 */
function withReasoningEffort(body: Body, model: ServedModel, args: Record<string, unknown> | undefined, policy: RequestPolicy): Record<string, unknown> | undefined {
  if (!present(body, 'reasoning_effort')) return args;
  const effort = body.reasoning_effort;
  if (typeof effort !== 'string') throw badRequest('reasoning_effort must be a string', 'reasoning_effort', 'invalid_type');
  if (model.reasoning !== true) {
    policy.note('reasoning_effort', 'ignored', 'the model has no thinking switch');
    return args;
  }
  if (args?.enable_thinking !== undefined) return args;
  return { ...args, enable_thinking: !REASONING_OFF.has(effort) };
}

/** The prompt of messages with image parts: placeholders expanded, the engine's image data. */
async function chatWithImages(model: ServedModel, msgs: ChatMessage[], args: Record<string, unknown> | undefined) {
  const ordered: LoadedImage[] = [];
  for (const m of msgs) {
    if (!Array.isArray(m.content)) continue;
    for (const p of m.content) if (p.type === 'image') ordered.push(p.image as LoadedImage);
  }
  try {
    return await model.vision!.encodeChat(msgs, ordered, args);
  } catch (err) {
    if (err instanceof InvalidRequestError) throw badRequest(err.message, 'messages', 'invalid_image');
    throw err;
  }
}

export async function parseCompletionRequest(raw: unknown, model: ServedModel, policy: RequestPolicy = SILENT_POLICY): Promise<GenerationRequest> {
  const body = checkCommon(raw, COMPLETION_ROUTE, model, policy);
  if (bool(body, 'echo')) throw badRequest('echo is not supported', 'echo', 'unsupported');
  const bestOf = int(body, 'best_of');
  if (bestOf !== undefined && bestOf !== 1) throw badRequest('only best_of=1 is supported', 'best_of', 'unsupported');
  if (present(body, 'suffix')) throw badRequest('suffix is not supported', 'suffix', 'unsupported');
  const promptIds = await completionPrompt(body.prompt, model);
  const { stream: s, includeUsage } = stream(body, policy);
  const lp = int(body, 'logprobs');
  if (lp !== undefined && (lp < 0 || lp > MAX_TOP)) throw badRequest(`logprobs must be an integer in [0, ${MAX_TOP}], got ${lp}`, 'logprobs', 'invalid_value');
  const maxTokens = maxTokensField(body, 'max_tokens');
  const params = sampling(body, model, maxTokens, 16, lp ?? -1);
  return withChoices(body, withFormat(body, { kind: 'text', promptIds, params, stream: s, includeUsage, logprobs: params.logprobs }));
}

/** response_format on either route. Stop strings are dropped for constrained output: cutting it
 * at a stop string would report an invalid object as a success. */
function withFormat(body: Body, g: GenerationRequest): GenerationRequest {
  if (!present(body, 'response_format')) return g;
  let rf: ResponseFormat | null;
  try {
    rf = parseResponseFormat(body.response_format);
  } catch (err) {
    if (err instanceof InvalidRequestError) throw badRequest(err.message, 'response_format', 'unsupported_schema');
    throw err;
  }
  if (rf === null) return g;
  return { ...g, params: { ...g.params, stop: [] }, responseFormat: rf, budgetClose: budgetClose(body) };
}

/** rapid_budget_close: false lets max_tokens cut constrained output mid-JSON, as other servers do. */
function budgetClose(body: Body): boolean {
  return bool(body, 'rapid_budget_close') ?? true;
}

/** prompt: a string, a token id array, or a one-element list of either (n=1, one prompt). */
async function completionPrompt(prompt: unknown, model: ServedModel): Promise<number[]> {
  if (prompt === undefined || prompt === null) throw badRequest('prompt is required', 'prompt', 'missing_field');
  let p = prompt;
  if (Array.isArray(p) && p.length > 0 && (typeof p[0] === 'string' || Array.isArray(p[0]))) {
    if (p.length !== 1) throw badRequest('only one prompt per request is supported', 'prompt', 'unsupported');
    p = p[0];
  }
  if (typeof p === 'string') {
    if (p.length === 0) throw badRequest('prompt must not be empty', 'prompt', 'invalid_value');
    return model.encodeText(p);
  }
  if (Array.isArray(p)) {
    if (p.length === 0) throw badRequest('prompt must not be empty', 'prompt', 'invalid_value');
    if (p.length >= model.contextLength) {
      throw badRequest(`the prompt is ${p.length} tokens; this model's context is ${model.contextLength} tokens (including at least one generated token). Shorten the prompt.`, 'prompt', 'context_length_exceeded');
    }
    for (const t of p) {
      if (typeof t !== 'number' || !Number.isInteger(t) || t < 0 || t >= model.vocabSize) {
        throw badRequest(`prompt token ids must be integers in [0, ${model.vocabSize}); got ${JSON.stringify(t)}`, 'prompt', 'invalid_value');
      }
    }
    return p as number[];
  }
  throw badRequest('prompt must be a string, an array of token ids, or a list of one of them', 'prompt', 'invalid_type');
}
