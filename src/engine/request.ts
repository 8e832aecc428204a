// One request inside the engine: everything it needs travels with it (tokens, KV block table,
// sampling params with its seed, detokenizer, stop matcher), so nothing is shared between rows.
import type { NativeImageEmbedding, NativeSampleParams, NativeTopLogprob } from '../native/types.js';
import type { TextStream } from './detokenizer.js';
import type { RequestGrammar } from './grammar/request-grammar.js';
import type { ImageSpan, MultimodalInput } from './multimodal.js';
import type { SamplingParams } from './sampling-params.js';
import { StopMatcher } from './stop-matcher.js';

export type RequestStatus = 'waiting' | 'running' | 'finished';
export type EngineFinishReason = 'stop' | 'length' | 'abort';

export interface EngineDelta {
  type: 'delta';
  /** Text completed by this token ('' while a character or a possible stop string is held back). */
  text: string;
  token: number;
  logprob?: number;
  topLogprobs?: NativeTopLogprob[];
}

export interface EngineDone {
  type: 'done';
  finishReason: EngineFinishReason;
  text: string;
  tokenIds: number[];
  /** The stop string that ended the output (finishReason "stop"), or null. */
  stopString: string | null;
  usage: { promptTokens: number; completionTokens: number; totalTokens: number; cachedTokens: number };
  timings: { queueMs: number; ttftMs: number; totalMs: number; decodeTokensPerSecond: number };
  preemptions: number;
  /** A pooling request (SubmitOptions.embed): the prompt's last hidden state after the final norm. */
  embedding?: Float32Array;
}

export type EngineEvent = EngineDelta | EngineDone;

/** A single-consumer async queue of events that ends with done or an error. */
export class EventQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private waiter: (() => void) | null = null;
  private ended = false;
  private error: Error | null = null;

  push(item: T): void {
    if (this.ended) return;
    this.items.push(item);
    this.wake();
  }

  end(error?: Error): void {
    if (this.ended) return;
    this.ended = true;
    this.error = error ?? null;
    this.wake();
  }

  get isEnded(): boolean {
    return this.ended;
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T> {
    for (;;) {
      if (this.items.length > 0) {
        yield this.items.shift() as T;
        continue;
      }
      if (this.ended) {
        if (this.error) throw this.error;
        return;
      }
      await new Promise<void>((resolve) => (this.waiter = resolve));
    }
  }
}

export interface RequestInit {
  id: string;
  promptIds: readonly number[];
  params: SamplingParams;
  /** Generation stops at this many tokens in total (prompt + output). */
  maxTotalTokens: number;
  stopTokenIds: ReadonlySet<number>;
  text: TextStream;
  /** Mixed into the first block hash: prefix-cache entries only match within the same salt. */
  cacheSalt?: string;
  /** Constrains this request's tokens (structured output); freed when the request ends. */
  grammar?: RequestGrammar;
  /** Images (spans checked by checkMultimodal) and mRoPE positions of this request. */
  multimodal?: MultimodalInput;
  imageSpans?: ImageSpan[];
  /** Pooling: the prompt is computed, its last hidden state returned, nothing sampled. */
  embed?: boolean;
}

export class EngineRequest {
  readonly id: string;
  readonly promptIds: readonly number[];
  readonly params: SamplingParams;
  readonly maxTotalTokens: number;
  readonly cacheSalt: string;
  readonly grammar: RequestGrammar | null;
  readonly multimodal: MultimodalInput | null;
  /** Image placeholder spans of the prompt, in order (empty for text-only requests). */
  readonly imageSpans: readonly ImageSpan[];
  /** Pooling request: prefill only; its last row returns the hidden state instead of a token. */
  readonly embed: boolean;
  embedding: Float32Array | null = null;
  /** Embeddings of spans (by index) held while a prefill still has to compute them. */
  readonly imageEmbeddings = new Map<number, NativeImageEmbedding>();
  /** Every known token: prompt, then output. */
  readonly tokens: number[];
  readonly output: number[] = [];
  readonly events = new EventQueue<EngineEvent>();
  status: RequestStatus = 'waiting';
  /** Tokens whose KV is in the blocks of blockTable. */
  numComputed = 0;
  blockTable: number[] = [];
  /** Chained hashes of the full blocks of `tokens` (grows as tokens do). */
  readonly blockHashes: string[] = [];
  /** Leading blocks of blockTable already registered in the prefix cache. */
  numCommittedBlocks = 0;
  /** Prompt tokens served from the prefix cache at first admission. */
  cachedTokens = -1;
  preemptions = 0;
  /** Its last token is being redone after a speculative grammar miss: it samples with the mask. */
  redoWithMask = false;
  text = '';
  readonly arrivalMs = performance.now();
  firstScheduledMs = 0;
  firstTokenMs = 0;
  private readonly detok: TextStream;
  private readonly stops: StopMatcher;
  private readonly stopTokenIds: ReadonlySet<number>;
  private readonly promptArray: Int32Array;

