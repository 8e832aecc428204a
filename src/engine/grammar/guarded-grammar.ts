// How the grammar service hands out a request's grammar: the xgrammar matcher behind a UTF-8
// guard (always) and budget-aware closing (unless the request opts out).
import { BudgetCloseGrammar } from './budget-close.js';
import type { GrammarTokenizer } from './grammar-service.js';
import type { RequestGrammar, TrialGrammar } from './request-grammar.js';
import { tokenBytesFor } from './token-bytes.js';
import { Utf8Grammar } from './utf8-grammar.js';

export interface RequestGrammarOptions {
  /** Steer to a valid end when max_tokens would cut the output (default true). */
  budgetClose?: boolean;
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
  return new BudgetCloseGrammar(guarded, tables, stop);
}
