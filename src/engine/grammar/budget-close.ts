// Budget-aware closing: a request grammar that keeps its output completable within max_tokens.
// The engine says how many tokens are left before each sampled token; this knows the shortest
// closing from the current state (shortest-closing.ts). Near the budget it keeps the model from
// opening new structure (keys, items, nested values) unless that is the closing's own next step;
// once the tokens left reach the closing's length it forces the closing token by token, so the
// JSON parses and validates even when the request ends with finish_reason "length".
import type { GrammarNext, GrammarPick, RequestGrammar } from './request-grammar.js';
import { shortestClosing, type Closing } from './shortest-closing.js';
import type { TokenBytes } from './token-bytes.js';
import type { Utf8Grammar } from './utf8-grammar.js';

/**
 * Force the closing when the tokens left are at most its length plus this: one sampled token can
 * lengthen it a little without opening structure ("-" or "." in a number, a step in a pattern).
 */
export const CLOSE_MARGIN = 2;
/** Within this many tokens of having to close, tokens that open structure off the closing's path are masked. */
export const CLOSE_ZONE = 12;
/**
 * Within this many tokens of having to close, when at most CLOSE_CHECK_FEW allowed tokens are off the
 * closing's path, each is checked to leave a closing that fits (see dropOverlong).
 */
export const CLOSE_CHECK_ZONE = 64;
export const CLOSE_CHECK_FEW = 16;
/** Far from the budget the closing's length is re-measured every this many tokens (it is cheap, not free). */
export const CLOSE_RECHECK_EVERY = 8;

export class BudgetCloseGrammar implements RequestGrammar {
  private left = Number.POSITIVE_INFINITY;
  /** The closing's length when last measured, and how many tokens were accepted since. */
  private lastLength = -1;
  private sinceMeasured = 0;
  /** The closing being forced, and how much of it is emitted; null while the model writes freely. */
  private forcing: Closing | null = null;
  private forcedAt = 0;
  private closed = false;

  constructor(
    private readonly inner: Utf8Grammar,
    private readonly tables: TokenBytes,
    private readonly stopId: number,
  ) {}

  setTokensLeft(n: number): void {
    this.left = n;
    this.inner.setTokensLeft(n);
  }

  closedByBudget(): boolean {
    return this.closed;
  }

  async next(): Promise<GrammarNext> {
    if (this.forcing !== null) return this.forcedNext();
    const n = await this.inner.next();
    if (n.kind !== 'mask' || !this.near()) return n;
    const closing = this.measure();
    if (closing === null) return n;
    if (this.left <= closing.tokens.length + CLOSE_MARGIN) {
      this.forcing = closing;
      this.forcedAt = 0;
      this.closed = true;
      return this.forcedNext();
    }
    const slack = this.left - closing.tokens.length - CLOSE_MARGIN;
    if (slack > CLOSE_CHECK_ZONE) return n;
    // The closing's path: its first token and any token spelling a prefix of it.
    const path = new Int32Array(n.bitmask.length);
    this.tables.markPrefixes(closing.bytes, path);
    const first = closing.tokens[0];
    if (first !== undefined) path[first >> 5]! |= 1 << (first & 31);
    if (slack <= CLOSE_ZONE) {
      // Structure may only open, and a character stay unfinished (up to 3 bytes to go), along the path.
      const opens = this.tables.opens;
      const whole = this.tables.fitFrom[this.inner.utf8State]![0]!;
      for (let w = 0; w < n.bitmask.length; w++) n.bitmask[w]! &= (~(opens[w] ?? 0) & (whole[w] ?? 0)) | path[w]!;
    }
    this.dropOverlong(n.bitmask, path);
    return n;
  }

  /**
   * When only a few tokens off the closing's path are allowed (an enum's values, a key's first
   * letters), each is tried and dropped if the closing after it would not fit in the tokens left:
   * one such token can lengthen the closing by a whole value. (Many allowed tokens are string or
   * number content, which lengthens it by a token or two at most: CLOSE_MARGIN.)
   */
  private dropOverlong(mask: Int32Array, path: Int32Array): void {
    const off: number[] = [];
    for (let w = 0; w < mask.length; w++) {
      let v = mask[w]! & ~path[w]!;
      while (v !== 0) {
        const t = w * 32 + 31 - Math.clz32(v & -v);
        v &= v - 1;
        if (this.tables.byteLength(t) === 0) continue; // a stop: nothing to close after it
        if (off.length === CLOSE_CHECK_FEW) return;
        off.push(t);
      }
    }
    for (const t of off) {
      if (!this.inner.accept(t)) continue;
      const c = shortestClosing(this.inner, this.tables, this.stopId);
      this.inner.rollBack(1);
      if (c === null || c.tokens.length > this.left - 1) mask[t >> 5]! &= ~(1 << (t & 31));
    }
  }

  accept(token: number): boolean {
    if (this.forcing !== null) {
      // The mask allowed only the closing's next token; anything else means the plan no longer holds.
      if (this.forcing.tokens[this.forcedAt] === token) this.forcedAt++;
      else {
        this.forcing = null;
        this.closed = false;
      }
    }
    if (!this.inner.accept(token)) return false;
    this.sinceMeasured++;
    return true;
  }

  speculate(): boolean {
    // Near the budget every token needs this grammar's mask.
    return !this.near() && this.inner.speculate();
  }

  async acceptBest(candidates: readonly number[]): Promise<GrammarPick> {
    const pick = await this.inner.acceptBest(candidates);
    if (pick.kind === 'token') this.sinceMeasured++;
    return pick;
  }

  dispose(): void {
    this.inner.dispose();
  }

  /** The closing's next token as a one-token mask, or complete once it is all emitted. */
  private forcedNext(): GrammarNext {
    const c = this.forcing!;
    const t = c.tokens[this.forcedAt];
    if (t === undefined) return { kind: 'complete' };
    const bitmask = new Int32Array(Math.ceil(this.tables.vocabSize / 32));
    bitmask[t >> 5] = 1 << (t & 31);
    return { kind: 'mask', bitmask };
  }

  /** Whether the budget may be close enough to matter: always true until the closing was measured once. */
  private near(): boolean {
    if (!Number.isFinite(this.left)) return false;
    if (this.lastLength < 0) return true;
    if (!Number.isFinite(this.lastLength)) return this.sinceMeasured >= CLOSE_RECHECK_EVERY; // no closing found: retry now and then
    return this.left <= this.lastLength + CLOSE_MARGIN + CLOSE_CHECK_ZONE + CLOSE_RECHECK_EVERY || this.sinceMeasured >= CLOSE_RECHECK_EVERY;
  }

  private measure(): Closing | null {
    const c = shortestClosing(this.inner, this.tables, this.stopId);
    this.sinceMeasured = 0;
    this.lastLength = c === null ? Number.POSITIVE_INFINITY : c.tokens.length;
    return c;
  }
}
