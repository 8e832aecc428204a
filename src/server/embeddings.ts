// POST /v1/embeddings once the body is parsed: each input is its own prefill-only engine request
// (batched with everything else in flight, its KV freed when it ends), its last token's hidden state
// L2-normalised (last-token pooling, as Qwen3-Embedding is trained), truncated to `dimensions` and
// renormalised, answered as OpenAI does (float lists, or base64 of little-endian float32).
import type { ServerResponse } from 'node:http';
import type { EngineLike, RequestHandle } from '../engine/engine.js';
import { HttpError, badRequest } from './http-errors.js';
import { EMBEDDING_LIMITS, type EmbeddingsRequest } from './embeddings-request.js';
import { InvalidRequestError, EngineUnavailableError } from '../errors/request-errors.js';
import { resolveSamplingParams } from '../engine/sampling-params.js';
import type { ServedModel } from './served-model.js';

export interface EmbeddingObject {
  object: 'embedding';
  index: number;
  embedding: number[] | string;
}

export interface EmbeddingsResponse {
  object: 'list';
  data: EmbeddingObject[];
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
}

// Pooling requests sample nothing; the engine still takes a full parameter set.
const POOLING_PARAMS = resolveSamplingParams({ temperature: 0, seed: 0 }, { maxTokens: 1 });

/** 400 for a generation route on an embedding model: it has no LM head. */
export function embeddingModelRefusal(model: ServedModel, path: string): HttpError | null {
  if (model.embeddings?.kind !== 'model') return null;
  return badRequest(`${model.id} is an embedding model (no language-model head): it serves POST /v1/embeddings, not ${path}`, 'model', 'embedding_model');
}

/** 404 for /v1/embeddings on a server that does not serve it, saying how to turn it on. */
export function embeddingsDisabled(model: ServedModel): HttpError {
  return new HttpError(
    404,
    `${model.id} is a generative model and this server does not serve embeddings: start it with \`rapid serve --embeddings\` (pooled hidden states of this model), or serve an embedding model such as qwen3-embedding-0.6b`,
    'invalid_request_error',
    null,
    'embeddings_disabled',
  );
}

/** L2-normalised first `dims` values of a hidden state (Matryoshka: truncate, then normalise). */
export function poolVector(hidden: Float32Array, dims: number): Float32Array {
  const v = hidden.slice(0, dims);
  let s = 0;
  for (const x of v) s += x * x;
  const n = Math.sqrt(s);
  if (n > 0) for (let i = 0; i < v.length; i++) v[i] = v[i]! / n;
  return v;
}

/** Little-endian float32 bytes in base64: what OpenAI sends for encoding_format "base64". */
export function base64Floats(v: Float32Array): string {
  const b = Buffer.alloc(v.length * 4);
  for (let i = 0; i < v.length; i++) b.writeFloatLE(v[i]!, i * 4);
  return b.toString('base64');
}

/** Runs every input through the engine (at most maxInFlight at once) and answers with one JSON object. */
export async function handleEmbeddings(
  engine: EngineLike,
  model: ServedModel,
  size: number,
  res: ServerResponse,
  r: EmbeddingsRequest,
  sendJson: (res: ServerResponse, status: number, body: unknown) => void,
): Promise<void> {
  const dims = r.dimensions ?? size;
  const handles = new Set<RequestHandle>();
  let gone = false;
  const onClose = () => {
    if (res.writableFinished) return;
    gone = true; // the client went away: its inputs stop taking engine time
    for (const h of handles) h.abort();
  };
  res.once('close', onClose);
  const data: EmbeddingObject[] = new Array<EmbeddingObject>(r.inputs.length);
  let next = 0;
  // A full waiting queue refuses an input while this request has others in the engine: it waits for
  // one of them to end instead (a request is not failed by its own inputs).
  let freed: () => void = () => undefined;
  let slot = new Promise<void>((resolve) => (freed = resolve));
  const ended = () => {
    freed();
    slot = new Promise<void>((resolve) => (freed = resolve));
  };
  const worker = async (): Promise<void> => {
    while (next < r.inputs.length && !gone) {
      const i = next++;
      for (;;) {
        try {
          data[i] = { object: 'embedding', index: i, embedding: await embedOne(engine, r, i, dims, handles, ended) };
          break;
        } catch (err) {
          if (!(err instanceof EngineUnavailableError && err.reason === 'overloaded' && handles.size > 0)) throw err;
          await slot; // resolved only when one of this request's inputs leaves the engine
        }
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(EMBEDDING_LIMITS.maxInFlight, r.inputs.length) }, worker));
  } catch (err) {
    gone = true; // one input failed: the others stop too, and no new one starts
    for (const h of handles) h.abort();
    throw err;
  } finally {
    res.off('close', onClose);
  }
  if (gone) return;
  const tokens = r.inputs.reduce((n, ids) => n + ids.length, 0);
  const body: EmbeddingsResponse = { object: 'list', data, model: model.id, usage: { prompt_tokens: tokens, total_tokens: tokens } };
  sendJson(res, 200, body);
}

async function embedOne(
  engine: EngineLike,
  r: EmbeddingsRequest,
  i: number,
  dims: number,
  handles: Set<RequestHandle>,
  ended: () => void,
): Promise<number[] | string> {
  let h: RequestHandle;
  try {
    h = engine.submit({ promptIds: r.inputs[i]!, params: POOLING_PARAMS, embed: true });
  } catch (err) {
    // The engine's refusal of this prompt (beyond the KV pool, ...) is about this input.
    if (err instanceof InvalidRequestError) throw badRequest(`input[${i}]: ${err.message}`, `input[${i}]`);
    throw err;
  }
  handles.add(h);
  try {
    for await (const ev of h.events) {
      if (ev.type !== 'done') continue;
      if (ev.embedding === undefined) throw new HttpError(500, `input[${i}]: the engine returned no embedding (${ev.finishReason})`, 'server_error', null, 'no_embedding');
      const v = poolVector(ev.embedding, dims);
      return r.encodingFormat === 'base64' ? base64Floats(v) : Array.from(v);
    }
    throw new HttpError(500, `input[${i}]: the request ended without a result`, 'server_error', null, 'no_embedding');
  } finally {
    handles.delete(h);
    ended();
  }
}
