// Messages between the grammar host (event loop) and the worker thread that owns xgrammar's wasm
// instance (structured-clone data only). The host sends one batch at a time; the worker runs its
// ops in order and answers the batch as a whole, or says which op trapped.
import type { RequestGrammarOptions } from './guarded-grammar.js';
import type { GrammarNext, GrammarPick } from './request-grammar.js';

/**
 * Sent once per instance: the vocabulary and the tables derived from the tokenizer on the main
 * thread. The worker builds the UTF-8 guard's byte tables from `vocab` and `vocabType`.
 */
export interface XgInit {
  type: 'init';
  /** Token strings as xgrammar reads them ('' for special and unknown ids). */
  vocab: string[];
  /** byte_level, byte_fallback or raw: how a token string maps to bytes. */
  vocabType: string;
  vocabSize: number;
  stopIds: number[];
  /** Tokens next() always clears (control characters). */
  banned: Int32Array;
  /** Tokens no mask allows besides stop tokens (acceptBest skips them). */
  never: Int32Array;
  /** The ordinary tokens speculate() probes a state with. */
  probes: Int32Array;
  /** One Int32: the index of the op the worker is running (read by the host on a timeout). */
  progress: SharedArrayBuffer;
}

/**
 * `trap`: a test-only fault (grammar-faults.ts) that makes the op throw a wasm RuntimeError.
 * `left`: the tokens the request may still emit (budget closing), set before the op runs.
 */
export type XgOp =
  | { op: 'compile'; key: string; schema: string; strict: boolean; trap?: boolean }
  | { op: 'evict'; key: string }
  /** `history` is accepted through the whole chain (a replay), then `left` is set. */
  | { op: 'create'; id: number; key: string; options: RequestGrammarOptions; history: number[]; left?: number }
  | { op: 'next'; id: number; left?: number; trap?: boolean }
  /** `at`: the token's index in the request's output; one a replay already accepted is skipped. */
  | { op: 'accept'; id: number; token: number; at: number; left?: number }
  | { op: 'acceptBest'; id: number; candidates: number[]; left?: number }
  | { op: 'speculate'; id: number; left?: number }
  | { op: 'dispose'; id: number };

/**
 * `closed`: budget closing forced the output's end (every op on a matcher says it); `shortest`: a
 * create's shortest valid output in tokens, when budget closing checks it against max_tokens.
 */
export type XgResult =
  | { ok: true; next?: GrammarNext; pick?: GrammarPick; accepted?: boolean; wide?: boolean; closed?: boolean; shortest?: number | null }
  | { ok: false; error: string };

export interface XgBatch {
  type: 'batch';
  seq: number;
  ops: XgOp[];
}

export type XgReply =
  | { type: 'ready' }
  /** The instance could not start. */
  | { type: 'fatal'; message: string }
  /** `memoryBytes`: the wasm instance's memory after the batch. */
  | { type: 'done'; seq: number; results: XgResult[]; memoryBytes: number }
  /** The instance trapped at op `index` (results of the ops before it included); it is unusable now. */
  | { type: 'trap'; seq: number; index: number; message: string; results: XgResult[] };
