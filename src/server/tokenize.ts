// POST /tokenize and /detokenize in vLLM's shapes: a prompt or chat messages to the token ids the
// served model would see ({tokens, count, max_model_len}), and token ids back to text ({prompt}).
import { isObject } from '../engine/is-object.js';
import { badRequest, notFound } from './http-errors.js';
import { servedNames, servesName, type ServedModel } from './served-model.js';
import { chatMessagesOf } from './validate.js';

export interface TokenizeResponse {
  tokens: number[];
  count: number;
  max_model_len: number;
  /** Each token's text, when return_token_strs is true (vLLM's field). */
  token_strs?: string[];
}

const TOKENIZE_FIELDS = new Set(['model', 'prompt', 'messages', 'add_special_tokens', 'add_generation_prompt', 'chat_template_kwargs', 'return_token_strs']);
const DETOKENIZE_FIELDS = new Set(['model', 'tokens']);

function checkBody(raw: unknown, fields: ReadonlySet<string>, model: ServedModel): Record<string, unknown> {
  if (!isObject(raw)) throw badRequest('the request body must be a JSON object', null, 'invalid_body');
  for (const key of Object.keys(raw)) if (!fields.has(key)) throw badRequest(`Unrecognized request argument supplied: ${key}`, key, 'unknown_field');
  const name = raw.model;
  if (name !== undefined && name !== null) {
    if (typeof name !== 'string') throw badRequest('model must be a string', 'model', 'invalid_type');
    if (!servesName(model, name)) throw notFound(`The model '${name}' does not exist; this server serves ${servedNames(model).map((n) => `'${n}'`).join(', ')}`, 'model_not_found');
  }
  return raw;
}

function optionalBool(body: Record<string, unknown>, key: string): boolean | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw badRequest(`${key} must be a boolean`, key, 'invalid_type');
  return v;
}

export async function tokenize(raw: unknown, model: ServedModel): Promise<TokenizeResponse> {
  const body = checkBody(raw, TOKENIZE_FIELDS, model);
  const hasPrompt = body.prompt !== undefined && body.prompt !== null;
  const hasMessages = body.messages !== undefined && body.messages !== null;
  if (hasPrompt === hasMessages) throw badRequest('send either prompt or messages', hasPrompt ? 'messages' : 'prompt', 'invalid_value');
  const addSpecialTokens = optionalBool(body, 'add_special_tokens');
  const addGenerationPrompt = optionalBool(body, 'add_generation_prompt');
  const strs = optionalBool(body, 'return_token_strs') ?? false;
  let tokens: number[];
  if (hasPrompt) {
    if (typeof body.prompt !== 'string') throw badRequest('prompt must be a string', 'prompt', 'invalid_type');
    if (addGenerationPrompt !== undefined) throw badRequest('add_generation_prompt applies to messages only', 'add_generation_prompt', 'invalid_value');
    tokens = [...(await model.encodeText(body.prompt, { addSpecialTokens: addSpecialTokens ?? true }))];
  } else {
    // The chat prompt as /v1/chat/completions encodes it (the template writes its own special tokens).
    const args = body.chat_template_kwargs;
    if (args !== undefined && args !== null && !isObject(args)) throw badRequest('chat_template_kwargs must be an object', 'chat_template_kwargs', 'invalid_type');
    if (addSpecialTokens === true) throw badRequest('add_special_tokens applies to prompt only: the chat template writes the special tokens of messages', 'add_special_tokens', 'invalid_value');
    const msgs = chatMessagesOf(body);
    tokens = [...(await model.encodeChat(msgs, isObject(args) ? args : undefined, { addGenerationPrompt: addGenerationPrompt ?? true }))];
  }
  return { tokens, count: tokens.length, max_model_len: model.contextLength, ...(strs ? { token_strs: tokens.map((t) => model.tokenText(t)) } : {}) };
}

export function detokenize(raw: unknown, model: ServedModel): { prompt: string } {
  const body = checkBody(raw, DETOKENIZE_FIELDS, model);
  const ids = body.tokens;
  if (!Array.isArray(ids)) throw badRequest('tokens must be an array of token ids', 'tokens', 'invalid_type');
  ids.forEach((t, i) => {
    if (typeof t !== 'number' || !Number.isInteger(t) || t < 0 || t >= model.vocabSize) {
      throw badRequest(`tokens[${i}] must be a token id, an integer in [0, ${model.vocabSize}); got ${JSON.stringify(t)}`, `tokens[${i}]`, 'invalid_value');
    }
  });
  const tokens = ids as number[];
  return { prompt: model.decode ? model.decode(tokens) : tokens.map((t) => model.tokenText(t)).join('') };
}
