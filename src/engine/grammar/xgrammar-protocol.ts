// Messages between the grammar host (event loop) and the worker thread that owns xgrammar's wasm
// instance (structured-clone data only). The host sends one batch at a time; the worker runs its
// ops in order and answers the batch as a whole, or says which op trapped.
import type { GrammarNext, GrammarPick } from './request-grammar.js';

/** Sent once per instance: the vocabulary and the tables derived from the tokenizer on the main thread. */
export interface XgInit {
  type: 'init';
  vocab: string[];
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

/** `trap`: a test-only fault (grammar-faults.ts) that makes the op throw a wasm RuntimeError. */
export type XgOp =
  | { op: 'compile'; key: string; schema: string; strict: boolean; trap?: boolean }
  | { op: 'evict'; key: string }
  | { op: 'create'; id: number; key: string; history: number[] }
  | { op: 'next'; id: number; trap?: boolean }
  /** `at`: the token's index in the request's output; one a replay already accepted is skipped. */
  | { op: 'accept'; id: number; token: number; at: number }
  | { op: 'acceptBest'; id: number; candidates: number[] }
  | { op: 'speculate'; id: number }
  | { op: 'dispose'; id: number };

export type XgResult =
  | { ok: true; next?: GrammarNext; pick?: GrammarPick; accepted?: boolean; wide?: boolean }
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
