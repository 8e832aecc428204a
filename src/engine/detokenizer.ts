// Streaming detokenization: token ids in one at a time, text deltas out, such that the deltas
// concatenate to exactly tokenizer.decode(all ids) and never end inside a UTF-8 character.

import { isByteFallbackToken } from '../tokenizer/decoders.js';

/** The part of the tokenizer the detokenizer relies on. */
/** Token ids in, text out: what a request streams its output through (a StreamingDetokenizer, or a test's stand-in). */
export interface TextStream {
  /** Text completed by this token (may be empty while a UTF-8 character is incomplete). */
  push(token: number): string;
  /** Whatever is still held back at the end. */
  flush(): string;
}

export interface DecodingTokenizer {
  decode(ids: readonly number[], options?: { skipSpecialTokens?: boolean }): string;
  idToToken(id: number): string | undefined;
  tokenToId(token: string): number | undefined;
  isSpecialId(id: number): boolean;
  readonly decoderTypes: ReadonlySet<string>;
  readonly vocabSize: number;
}

export interface DetokenizerOptions {
  skipSpecialTokens?: boolean;
}

const ANCHOR_CANDIDATES = ['a', '\u2581a', '\u0120a', 'the', 'x', 'e', '\u2581the', '0', '1', '.'];

/**
 * Finds a token that decodes to clean, non-empty text and can stand in front of any continuation:
 * decoding [anchor, ...rest] and removing the anchor's own text yields the text `rest` adds when
 * it follows earlier tokens (so per-sequence rules such as Metaspace's first-token strip are
 * applied once, to the anchor).
 */
export function findAnchorToken(tok: DecodingTokenizer): number | null {
  const ok = (id: number | undefined): id is number => {
    if (id === undefined || tok.isSpecialId(id)) return false;
    const token = tok.idToToken(id);
    if (token === undefined || isByteFallbackToken(token)) return false;
    const one = tok.decode([id]);
    if (one.length === 0 || one.includes('\uFFFD')) return false;
    const two = tok.decode([id, id]);
    return two.startsWith(one) && two.length > one.length;
  };
  for (const c of ANCHOR_CANDIDATES) {
    const id = tok.tokenToId(c);
    if (ok(id)) return id;
  }
  const limit = Math.min(tok.vocabSize, 5000);
  for (let id = 0; id < limit; id++) {
    const token = tok.idToToken(id);
    if (token !== undefined && /^[\p{L}\p{N}]+$/u.test(token) && ok(id)) return id;
  }
  return null;
}

const anchorCache = new WeakMap<DecodingTokenizer, number | null>();

function cachedAnchor(tok: DecodingTokenizer): number | null {
  if (!anchorCache.has(tok)) anchorCache.set(tok, findAnchorToken(tok));
  return anchorCache.get(tok) ?? null;
}

export class StreamingDetokenizer implements TextStream {
  private readonly skipSpecial: boolean;
  private readonly byteFallback: boolean;
  /** null: no usable anchor, so every step re-decodes all ids (quadratic but exact). */
  private anchor: number | null;
  private readonly anchorText: string;
  /** Ids after the last committed boundary. */
  private pending: number[] = [];
  /** Every id so far (for the no-anchor fallback). */
  private readonly all: number[] = [];
  /** Whether a token that decodes to something (not skipped, known id) has been committed. */
  private started = false;
  private emitted = '';

  constructor(private readonly tokenizer: DecodingTokenizer, options: DetokenizerOptions = {}) {
    this.skipSpecial = options.skipSpecialTokens ?? false;
    this.byteFallback = tokenizer.decoderTypes.has('ByteFallback');
    this.anchor = cachedAnchor(tokenizer);
    this.anchorText = this.anchor === null ? '' : tokenizer.decode([this.anchor]);
  }

  /** Adds one token; returns the text that is now final (possibly ''). */
  push(id: number): string {
    this.pending.push(id);
    this.all.push(id);
    // A byte-fallback run decodes as a whole (invalid runs become one U+FFFD per byte), so it
    // can only be released once a visible non-byte token closes it (skipped tokens do not).
    if (this.byteFallback && this.endsInByteRun(this.pending)) return '';
    const text = this.decodePending();
    // An incomplete UTF-8 sequence decodes to a trailing U+FFFD: wait for its remaining bytes.
    if (text.endsWith('\uFFFD')) return '';
    return this.commit(text);
  }

  /** Releases whatever is held back (incomplete bytes become U+FFFD, as in decode). */
  flush(): string {
    if (this.pending.length === 0) return '';
    return this.commit(this.decodePending());
  }

  /** Total text emitted so far. */
  get text(): string {
    return this.emitted;
  }

  /** Whether the last visible token of `ids` is a byte-fallback token. */
  private endsInByteRun(ids: readonly number[]): boolean {
    for (let i = ids.length - 1; i >= 0; i--) {
      const id = ids[i]!;
      if (!this.isVisible(id)) continue;
      return isByteFallbackToken(this.tokenizer.idToToken(id)!);
    }
    return false;
  }

  private isVisible(id: number): boolean {
    return this.tokenizer.idToToken(id) !== undefined && !(this.skipSpecial && this.tokenizer.isSpecialId(id));
  }

  /** Text the pending ids add after what was already emitted. */
  private decodePending(): string {
    const opts = { skipSpecialTokens: this.skipSpecial };
    if (this.anchor !== null) {
      if (!this.started) return this.tokenizer.decode(this.pending, opts);
      const full = this.tokenizer.decode([this.anchor, ...this.pending], opts);
      if (full.startsWith(this.anchorText)) return full.slice(this.anchorText.length);
      // The decoder is not prefix-stable around the anchor (e.g. BPEDecoder suffixes).
      this.anchor = null;
    }
    const full = this.tokenizer.decode(this.all, opts);
    return full.startsWith(this.emitted) ? full.slice(this.emitted.length) : '';
  }

  private commit(text: string): string {
    if (!this.started && this.pending.some((id) => this.isVisible(id))) this.started = true;
    this.pending = [];
    this.emitted += text;
    return text;
  }
}