  constructor(init: RequestInit) {
    this.id = init.id;
    this.promptIds = init.promptIds;
    this.params = init.params;
    this.maxTotalTokens = init.maxTotalTokens;
    this.cacheSalt = init.cacheSalt ?? '';
    this.grammar = init.grammar ?? null;
    this.multimodal = init.multimodal ?? null;
    this.imageSpans = init.imageSpans ?? [];
    this.embed = init.embed === true;
    this.tokens = [...init.promptIds];
    this.detok = init.text;
    this.stops = new StopMatcher({ stopStrings: init.params.stop });
    this.stopTokenIds = init.stopTokenIds;
    this.promptArray = Int32Array.from(init.promptIds);
  }

  get numPromptTokens(): number {
    return this.promptIds.length;
  }

  /** Sampling parameters for the token about to be sampled (counter = its index in the output). */
  sampleParams(): NativeSampleParams {
    const p = this.params;
    const penalties = p.repetitionPenalty !== 1 || p.presencePenalty !== 0 || p.frequencyPenalty !== 0;
    return {
      temperature: p.temperature,
      topP: p.topP,
      topK: p.topK,
      minP: p.minP,
      repetitionPenalty: p.repetitionPenalty,
      presencePenalty: p.presencePenalty,
      frequencyPenalty: p.frequencyPenalty,
      seed: p.seed,
      counter: this.output.length,
      logprobs: p.logprobs,
      promptTokens: p.repetitionPenalty !== 1 ? this.promptArray : undefined,
      outputTokens: penalties ? Int32Array.from(this.output) : undefined,
      logitBias: p.logitBias,
    };
  }

  /**
   * Appends a sampled token and runs output processing; emits its delta. Returns the finish reason
   * when this token ends the request. Throws if detokenization throws (the engine fails the request).
   */
  appendToken(token: number, logprob?: number, topLogprobs?: NativeTopLogprob[]): EngineFinishReason | null {
    if (this.output.length === 0) this.firstTokenMs = performance.now();
    this.output.push(token);
    this.tokens.push(token);
    if (this.stopTokenIds.has(token)) {
      this.flushText(token);
      return 'stop';
    }
    const piece = this.stops.push(this.detok.push(token));
    if (piece.text || this.params.logprobs >= 0) this.emit(piece.text, token, logprob, topLogprobs);
    if (piece.stop !== null) return 'stop';
    if (this.output.length >= this.params.maxTokens || this.tokens.length >= this.maxTotalTokens) {
      return this.flushText(token) ? 'stop' : 'length';
    }
    return null;
  }

  private emit(text: string, token: number, logprob?: number, topLogprobs?: NativeTopLogprob[]): void {
    this.text += text;
    const d: EngineDelta = { type: 'delta', text, token };
    if (logprob !== undefined) d.logprob = logprob;
    if (topLogprobs !== undefined) d.topLogprobs = topLogprobs;
    this.events.push(d);
  }

  /** Releases text held back by the detokenizer and the stop matcher; true if a stop string ends it. */
  private flushText(token: number): boolean {
    const tail = this.stops.push(this.detok.flush());
    const rest = tail.stop !== null ? tail.text : tail.text + this.stops.flush();
    if (rest) this.emit(rest, token);
    return tail.stop !== null;
  }

  /** Releases held-back text when the request ends without a new token (its grammar completed). */
  completeText(): void {
    const last = this.output[this.output.length - 1];
    if (last !== undefined) this.flushText(last);
  }

  /** Ends the stream with a done event. */
  finish(reason: EngineFinishReason): void {
    this.grammar?.dispose();
    this.imageEmbeddings.clear();
    if (this.events.isEnded) return;
    const now = performance.now();
    const decodeMs = this.firstTokenMs > 0 ? now - this.firstTokenMs : 0;
    this.events.push({
      type: 'done',
      finishReason: reason,
      text: this.text,
      tokenIds: [...this.output],
      stopString: reason === 'stop' ? this.stops.stopped : null,
      usage: {
        promptTokens: this.promptIds.length,
        completionTokens: this.output.length,
        totalTokens: this.promptIds.length + this.output.length,
        cachedTokens: Math.max(0, this.cachedTokens),
      },
      timings: {
        queueMs: this.firstScheduledMs > 0 ? this.firstScheduledMs - this.arrivalMs : now - this.arrivalMs,
        ttftMs: this.firstTokenMs > 0 ? this.firstTokenMs - this.arrivalMs : 0,
        totalMs: now - this.arrivalMs,
        decodeTokensPerSecond: decodeMs > 0 && this.output.length > 1 ? ((this.output.length - 1) / decodeMs) * 1000 : 0,
      },
      preemptions: this.preemptions,
      ...(this.embedding !== null ? { embedding: this.embedding } : {}),
    });
    this.events.end();
  }

  /** Ends the stream with an error (thrown to the consumer after the deltas it has already seen). */
  fail(error: Error): void {
    this.grammar?.dispose();
    this.imageEmbeddings.clear();
    this.events.end(error);
  }
}
