// How the grammar service hands out a request's grammar: the xgrammar matcher behind a UTF-8
// guard (always) and budget-aware closing (unless the request opts out).
import { InvalidRequestError } from '../errors.js';
import { BudgetCloseGrammar } from './budget-close.js';
import { shortestClosing } from './shortest-closing.js';
import type { GrammarTokenizer } from './grammar-service.js';
import type { RequestGrammar, TrialGrammar } from './request-grammar.js';
import { tokenBytesFor } from './token-bytes.js';
import { Utf8Grammar } from './utf8-grammar.js';

export interface RequestGrammarOptions {
  /** Steer to a valid end when max_tokens would cut the output (default true). */
  budgetClose?: boolean;
  /** The request's max_tokens: with budget closing, refused (400) when no valid output fits in it. */
  maxTokens?: number;
}

export function guardRequestGrammar(
  matcher: TrialGrammar,
  tokenizer: GrammarTokenizer,
  vocabSize: number,
  stopIds: readonly number[],
  options: RequestGrammarOptions = {},
): RequestGrammar {
  const tables = tokenBytesFor(tokenizer, vocabSize);
  const guarded = new Utf8Grammar(matcher, tables, stopIds);
  const stop = stopIds[0];
  if (options.budgetClose === false || stop === undefined) return guarded;
  if (options.maxTokens !== undefined) {
    const least = shortestClosing(guarded, tables, stop)?.tokens.length ?? 0;
    if (least > options.maxTokens) {
      guarded.dispose();
      throw new InvalidRequestError(
        `max_tokens is ${options.maxTokens}, but the shortest output this schema allows takes ${least} tokens: raise max_tokens to at least ${least} (or set rapid_budget_close to false to get the cut output)`,
        'max_tokens',
      );
    }
  }
  return new BudgetCloseGrammar(guarded, tables, stop);
}
