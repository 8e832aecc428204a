// How the grammar worker wraps each request's matcher: a UTF-8 guard (always) and budget-aware
// closing (unless the request opts out), both over the synchronous matcher they try tokens on.
import { BudgetCloseGrammar } from './budget-close.js';
import { shortestClosing } from './shortest-closing.js';
import type { GrammarPick, RequestGrammar, TrialGrammar } from './request-grammar.js';
import type { TokenBytes } from './token-bytes.js';
import { Utf8Grammar } from './utf8-grammar.js';

export interface RequestGrammarOptions {
  /** Steer to a valid end when max_tokens would cut the output (default true). */
  budgetClose?: boolean;
  /** The request's max_tokens: with budget closing, refused (400) when no valid output fits in it. */
  maxTokens?: number;
}

/** The wrapped matcher the worker's ops go through. */
export interface GuardedGrammar extends RequestGrammar {
  speculate(): boolean;
  acceptBest(candidates: readonly number[]): Promise<GrammarPick>;
  setTokensLeft(n: number): void;
}

/**
 * Wraps `matcher`; `shortest` is the length in tokens of the shortest valid output from its state,
 * measured only when budget closing has a max_tokens to check it against (null otherwise).
 */
export function guardRequestGrammar(
  matcher: TrialGrammar,
  tables: TokenBytes,
  stopIds: readonly number[],
  options: RequestGrammarOptions = {},
): { grammar: GuardedGrammar; shortest: number | null } {
  const guarded = new Utf8Grammar(matcher, tables, stopIds);
  const stop = stopIds[0];
  if (options.budgetClose === false || stop === undefined) return { grammar: guarded, shortest: null };
  const shortest = options.maxTokens === undefined ? null : (shortestClosing(guarded, tables, stop)?.tokens.length ?? 0);
  return { grammar: new BudgetCloseGrammar(guarded, tables, stop), shortest };
}

/** The 400 for a max_tokens below the shortest valid output (budget closing could not fit one). */
export function maxTokensTooLowMessage(maxTokens: number, shortest: number): string {
  return `max_tokens is ${maxTokens}, but the shortest output this schema allows takes ${shortest} tokens: raise max_tokens to at least ${shortest} (or turn budget closing off to get the cut output: "rapid_budget_close": false in a request, --no-budget-close for rapid run)`;
}
