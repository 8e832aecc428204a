// Drives one sequence through the native step contract: chunked prefill, then decode until a stop
// token, a stop string, max_tokens or the context limit. The continuous-batching scheduler replaces
// this loop for the server; `rapid run` and the fixture tests use it directly.
import { pollWhile } from '../native/poll-while.js';
import type { NativeModel, NativeSampleParams, NativeStepRow, NativeTopLogprob } from '../native/types.js';
import { EngineRequestError, grammarDeadEnd } from './engine-errors.js';
import { InvalidRequestError, StepError } from './errors.js';
import type { RequestGrammar } from './grammar/request-grammar.js';
import type { KvBlockAllocator } from './kv-blocks.js';
import { rowPositions } from './multimodal.js';
import type { SamplingParams } from './sampling-params.js';
import type { DraftPolicy } from './speculative/speculator.js';

export type FinishReason = 'stop' | 'length';

export interface TextStream {
  /** Text completed by this token (may be empty while a UTF-8 character is incomplete). */
  push(token: number): string;
  /** Whatever is still held back at the end. */
  flush(): string;
}

/** Stop strings over streamed text (StopMatcher): emits what is safe, truncates before a stop string. */
export interface StopFilter {
  push(text: string): { text: string; stop: string | null };
  flush(): string;
}

export interface GenerateDelta {
  type: 'delta';
  text: string;
  token: number;
  logprob?: number;
  topLogprobs?: NativeTopLogprob[];
}

export interface GenerateDone {
  type: 'done';
  text: string;
  finishReason: FinishReason;
  tokenIds: number[];
  usage: { promptTokens: number; completionTokens: number; totalTokens: number };
  timings: { prefillMs: number; decodeMs: number; prefillTokensPerSecond: number; decodeTokensPerSecond: number };
}

export type GenerateEvent = GenerateDelta | GenerateDone;

export interface GenerateOptions {
  model: NativeModel;
  blocks: KvBlockAllocator;
  contextLength: number;
  /** The model takes [3, n] positions (mRoPE): text positions go on all three axes. */
  mrope?: boolean;
  promptIds: number[];
  params: SamplingParams;
  stopTokenIds: ReadonlySet<number>;
  text: TextStream;
  stops: StopFilter;
  prefillChunk?: number;
  requestId?: string;
  signal?: AbortSignal;
  /** Structured output: each sampled token is masked by this grammar; freed at the end. */
  grammar?: RequestGrammar;
  /** Keep the event loop polling while a step runs (pollWhile; the engine's pollSteps): for CUDA models. */
  pollSteps?: boolean;
  /** Speculative decoding: drafts verified in the decode step (never with a grammar or logprobs). */
  drafts?: DraftPolicy;
}

let nextId = 0;

