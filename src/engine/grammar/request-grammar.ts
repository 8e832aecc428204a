// What the engine needs from a request's grammar, whatever implements it: the mask of the next
// token, acceptance of the sampled one, and release. Keyed by request: it lives on EngineRequest.

/** The grammar's verdict before a token is sampled. */
export type GrammarNext =
  | { kind: 'mask'; bitmask: Int32Array } // ceil(vocab/32) words, bit i of word i>>5 = token i allowed
  | { kind: 'complete' } // the output is complete: only end-of-sequence could follow
  | { kind: 'dead' }; // no token can continue the output: it can never complete

/** The grammar's verdict on a greedy row sampled without its mask (see RequestGrammar.acceptBest). */
export type GrammarPick =
  | { kind: 'token'; token: number } // the best allowed candidate, already accepted: the masked argmax
  | { kind: 'complete' } // as next() would have said: only end-of-sequence could follow
  | { kind: 'dead' } // as next() would have said: no token can continue
  | { kind: 'miss' }; // no candidate is allowed; the state is unchanged and the token must be redone with a mask

export interface RequestGrammar {
  next(): Promise<GrammarNext>;
  /** False when the grammar rejects the token (the request must fail). */
  accept(token: number): boolean;
  /** Frees the matcher; idempotent. */
  dispose(): void;
  /**
   * Exact speculation for greedy rows (optional): true when the next state looks wide enough that
   * the model's top unmasked candidates probably include an allowed token, so the engine may skip
   * the mask this step and call acceptBest. (After a miss the engine redoes the token with the mask
   * without asking.) A promise when the matcher lives in another thread (the engine awaits all
   * rows' together).
   */
  speculate?(): boolean | Promise<boolean>;
  /**
   * Takes the first allowed token of `candidates` (the sampler's ranking of the unmasked logits, best
   * first, ties lower id first): every better-ranked token is disallowed, so it is the masked argmax.
   */
  acceptBest?(candidates: readonly number[]): Promise<GrammarPick>;
  /** Budget-aware closing (optional): how many tokens the request may still emit, this one included. */
  setTokensLeft?(n: number): void;
  /** True once budget-aware closing forced the output's end: the request finishes with "length". */
  closedByBudget?(): boolean;
}

/**
 * A grammar that can try tokens and take them back, synchronously: what the UTF-8 guard and budget
 * closing build on. Only the grammar worker has one (it owns the matcher).
 */
export interface TrialGrammar extends RequestGrammar {
  speculate(): boolean;
  acceptBest(candidates: readonly number[]): Promise<GrammarPick>;
  /** Undoes the last n accepted tokens. */
  rollBack(n: number): void;
  /** The text every continuation starts with ('' when several paths are open). */
  forcedText(): string;
}

/** Thrown when a constrained request can no longer produce valid output. */
export class GrammarDeadEndError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'GrammarDeadEndError';
  }
}
