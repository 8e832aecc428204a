// What the engine needs from a request's grammar, whatever implements it: the mask of the next
// token, acceptance of the sampled one, and release. Keyed by request: it lives on EngineRequest.

/** The grammar's verdict before a token is sampled. */
export type GrammarNext =
  | { kind: 'mask'; bitmask: Int32Array } // ceil(vocab/32) words, bit i of word i>>5 = token i allowed
  | { kind: 'complete' } // the output is complete: only end-of-sequence could follow
  | { kind: 'dead' }; // no token can continue the output: it can never complete

export interface RequestGrammar {
  next(): Promise<GrammarNext>;
  /** False when the grammar rejects the token (the request must fail). */
  accept(token: number): boolean;
  /** Frees the matcher; idempotent. */
  dispose(): void;
}

/** Thrown when a constrained request can no longer produce valid output. */
export class GrammarDeadEndError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'GrammarDeadEndError';
  }
}
