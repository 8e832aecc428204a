// A text model loaded in-process for an Engine (text-engine.ts): the native model, its tokenizer, chat
// template, stop ids and generation defaults, loaded from one local directory.
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { loadNative, resolveDevice } from '../native/binding.js';
import type { NativeLoadOptions, NativeModel, NativeModelInfo } from '../native/types.js';
import { loadTokenizerDir, type TokenizerBundle } from '../tokenizer/load-tokenizer.js';
import { ChatTemplate, encodeChatPrompt, selectChatTemplate, type ChatMessage } from '../template/chat-template.js';
import { VisionProcessor } from '../vision/index.js';
import { validateCheckpoint } from '../models/validate-checkpoint.js';
import { NgramDraftSource } from './speculative/ngram-source.js';
import { defaultSpeculative, DraftPolicy, type SpeculativeMode } from './speculative/speculator.js';

export interface GenerationDefaults {
  temperature?: number;
  topP?: number;
  topK?: number;
}

export interface PromptInput {
  prompt?: string;
  system?: string;
  messages?: ChatMessage[];
  /** Send `prompt` as is, without the chat template. */
  raw?: boolean;
  /** Extra chat template variables, e.g. enable_thinking. */
  templateArgs?: Record<string, unknown>;
}

export interface TextModel {
  dir: string;
  native: NativeModel;
  info: NativeModelInfo;
  text: TokenizerBundle;
  template: ChatTemplate | null;
  defaults: GenerationDefaults;
  /** Image preprocessing and prompt expansion; present iff the checkpoint loaded with a vision tower. */
  vision: VisionProcessor | null;
  /** The chat template's output for `input` (before tokenization); throws without a template. */
  renderPrompt(input: PromptInput): string;
  encodePrompt(input: PromptInput): number[];
  close(): void;
}

function readJson(path: string): Record<string, unknown> | null {
  if (!existsSync(path)) return null;
  return JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
}

function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

/** Throws a message that says what is wrong with `dir` as a model directory. */
export function checkModelDir(dir: string): string {
  const abs = resolve(dir);
  if (!existsSync(abs)) throw new Error(`model directory not found: ${dir}`);
  if (!statSync(abs).isDirectory()) throw new Error(`not a directory: ${dir} (give the folder that holds config.json)`);
  if (!existsSync(join(abs, 'config.json'))) throw new Error(`no config.json in ${dir}: is this a model directory?`);
  if (!existsSync(join(abs, 'tokenizer.json'))) throw new Error(`no tokenizer.json in ${dir}: rapid needs the Hugging Face tokenizer file`);
  return abs;
}

/** A model's text side without its weights: what a process that never runs the model (the HTTP side of
 * `rapid serve --engine-process child`) needs to render, tokenize and preprocess images. */
export type TextSide = Omit<TextModel, 'native' | 'info' | 'close' | 'vision'>;

export function openTextSide(dir: string): TextSide {
  const abs = checkModelDir(dir);
  // Config and tensor headers are checked here, so native code never sees a checkpoint that disagrees with itself.
  validateCheckpoint(abs);
  const text = loadTokenizerDir(abs);
  const picked = selectChatTemplate(text.chatTemplates);
  const template = picked ? new ChatTemplate(picked.source, picked.name) : null;
  const gen = readJson(join(abs, 'generation_config.json')) ?? {};
  const defaults: GenerationDefaults = {
    // transformers samples only when do_sample is true: a config with do_sample false means greedy.
    temperature: gen.do_sample === false ? 0 : num(gen.temperature),
    topP: num(gen.top_p),
    topK: num(gen.top_k),
  };
  const renderPrompt = (input: PromptInput): string => {
    if (!template) {
      throw new Error(`${dir} has no chat template: pass --raw to send the prompt as is`);
    }
    const messages: ChatMessage[] = input.messages ?? [
      ...(input.system !== undefined ? [{ role: 'system', content: input.system }] : []),
      { role: 'user', content: input.prompt ?? '' },
    ];
    return template.render({
      messages,
      addGenerationPrompt: true,
      specialTokens: text.specialTokens,
      extra: input.templateArgs,
    });
  };

  const encodePrompt = (input: PromptInput): number[] => {
    if (input.raw) return text.tokenizer.encode(input.prompt ?? '', { addSpecialTokens: true });
    return encodeChatPrompt(text.tokenizer, renderPrompt(input), text.bosToken);
  };
  return { dir: abs, text, template, defaults, renderPrompt, encodePrompt };
}

export function openTextModel(dir: string, options: NativeLoadOptions = {}): TextModel {
  const side = openTextSide(dir);
  const { dir: abs, text } = side;
  // --device (else RAPID_DEVICE) picks the binary variant on the first load and the device here.
  const device = resolveDevice(options.device);
  const native = loadNative({ device }).addon.loadModel(abs, { ...options, device });
  const info = native.info();
  const vision = info.vision !== undefined ? VisionProcessor.load(abs, text) : null;

  return {
    ...side,
    native,
    info,
    vision,
    close: () => native.close(),
  };
}
