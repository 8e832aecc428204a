// Where speculative drafts come from. A source sees only the request's own tokens (prompt + output)
// and proposes what may follow; the engine verifies the proposal in one forward. The n-gram source is
// the first; a draft model would be a second implementation of the same interface.

export interface DraftSource {
  /** The name `--speculative` selects it by. */
  readonly name: string;
  /** At most `k` tokens predicted to follow `tokens` (empty: no guess, the row decodes plainly). */
  propose(tokens: readonly number[], k: number): number[];
}
