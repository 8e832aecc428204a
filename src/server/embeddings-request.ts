// POST /v1/embeddings request parsing: `input` as text, texts, token ids or lists of token ids;
// encoding_format, dimensions, model and user. Every refusal is a 400 naming the field at fault.
import { InvalidRequestError } from '../errors/request-errors.js';
import { badRequest, notFound } from './http-errors.js';
import { servesName, type ServedModel } from './served-model.js';
import { isObject } from '../engine/is-object.js';

/** The bounds of one embeddings request (OpenAI's: 2048 inputs, 300k tokens in all). */
export const EMBEDDING_LIMITS = {
  maxInputs: 2048,
  maxTotalTokens: 300_000,
  /** Inputs of one request in the engine at once: a 2048-input request must not fill its waiting queue. */
  maxInFlight: 16,
} as const;

export type EncodingFormat = 'float' | 'base64';

export interface EmbeddingsRequest {
  /** Token ids of each input, in order (texts encoded by the served model's tokenizer). */
  inputs: number[][];
  encodingFormat: EncodingFormat;
  /** Matryoshka truncation (then renormalised); undefined: the full hidden size. */
  dimensions?: number;
}

/** What the served model offers on /v1/embeddings. */
export interface ServedEmbeddings {
  /** model: an embedding model (Qwen3-Embedding: trained for it, Matryoshka dimensions);
   *  pooled: a generative decoder's last hidden state (rapid serve --embeddings). */
  readonly kind: 'model' | 'pooled';
  /** Width of an embedding: the hidden size. */
  readonly size: number;
}

type Body = Record<string, unknown>;

const isTokenList = (v: unknown): v is number[] => Array.isArray(v) && v.length > 0 && v.every((x) => typeof x === 'number');

/** Parses and checks a body; texts are tokenized here (off the event loop through the served model). */
export async function parseEmbeddingsRequest(body: unknown, model: ServedModel, embeddings: ServedEmbeddings): Promise<EmbeddingsRequest> {
  if (!isObject(body)) throw badRequest('the request body must be a JSON object', null, 'invalid_type');
  if (body.model !== undefined) {
    if (typeof body.model !== 'string') throw badRequest('model must be a string', 'model', 'invalid_type');
    if (!servesName(model, body.model)) throw notFound(`The model '${body.model}' does not exist; this server serves '${model.id}'`, 'model_not_found');
  }
  if (body.user !== undefined && typeof body.user !== 'string') throw badRequest('user must be a string', 'user', 'invalid_type');
  const encodingFormat = body.encoding_format ?? 'float';
  if (encodingFormat !== 'float' && encodingFormat !== 'base64') {
    throw badRequest(`encoding_format must be "float" or "base64", got ${JSON.stringify(encodingFormat)}`, 'encoding_format', 'invalid_value');
  }
  const dimensions = parseDimensions(body.dimensions, embeddings);
  const inputs = await tokenizeInputs(body.input, model);
  let total = 0;
  for (const [i, ids] of inputs.entries()) {
    if (ids.length > model.contextLength) {
      throw badRequest(`input[${i}] is ${ids.length} tokens; this model's context is ${model.contextLength} tokens. Shorten it.`, `input[${i}]`, 'context_length_exceeded');
    }
    total += ids.length;
  }
  if (total > EMBEDDING_LIMITS.maxTotalTokens) {
    throw badRequest(`input has ${total} tokens in all; one request may have at most ${EMBEDDING_LIMITS.maxTotalTokens} (maxTotalTokens): split it`, 'input', 'too_many_tokens');
  }
  return { inputs, encodingFormat, ...(dimensions !== undefined ? { dimensions } : {}) };
}

function parseDimensions(v: unknown, e: ServedEmbeddings): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (e.kind !== 'model') {
    throw badRequest('dimensions: this model does not support specifying dimensions (a decoder\'s pooled hidden states are not Matryoshka-trained); leave it out', 'dimensions', 'unsupported');
  }
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > e.size) {
    throw badRequest(`dimensions must be an integer in [1, ${e.size}] (this model's embedding size), got ${JSON.stringify(v)}`, 'dimensions', 'invalid_value');
  }
  return v;
}

/** The token ids of every input; a string is one text, a list of numbers one tokenized input. */
async function tokenizeInputs(input: unknown, model: ServedModel): Promise<number[][]> {
  if (input === undefined || input === null) throw badRequest('input is required: a string, a list of strings, a list of token ids or a list of such lists', 'input', 'missing_required_parameter');
  if (typeof input === 'string') return [await encodeOne(input, 'input', model)];
  if (!Array.isArray(input)) throw badRequest('input must be a string, a list of strings, a list of token ids or a list of such lists', 'input', 'invalid_type');
  if (input.length === 0) throw badRequest('input must not be empty', 'input', 'invalid_value');
  if (isTokenList(input)) return [checkTokens(input, 'input', model)];
  if (input.length > EMBEDDING_LIMITS.maxInputs) {
    throw badRequest(`input has ${input.length} items; one request may have at most ${EMBEDDING_LIMITS.maxInputs} (maxInputs): split it`, 'input', 'too_many_inputs');
  }
  const out: number[][] = [];
  for (const [i, item] of input.entries()) {
    const where = `input[${i}]`;
    if (typeof item === 'string') out.push(await encodeOne(item, where, model));
    else if (isTokenList(item)) out.push(checkTokens(item, where, model));
    else if (Array.isArray(item) && item.length === 0) throw badRequest(`${where} must not be empty`, where, 'invalid_value');
    else throw badRequest(`${where} must be a string or a list of token ids (all items of input of one kind)`, where, 'invalid_type');
  }
  const kinds = new Set(input.map((x) => typeof x));
  if (kinds.size > 1) throw badRequest('input mixes strings and token lists: give all items as one kind', 'input', 'invalid_type');
  return out;
}

async function encodeOne(text: string, where: string, model: ServedModel): Promise<number[]> {
  if (text.length === 0) throw badRequest(`${where} must not be an empty string`, where, 'invalid_value');
  let ids: number[];
  try {
    ids = await model.encodeText(text);
  } catch (err) {
    // The encoder's own refusals (e.g. longer than the context) name the prompt: here it is this input.
    if (err instanceof InvalidRequestError) throw badRequest(`${where}: ${err.message}`, where, (err as { code?: string }).code ?? 'invalid_value');
    throw err;
  }
  if (ids.length === 0) throw badRequest(`${where} encodes to no tokens`, where, 'invalid_value');
  return ids;
}

function checkTokens(ids: number[], where: string, model: ServedModel): number[] {
  for (const [j, t] of ids.entries()) {
    if (!Number.isInteger(t) || t < 0 || t >= model.vocabSize) {
      throw badRequest(`${where}[${j}] = ${t} is not a token id in [0, ${model.vocabSize})`, `${where}[${j}]`, 'invalid_value');
    }
  }
  return ids;
}
