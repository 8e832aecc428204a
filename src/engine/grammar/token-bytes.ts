// The bytes each token of a vocabulary stands for, as xgrammar and the detokenizer read them
// (byte-level BPE alphabet, <0xNN> byte fallback, or plain text), and what follows from them: from
// which UTF-8 decoder states a token keeps the output well-formed, which tokens open structure, and
// a trie to spell a string in tokens. Built once per vocabulary and shared by every request.
import { CHAR_TO_BYTE } from '../../tokenizer/byte-level-alphabet.js';
import type { GrammarTokenizer } from './grammar-service.js';

/**
 * UTF-8 decoder states: 0 is a character boundary; the others wait for continuation bytes, keyed by
 * how many are missing and the range the next one must fall in (RFC 3629: no overlongs, no
 * surrogates, nothing past U+10FFFF). xgrammar checks only the count, not these ranges.
 */
export const UTF8_BOUNDARY = 0;
const NEXT_RANGE: readonly (readonly [lo: number, hi: number, then: number])[] = [
  [0, 0, 0], // 0: boundary (no continuation expected)
  [0x80, 0xbf, 0], // 1: one byte missing
  [0x80, 0xbf, 1], // 2: two missing
  [0xa0, 0xbf, 1], // 3: two missing after E0 (no overlong)
  [0x80, 0x9f, 1], // 4: two missing after ED (no surrogate)
  [0x80, 0xbf, 2], // 5: three missing after F1-F3
  [0x90, 0xbf, 2], // 6: three missing after F0 (no overlong)
  [0x80, 0x8f, 2], // 7: three missing after F4 (at most U+10FFFF)
];
const UTF8_STATES = NEXT_RANGE.length;
/** MISSING[s]: how many bytes the character under way still needs in state s. */
export const MISSING: readonly number[] = [0, 1, 2, 2, 2, 3, 3, 3];

/** The decoder state after byte b, or -1 when b makes the text ill-formed. */
export function utf8Step(state: number, b: number): number {
  if (state !== UTF8_BOUNDARY) {
    const [lo, hi, then] = NEXT_RANGE[state]!;
    return b >= lo && b <= hi ? then : -1;
  }
  if (b < 0x80) return 0;
  if (b >= 0xc2 && b <= 0xdf) return 1;
  if (b === 0xe0) return 3;
  if (b === 0xed) return 4;
  if (b >= 0xe1 && b <= 0xef) return 2;
  if (b === 0xf0) return 6;
  if (b >= 0xf1 && b <= 0xf3) return 5;
  if (b === 0xf4) return 7;
  return -1; // a continuation byte without a lead, C0/C1 (overlong) or F5-FF
}

/** Bytes that open JSON structure: a token holding one may lengthen the shortest completion. */
const OPENERS = new Set([0x22, 0x2c, 0x3a, 0x5b, 0x7b]); // " , : [ {

interface TrieNode {
  token: number; // -1: no token ends here
  next: Map<number, TrieNode>;
}

export class TokenBytes {
  /** bytes[t]: the bytes of token t (empty for special, unknown and out-of-tokenizer ids). */
  readonly bytes: readonly Uint8Array[];
  /** validFrom[s]: bitmask of the tokens that leave well-formed UTF-8 when they follow state s. */
  readonly validFrom: readonly Int32Array[];
  /**
   * fitFrom[s][k] (k < 3): the tokens of validFrom[s] that leave at most k bytes of a character
   * missing; fitFrom[s][0] are those that end at a character boundary.
   */
  readonly fitFrom: readonly (readonly Int32Array[])[];
  /** Tokens holding a byte that opens structure (see OPENERS). */
  readonly opens: Int32Array;
  /** byteToken[b]: a token that is exactly byte b (a plain one when there is one), -1 if none. */
  readonly byteToken: Int32Array;
  private trie: TrieNode | null = null;

  constructor(
    tok: GrammarTokenizer,
    readonly vocabSize: number,
  ) {
    const words = Math.ceil(vocabSize / 32);
    const decode = tokenDecoder(tok);
    const bytes: Uint8Array[] = new Array<Uint8Array>(vocabSize);
    this.validFrom = Array.from({ length: UTF8_STATES }, () => new Int32Array(words));
    this.fitFrom = Array.from({ length: UTF8_STATES }, () => Array.from({ length: 3 }, () => new Int32Array(words)));
    this.opens = new Int32Array(words);
    this.byteToken = new Int32Array(256).fill(-1);
    const n = Math.min(tok.vocabSize, vocabSize);
    for (let t = 0; t < vocabSize; t++) {
      const s = t < n && !tok.isSpecialId(t) ? tok.idToToken(t) : undefined;
      const b = s === undefined ? EMPTY : decode(s);
      bytes[t] = b;
      const bit = 1 << (t & 31);
      for (let state = 0; state < UTF8_STATES; state++) {
        // A token without bytes (stop, special) may only come at a character boundary.
        const end = b.length === 0 ? (state === UTF8_BOUNDARY ? UTF8_BOUNDARY : -1) : endState(state, b);
        if (end >= 0) this.validFrom[state]![t >> 5]! |= bit;
        if (end >= 0) for (let k = MISSING[end]!; k < 3; k++) this.fitFrom[state]![k]![t >> 5]! |= bit;
      }
      if (b.some((x) => OPENERS.has(x))) this.opens[t >> 5]! |= bit;
      if (b.length === 1 && (this.byteToken[b[0]!] === -1 || !/^<0x[0-9A-Fa-f]{2}>$/.test(s!))) this.byteToken[b[0]!] = t;
    }
    this.bytes = bytes;
  }

