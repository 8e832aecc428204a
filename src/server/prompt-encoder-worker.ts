// Worker-thread side of the prompt encoder pool: owns the served model's tokenizer, chat template and
// image placeholder expansion, and turns one request's messages (or raw text) into token ids. The
// context length is checked by UTF-8 bytes before tokenizing, then by tokens.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parentPort, workerData } from 'node:worker_threads';

import { InvalidRequestError } from '../errors/request-errors.js';
import { ChatTemplate, ChatTemplateError, encodeChatPrompt, selectChatTemplate, type ChatMessage } from '../template/chat-template.js';
import { loadTokenizerDir, type TokenizerBundle } from '../tokenizer/load-tokenizer.js';
import { maxBytesPerToken } from '../tokenizer/max-token-bytes.js';
import type { TokenizerJson } from '../tokenizer/tokenizer-json.js';
import type { PreparedImage } from '../vision/prepare-image.js';
import type { VisionProcessor } from '../vision/processor.js';
import type { ImageLayout, ImageShape, PromptEncoderInit, PromptEncoderReady, PromptReply, PromptTask } from './prompt-encoder-protocol.js';

const port = parentPort;
if (port === null) throw new Error('prompt-encoder-worker.js must run as a worker thread');
const init = workerData as PromptEncoderInit;

interface Loaded {
  text: TokenizerBundle;
  template: ChatTemplate | null;
  vision: VisionProcessor | null;
  maxBytes: number | null; // UTF-8 bytes that contextLength tokens can hold at most
  bytesPerToken: number | null;
}

async function load(): Promise<Loaded> {
  const text = loadTokenizerDir(init.dir);
  const picked = selectChatTemplate(text.chatTemplates);
  const template = picked ? new ChatTemplate(picked.source, picked.name) : null;
  // Imported only for vision models: it loads the image decoder (sharp) too.
  const vision = init.vision ? (await import('../vision/processor.js')).VisionProcessor.load(init.dir, text) : null;
  const json = JSON.parse(readFileSync(join(init.dir, 'tokenizer.json'), 'utf8')) as TokenizerJson;
  const bytesPerToken = maxBytesPerToken(json);
  return { text, template, vision, bytesPerToken, maxBytes: bytesPerToken === null ? null : bytesPerToken * init.contextLength };
}

/** An InvalidRequestError with the error code the client sees. */
class CodedError extends InvalidRequestError {
  constructor(message: string, param: string, readonly code: string) {
    super(message, param);
  }
}

function tooLong(what: string, param: string): InvalidRequestError {
  return new CodedError(`${what}; this model's context is ${init.contextLength} tokens (including at least one generated token). Shorten the prompt.`, param, 'context_length_exceeded');
}

/** The byte check first: a text no context could hold is refused before it is tokenized. */
function checkBytes(m: Loaded, text: string, param: string): void {
  if (m.maxBytes === null || text.length * 3 <= m.maxBytes) return; // UTF-8 takes at most 3 bytes per UTF-16 unit
  const bytes = Buffer.byteLength(text);
  if (bytes > m.maxBytes) {
    throw tooLong(`the prompt is ${bytes} bytes of UTF-8, more than ${init.contextLength} tokens can hold (a token of this tokenizer covers at most ${m.bytesPerToken} bytes)`, param);
  }
}

function checkTokens(ids: readonly number[], param: string): void {
  if (ids.length >= init.contextLength) throw tooLong(`the prompt is ${ids.length} tokens`, param);
}

function encode(m: Loaded, task: PromptTask): { ids: number[]; layout?: ImageLayout } {
  if (task.kind === 'text') {
    checkBytes(m, task.text, 'prompt');
    const ids = m.text.tokenizer.encode(task.text, { addSpecialTokens: task.addSpecialTokens ?? true });
    checkTokens(ids, 'prompt');
    return { ids };
  }
  if (m.template === null) throw new InvalidRequestError('this model has no chat template: send a raw prompt to /v1/completions instead', 'messages');
  const rendered = m.template.render({ messages: task.messages, addGenerationPrompt: task.addGenerationPrompt ?? true, specialTokens: m.text.specialTokens, extra: task.templateArgs });
  checkBytes(m, rendered, 'messages');
  if (task.images === undefined || task.images.length === 0) {
    const ids = encodeChatPrompt(m.text.tokenizer, rendered, m.text.bosToken);
    checkTokens(ids, 'messages');
    return { ids };
  }
  if (m.vision === null) throw new InvalidRequestError('this model does not accept images (it has no vision tower)', 'messages');
  let vp;
  try {
    vp = m.vision.buildPrompt(rendered, task.images.map(shapeAsImage));
  } catch (err) {
    if (err instanceof InvalidRequestError) throw new CodedError(err.message, 'messages', 'invalid_image');
    throw err;
  }
  checkTokens(vp.promptIds, 'messages');
  const layout: ImageLayout = {
    offsets: vp.images.map((im) => im.offset),
    spanLengths: vp.images.map((im) => im.spanLength),
    embedAt: vp.images.map((im) => im.embedAt),
    ropeDelta: vp.ropeDelta,
    ...(vp.positions !== undefined ? { positions: vp.positions } : {}),
    ...(vp.bidirectional !== undefined ? { bidirectional: vp.bidirectional } : {}),
  };
  return { ids: vp.promptIds, layout };
}

/** buildPrompt reads only an image's token count and grid; the pixels stay on the main thread. */
function shapeAsImage(s: ImageShape): PreparedImage {
  return { hash: '', tokens: s.tokens, input: { pixels: new Float32Array(0), grid: s.grid } } as unknown as PreparedImage;
}

function errorReply(id: number, err: unknown): PromptReply {
  const message = err instanceof Error ? err.message : String(err);
  if (err instanceof InvalidRequestError) {
    const code = err instanceof CodedError ? err.code : undefined;
    return { type: 'result', id, ok: false, error: { kind: 'invalid', message, param: err.param, code } };
  }
  if (err instanceof ChatTemplateError) return { type: 'result', id, ok: false, error: { kind: 'template', message } };
  // Deep recursion in a template (or a stack overflow anywhere) is the request's doing, not ours.
  if (err instanceof RangeError) return { type: 'result', id, ok: false, error: { kind: 'template', message: `rendering the prompt failed: ${message}` } };
  return { type: 'result', id, ok: false, error: { kind: 'internal', message } };
}

let model: Loaded;
try {
  model = await load();
  const ready: PromptEncoderReady = { type: 'ready', ok: true, maxBytesPerToken: model.bytesPerToken, hasTemplate: model.template !== null };
  port.postMessage(ready);
} catch (err) {
  const ready: PromptEncoderReady = { type: 'ready', ok: false, message: err instanceof Error ? err.message : String(err) };
  port.postMessage(ready);
  throw err;
}

port.on('message', (task: PromptTask) => {
  let reply: PromptReply;
  try {
    const { ids, layout } = encode(model, task);
    const promptIds = Int32Array.from(ids);
    reply = { type: 'result', id: task.id, ok: true, promptIds, ...(layout !== undefined ? { layout } : {}) };
    port.postMessage(reply, [promptIds.buffer as ArrayBuffer]);
    return;
  } catch (err) {
    reply = errorReply(task.id, err);
  }
  port.postMessage(reply);
});