export async function* generate(opts: GenerateOptions): AsyncGenerator<GenerateEvent> {
  const { model, blocks, params, promptIds } = opts;
  if (promptIds.length === 0) throw new InvalidRequestError('prompt is empty', 'prompt');
  if (promptIds.length >= opts.contextLength) {
    throw new InvalidRequestError(
      `prompt is ${promptIds.length} tokens; this model's context is ${opts.contextLength} tokens. Shorten the prompt.`,
      'prompt',
    );
  }
  const requestId = opts.requestId ?? `gen-${++nextId}`;
  const chunk = Math.max(1, opts.prefillChunk ?? 512);
  const maxTotal = Math.min(opts.contextLength, promptIds.length + params.maxTokens);
  const table: number[] = [];
  const output: number[] = [];
  const prompt = Int32Array.from(promptIds);
  let text = '';
  let finishReason: FinishReason = 'length';
  let prefillMs = 0;
  let decodeMs = 0;
  let stoppedByString = false;

  const sample = (): NativeSampleParams => ({
    temperature: params.temperature,
    topP: params.topP,
    topK: params.topK,
    minP: params.minP,
    repetitionPenalty: params.repetitionPenalty,
    presencePenalty: params.presencePenalty,
    frequencyPenalty: params.frequencyPenalty,
    seed: params.seed,
    counter: output.length,
    logprobs: params.logprobs,
    promptTokens: params.repetitionPenalty !== 1 ? prompt : undefined,
    outputTokens: Int32Array.from(output),
    logitBias: params.logitBias,
  });

  // A complete constrained output ends with "stop", or "length" when budget closing had to end it (as the engine).
  const closedReason = (): FinishReason => (opts.grammar?.closedByBudget?.() === true ? 'length' : 'stop');
  const poll = opts.pollSteps === true;
  const step = async (tokens: Int32Array, contextLen: number, withSample: boolean, draft = 0) => {
    if (opts.signal?.aborted) throw opts.signal.reason ?? new Error('aborted');
    if (!blocks.ensure(table, contextLen + tokens.length)) {
      throw new StepError(`KV cache is full (${blocks.numBlocks} blocks of ${blocks.blockSize}); raise the KV cache budget`);
    }
    const positions = rowPositions(contextLen, tokens.length, opts.mrope === true, promptIds.length, null);
    const row: NativeStepRow = { requestId, tokens, positions, blockTable: Int32Array.from(table), contextLen };
    if (draft > 0) row.draft = draft;
    if (withSample) {
      row.sample = sample();
      if (opts.grammar) {
        // Budget-aware closing: the tokens this request may still emit, this one included.
        opts.grammar.setTokensLeft?.(maxTotal - promptIds.length - output.length);
        const next = await opts.grammar.next();
        if (next.kind === 'complete') return null; // the output is complete: no token to sample
        if (next.kind === 'dead') throw grammarDeadEnd();
        row.sample.bitmask = next.bitmask;
      }
    }
    const res = await (poll ? pollWhile(model.step({ rows: [row] })) : model.step({ rows: [row] }));
    const r = res.rows.find((x) => x.requestId === requestId);
    if (!r) throw new StepError(`step returned no result for ${requestId}`);
    if (r.error) throw new StepError(r.error);
    return r;
  };

  try {
    let t0 = performance.now();
    let last = await (async () => {
      let r = null;
      for (let start = 0; start < prompt.length; start += chunk) {
        const end = Math.min(prompt.length, start + chunk);
        r = await step(prompt.subarray(start, end), start, end === prompt.length);
      }
      return r;
    })();
    prefillMs = performance.now() - t0;
    t0 = performance.now();
    const drafts = opts.grammar === undefined && params.logprobs < 0 ? opts.drafts : undefined;
    let draft: number[] = []; // the draft `last` verified
    decode: for (;;) {
      if (last === null) {
        finishReason = closedReason();
        break;
      }
      if (last.token === undefined) throw new StepError('sampler returned no token');
      const kept = draft.length > 0 ? (last.accepted ?? 0) : 0;
      if (draft.length > 0) drafts!.record(draft.length, kept);
      // The kept draft tokens, then the token sampled after them: each goes through output processing.
      for (const token of [...draft.slice(0, kept), last.token]) {
        if (opts.grammar && !opts.grammar.accept(token)) throw new EngineRequestError(`the grammar rejected token ${token}`, 'grammar_failed');
        output.push(token);
        if (opts.stopTokenIds.has(token)) {
          finishReason = 'stop';
          break decode;
        }
        const piece = opts.stops.push(opts.text.push(token));
        if (piece.text || params.logprobs >= 0) {
          text += piece.text;
          yield { type: 'delta', text: piece.text, token, logprob: last.logprob, topLogprobs: last.topLogprobs };
        }
        if (piece.stop !== null) {
          finishReason = 'stop';
          stoppedByString = true;
          break decode;
        }
        if (promptIds.length + output.length >= maxTotal) {
          if (opts.grammar && (await opts.grammar.next()).kind === 'complete') finishReason = closedReason();
          break decode;
        }
      }
      const contextLen = promptIds.length + output.length - 1;
      // Every kept draft token plus the one after it must fit maxTotal.
      draft = drafts?.next([...promptIds, ...output], maxTotal - contextLen - 2) ?? [];
      last = await step(Int32Array.from([output[output.length - 1]!, ...draft]), contextLen, true, draft.length);
    }
    decodeMs = performance.now() - t0;
    if (!stoppedByString) {
      const tail = opts.stops.push(opts.text.flush());
      const rest = tail.stop !== null ? tail.text : tail.text + opts.stops.flush();
      if (tail.stop !== null) finishReason = 'stop';
      if (rest) {
        text += rest;
        yield { type: 'delta', text: rest, token: output[output.length - 1] };
      }
    }
  } finally {
    blocks.release(table);
    opts.grammar?.dispose();
  }
  yield {
    type: 'done',
    text,
    finishReason,
    tokenIds: output,
    usage: { promptTokens: promptIds.length, completionTokens: output.length, totalTokens: promptIds.length + output.length },
    timings: {
      prefillMs,
      decodeMs,
      prefillTokensPerSecond: prefillMs > 0 ? (promptIds.length / prefillMs) * 1000 : 0,
      decodeTokensPerSecond: decodeMs > 0 && output.length > 1 ? ((output.length - 1) / decodeMs) * 1000 : 0,
    },
  };
}
