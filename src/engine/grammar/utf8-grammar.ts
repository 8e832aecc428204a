// Constrained text is valid text: a request grammar that also forbids every token that would leave
// the output ill-formed UTF-8. xgrammar counts continuation bytes but not their ranges, so byte
// tokens could spell overlongs, surrogates or code points past U+10FFFF (each decoded as U+FFFD,
// which breaks maxLength), and a stop could come mid-character. With this guard every string's
// length in code points is the length the grammar counted. Told the tokens left, it also starts no
// character that max_tokens would cut (each later token can bring one byte at least).
import type { GrammarNext, GrammarPick, TrialGrammar } from './request-grammar.js';
import { UTF8_BOUNDARY, type TokenBytes } from './token-bytes.js';

export class Utf8Grammar implements TrialGrammar {
  /** The UTF-8 decoder state after the accepted tokens. */
  private state = UTF8_BOUNDARY;
  /** The state before each accepted token, for rollBack. */
  private readonly before: number[] = [];
  private readonly stopWords: Map<number, number>;
  private left = Number.POSITIVE_INFINITY;

  constructor(
    private readonly inner: TrialGrammar,
    private readonly tables: TokenBytes,
    stopIds: readonly number[],
  ) {
    this.stopWords = new Map();
    for (const t of stopIds) this.stopWords.set(t >> 5, (this.stopWords.get(t >> 5) ?? 0) | (1 << (t & 31)));
  }

  /** True at a character boundary. */
  get atBoundary(): boolean {
    return this.state === UTF8_BOUNDARY;
  }

  /** The UTF-8 decoder state (see token-bytes.ts). */
  get utf8State(): number {
    return this.state;
  }

  setTokensLeft(n: number): void {
    this.left = n;
  }

  async next(): Promise<GrammarNext> {
    const n = await this.inner.next();
    // Only a stop could follow: impossible mid-character (xgrammar closes no string there).
    if (n.kind === 'complete') return this.state === UTF8_BOUNDARY ? n : { kind: 'dead' };
    if (n.kind !== 'mask') return n;
    // With k tokens after this one, at most k bytes may stay missing (a continuation byte token always fits).
    const after = this.left - 1;
    const valid = after < 3 ? this.tables.fitFrom[this.state]![Math.max(0, after)]! : this.tables.validFrom[this.state]!;
    const mask = n.bitmask;
    let any = false;
    let nonStop = false;
    for (let w = 0; w < mask.length; w++) {
      const v = (mask[w]! &= valid[w] ?? 0);
      if (v === 0) continue;
      any = true;
      if ((v & ~(this.stopWords.get(w) ?? 0)) !== 0) nonStop = true;
    }
    if (!any) return { kind: 'dead' };
    if (!nonStop) return { kind: 'complete' };
    return n;
  }

  accept(token: number): boolean {
    const after = this.tables.after(this.state, token);
    if (after < 0 || !this.inner.accept(token)) return false;
    this.before.push(this.state);
    this.state = after;
    return true;
  }

  rollBack(n: number): void {
    if (n <= 0) return;
    this.inner.rollBack(n);
    this.state = this.before[this.before.length - n]!;
    this.before.length -= n;
  }

  forcedText(): string {
    return this.inner.forcedText();
  }

  speculate(): boolean {
    // Mid-character only continuation bytes fit: a narrow state, and the mask says which; near
    // max_tokens the mask also keeps characters whole.
    return this.state === UTF8_BOUNDARY && this.left > 3 && this.inner.speculate();
  }

  async acceptBest(candidates: readonly number[]): Promise<GrammarPick> {
    const valid = this.tables.validFrom[this.state]!;
    const pick = await this.inner.acceptBest(candidates.filter((t) => (((valid[t >> 5] ?? 0) >>> (t & 31)) & 1) === 1));
    if (pick.kind === 'token') {
      this.before.push(this.state);
      this.state = this.tables.after(this.state, pick.token);
    }
    return pick;
  }

  dispose(): void {
    this.inner.dispose();
  }
}
