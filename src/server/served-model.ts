// What the server needs to know about the model it serves: its name, limits, defaults and the
// text side (chat template, tokenizer). Compute goes through the engine only.
import type { MultimodalInput } from '../engine/multimodal.js';
import { samplingDefaults, type RecommendedSampling } from '../models/catalog.js';
import type { ChatMessage } from '../template/chat-template.js';
import { detectToolFormat } from './tool-parsers/registry.js';
import { modelDevice, type DeviceInfo, type ModelDevice } from '../engine/model-device.js';
import type { PromptEncoderPool } from './prompt-encoder-pool.js';
import type { ServedEmbeddings } from './embeddings-request.js';

export type SamplingDefaults = RecommendedSampling;

export interface ServedModel {
  /** The name clients pass as `model` and see in /v1/models; responses carry it (vLLM: the first served name). */
  readonly id: string;
  /** Every name clients may pass as `model`, id first (--served-model-name, repeatable); absent: id only. */
  readonly names?: readonly string[];
  /** --accept-any-model-name: any `model` a request names is served by this one. */
  readonly acceptAnyName?: boolean;
  /** Unix seconds. */
  readonly created: number;
  readonly contextLength: number;
  readonly vocabSize: number;
  /** Sampling defaults for fields a request leaves out (generation_config, else the catalog's). */
  readonly defaults: SamplingDefaults;
  /** Renders messages with the chat template (generation prompt appended) and encodes them; the
   * served model does it on a worker thread (a prompt too long for the context is a 400). */
  encodeChat(messages: ChatMessage[], templateArgs?: Record<string, unknown>, options?: ChatEncodeOptions): number[] | Promise<number[]>;
  /** Encodes raw text as a completion prompt (special tokens as the tokenizer adds them). */
  encodeText(text: string, options?: TextEncodeOptions): number[] | Promise<number[]>;
  /** The text of one token, for logprobs. */
  tokenText(id: number): string;
  /** The text of a token sequence (special tokens kept), for /detokenize; absent: tokenText joined. */
  decode?(ids: readonly number[]): string;
  /** A thinking model (its chat template knows <think>): reasoning goes to reasoning_content. */
  readonly reasoning?: boolean;
  /** How its tool calls are written (tool-parsers/registry.ts); hermes when absent. */
  readonly toolFormat?: string;
  /** Present iff the model takes images (it has a vision tower). */
  readonly vision?: ServedVision;
  /** Where the model runs (CPU or a CUDA device), for /v1/status; absent for stand-ins. */
  readonly device?: ModelDevice;
  /** What the KV cache stores (f32, f16, bf16, int8), for /metrics; absent for stand-ins. */
  readonly kvCacheDtype?: string;
  /** Present iff /v1/embeddings is served (an embedding model, or `rapid serve --embeddings`). */
  readonly embeddings?: ServedEmbeddings;
}

/** /tokenize's options (the served routes use the defaults). */
export interface ChatEncodeOptions {
  /** Append the assistant turn's opening (default true). */
  addGenerationPrompt?: boolean;
}

export interface TextEncodeOptions {
  /** Add the tokenizer's special tokens, e.g. BOS (default true). */
  addSpecialTokens?: boolean;
}

/** The names clients may send for this model, id first. */
export function servedNames(model: ServedModel): readonly string[] {
  return model.names && model.names.length > 0 ? model.names : [model.id];
}

/** Whether a request's `model` names this model (any name does under --accept-any-model-name). */
export function servesName(model: ServedModel, name: string): boolean {
  return model.acceptAnyName === true || servedNames(model).includes(name);
}

/** OpenAI image_url.detail: "low" caps the image's pixel budget (fewer image tokens); auto = high. */
export type ImageDetail = 'auto' | 'low' | 'high';

/** One image of a request, decoded and preprocessed for the model (opaque to the server). */
export interface LoadedImage {
  readonly hash: string;
  readonly tokens: number;
}

export interface ChatWithImages {
  promptIds: number[];
  multimodal: MultimodalInput;
}

/** What the server needs of a vision model: image loading and chat prompts with images. */
export interface ServedVision {
  /** Images one request may carry at most. */
  readonly maxImagesPerRequest: number;
  /** Whether http(s) image URLs are fetched (data: URIs always are; local paths never). */
  readonly allowRemote: boolean;
  /** Fetches (data: or http(s)), decodes and preprocesses one image; InvalidRequestError on bad input. */
  loadImage(url: string, detail: ImageDetail): Promise<LoadedImage>;
  /** The chat prompt with each image part's placeholders expanded, and the engine's image data.
   * `images` are the messages' image parts in order; InvalidRequestError when they do not match. */
  encodeChat(messages: ChatMessage[], images: LoadedImage[], templateArgs?: Record<string, unknown>): ChatWithImages | Promise<ChatWithImages>;
}

/** The parts of a loaded TextModel (src/engine/text-model.ts) this adapter reads. */
export interface TextModelLike {
  info: { contextLength: number; vocabSize: number; family?: string; kvCacheDtype?: string } & Partial<DeviceInfo>;
  defaults: { temperature?: number; topP?: number; topK?: number };
  text: { tokenizer: { decode(ids: readonly number[], options?: { skipSpecialTokens?: boolean }): string; tokenToId?(token: string): number | undefined } };
  encodePrompt(input: { prompt?: string; messages?: ChatMessage[]; raw?: boolean; templateArgs?: Record<string, unknown> }): number[];
  template?: { source: string } | null;
}

/** `prompts`: the worker pool that renders and tokenizes (the server's); without it, in this thread. */
export function servedModelFrom(model: TextModelLike, id: string, recommended: SamplingDefaults = {}, prompts?: PromptEncoderPool): ServedModel {
  return {
    id,
    created: Math.floor(Date.now() / 1000),
    contextLength: model.info.contextLength,
    vocabSize: model.info.vocabSize,
    defaults: samplingDefaults(model.defaults, recommended),
    encodeChat: prompts
      ? async (messages, templateArgs, options) => (await prompts.encodeChat(messages, templateArgs, undefined, options)).promptIds
      : (messages, templateArgs) => model.encodePrompt({ messages, templateArgs }), // in-thread (tests): the defaults only
    encodeText: prompts ? (text, options) => prompts.encodeText(text, options) : (text) => model.encodePrompt({ prompt: text, raw: true }),
    tokenText: (id) => model.text.tokenizer.decode([id], { skipSpecialTokens: false }),
    decode: (ids) => model.text.tokenizer.decode(ids, { skipSpecialTokens: false }),
    reasoning: model.template?.source.includes('<think>') ?? false,
    toolFormat: detectToolFormat(model.template?.source, model.info.family, (t) => model.text.tokenizer.tokenToId?.(t) !== undefined),
    ...(model.info.kvCacheDtype !== undefined ? { kvCacheDtype: model.info.kvCacheDtype } : {}),
    ...(model.info.device !== undefined ? { device: modelDevice({ device: model.info.device, deviceName: model.info.deviceName ?? model.info.device, deviceNote: model.info.deviceNote }) } : {}),
  };
}