  /** The decoder state after token t from `state`, or -1 when t makes the text ill-formed. */
  after(state: number, t: number): number {
    const b = this.bytes[t];
    return b === undefined ? -1 : endState(state, b);
  }

  /**
   * Spells `text` in tokens, longest match first (fewest tokens, as BPE merges tend to). Returns
   * null when some byte has no token.
   */
  spell(text: Uint8Array): number[] | null {
    const out: number[] = [];
    let i = 0;
    while (i < text.length) {
      let node = this.getTrie();
      let best = -1;
      let bestEnd = i;
      for (let j = i; j < text.length; j++) {
        const nx = node.next.get(text[j]!);
        if (nx === undefined) break;
        node = nx;
        if (node.token >= 0) {
          best = node.token;
          bestEnd = j + 1;
        }
      }
      if (best < 0) return null;
      out.push(best);
      i = bestEnd;
    }
    return out;
  }

  /** Sets in `mask` every token whose bytes are a prefix of `text`. */
  markPrefixes(text: Uint8Array, mask: Int32Array): void {
    let node = this.getTrie();
    for (const b of text) {
      const nx = node.next.get(b);
      if (nx === undefined) return;
      node = nx;
      if (node.token >= 0) mask[node.token >> 5]! |= 1 << (node.token & 31);
    }
  }

  private getTrie(): TrieNode {
    if (this.trie !== null) return this.trie;
    const root: TrieNode = { token: -1, next: new Map() };
    this.bytes.forEach((b, t) => {
      if (b.length === 0) return;
      let node = root;
      for (const x of b) {
        let nx = node.next.get(x);
        if (nx === undefined) node.next.set(x, (nx = { token: -1, next: new Map() }));
        node = nx;
      }
      if (node.token < 0) node.token = t; // the first (lowest) id of equal strings
    });
    // A single byte is spelled by its plain token (byteToken), not its <0xNN> twin.
    for (let x = 0; x < 256; x++) {
      const t = this.byteToken[x]!;
      const nx = root.next.get(x);
      if (t >= 0 && nx !== undefined) nx.token = t;
    }
    this.trie = root;
    return root;
  }
}

const EMPTY = new Uint8Array(0);
const utf8 = new TextEncoder();

function endState(state: number, b: Uint8Array): number {
  let s = state;
  for (let i = 0; i < b.length && s >= 0; i++) s = utf8Step(s, b[i]!);
  return s;
}

/** How a token string maps to bytes under the tokenizer's decoder (as xgrammar's vocab type says). */
function tokenDecoder(tok: GrammarTokenizer): (s: string) => Uint8Array {
  if (tok.decoderTypes.has('ByteLevel')) {
    return (s) => {
      const out = new Uint8Array(s.length);
      let i = 0;
      for (const ch of s) {
        const b = CHAR_TO_BYTE.get(ch);
        if (b === undefined) return utf8.encode(s); // an added token: kept as text
        out[i++] = b;
      }
      return out.subarray(0, i);
    };
  }
  if (tok.decoderTypes.has('ByteFallback')) {
    return (s) => {
      const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(s);
      return m ? Uint8Array.of(parseInt(m[1]!, 16)) : utf8.encode(s.replace(/\u2581/g, ' '));
    };
  }
  return (s) => utf8.encode(s);
}

const cache = new WeakMap<GrammarTokenizer, Map<number, TokenBytes>>();

/** The tables of a vocabulary, built on first use and kept for the tokenizer's lifetime. */
export function tokenBytesFor(tok: GrammarTokenizer, vocabSize: number): TokenBytes {
  let byWidth = cache.get(tok);
  if (byWidth === undefined) cache.set(tok, (byWidth = new Map()));
  let t = byWidth.get(vocabSize);
  if (t === undefined) byWidth.set(vocabSize, (t = new TokenBytes(tok, vocabSize)));
  return t;
}
