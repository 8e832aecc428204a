// Messages between the prompt encoder pool and its worker threads (structured-clone data only).
import type { ChatMessage } from '../template/chat-template.js';

export interface PromptEncoderInit {
  /** The model directory: the worker loads its tokenizer, chat template and image processor. */
  dir: string;
  contextLength: number;
  /** Whether images are expanded (the model has a vision tower). */
  vision: boolean;
}

export type PromptEncoderReady =
  | { type: 'ready'; ok: true; maxBytesPerToken: number | null; hasTemplate: boolean }
  | { type: 'ready'; ok: false; message: string };

/** What the placeholder expansion reads of an image: its token count and patch grid, no pixels. */
export interface ImageShape {
  tokens: number;
  grid: number[];
}

export type PromptTask =
  | { id: number; kind: 'chat'; messages: ChatMessage[]; templateArgs?: Record<string, unknown>; images?: ImageShape[]; addGenerationPrompt?: boolean }
  | { id: number; kind: 'text'; text: string; addSpecialTokens?: boolean };

/** Where each image landed in the expanded prompt, and the family's positions (VisionPrompt minus pixels). */
export interface ImageLayout {
  offsets: number[];
  spanLengths: (number | undefined)[];
  embedAt: (Int32Array | undefined)[];
  positions?: Int32Array;
  ropeDelta: number;
  bidirectional?: Int32Array;
}

export type PromptErrorKind = 'invalid' | 'template' | 'internal';

export type PromptReply =
  | { type: 'result'; id: number; ok: true; promptIds: Int32Array; layout?: ImageLayout }
  | { type: 'result'; id: number; ok: false; error: { kind: PromptErrorKind; message: string; param?: string; code?: string } };
