// What `rapid chat` talks to: a model loaded in-process or an OpenAI-compatible server. The UI sees
// only this interface, so both behave the same: streamed deltas, one done, abort by signal.

export interface ChatTurn {
  role: 'system' | 'user' | 'assistant';
  content: string;
  /** Image files sent with this (user) turn, in order. */
  images?: string[];
}

export interface ReplyOptions {
  signal: AbortSignal;
  maxTokens: number;
  temperature?: number;
  /** A JSON Schema the reply must follow (structured output). */
  schema?: Record<string, unknown>;
}

export interface ReplyDone {
  type: 'done';
  /** stop, length, or abort when the signal fired. */
  finishReason: string;
  promptTokens: number;
  completionTokens: number;
  tokensPerSecond: number;
}

export type ReplyEvent = { type: 'delta'; text: string } | ReplyDone;

export interface ChatBackend {
  /** The model's name, for the status line. */
  readonly model: string;
  /** Context length in tokens; null when the server does not say. */
  readonly contextLength: number | null;
  /** false: the model has no vision tower; null: unknown (a server). */
  readonly acceptsImages: boolean | null;
  /** Streams one reply to the conversation; throws with a message fit for the user. */
  reply(turns: readonly ChatTurn[], o: ReplyOptions): AsyncIterable<ReplyEvent>;
  close(): Promise<void>;
}
