// The bytes each token of a vocabulary stands for, as xgrammar and the detokenizer read them
// (byte-level BPE alphabet, <0xNN> byte fallback, or plain text), and what follows from them: from
// which UTF-8 decoder states a token keeps the output well-formed, which tokens open structure, and
// an index to spell a string in tokens. Built once per grammar worker instance from the vocabulary
// it is sent (xgrammar's own view of it) and shared by every request there.
import { CHAR_TO_BYTE } from '../../tokenizer/byte-level-alphabet.js';

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

export class TokenBytes {
  /** Token t's bytes are data[offsets[t]..offsets[t+1]) (none for special, unknown and out-of-tokenizer ids). */
  private readonly data: Uint8Array;
  private readonly offsets: Int32Array;
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
  private index: { byBytes: Map<string, number>; longest: number } | null = null;

  /**
   * `vocab[t]`: token t's string as xgrammar gets it ('' for special and unknown ids); `vocabType`:
   * xgrammar's name for the tokenizer's decoder (byte_level, byte_fallback or raw).
   */
  constructor(
    vocab: readonly string[],
    vocabType: string,
    readonly vocabSize: number,
  ) {
    const words = Math.ceil(vocabSize / 32);
    const decode = tokenDecoder(vocabType);
    this.validFrom = Array.from({ length: UTF8_STATES }, () => new Int32Array(words));
    this.fitFrom = Array.from({ length: UTF8_STATES }, () => Array.from({ length: 3 }, () => new Int32Array(words)));
    this.opens = new Int32Array(words);
    this.byteToken = new Int32Array(256).fill(-1);
    this.offsets = new Int32Array(vocabSize + 1);
    let data = new Uint8Array(vocabSize * 8);
    let used = 0;
    const b: number[] = [];
    const n = Math.min(vocab.length, vocabSize);
    for (let t = 0; t < vocabSize; t++) {
      const s = t < n ? vocab[t]! : '';
      b.length = 0;
      decode(s, b);
      if (used + b.length > data.length) {
        const grown = new Uint8Array(Math.max(data.length * 2, used + b.length));
        grown.set(data);
        data = grown;
      }
      for (let i = 0; i < b.length; i++) data[used + i] = b[i]!;
      used += b.length;
      this.offsets[t + 1] = used;
      const bit = 1 << (t & 31);
      // A token without bytes (stop, special) may only come at a character boundary, as may one
      // that starts with a lead or ASCII byte; only a continuation byte first needs every state.
      const mid = b.length > 0 && b[0]! >= 0x80 && b[0]! < 0xc0;
      for (let state = mid ? 1 : 0; state < (mid ? UTF8_STATES : 1); state++) {
        let end = state;
        for (let i = 0; i < b.length && end >= 0; i++) end = utf8Step(end, b[i]!);
        if (end < 0) continue;
        this.validFrom[state]![t >> 5]! |= bit;
        for (let k = MISSING[end]!; k < 3; k++) this.fitFrom[state]![k]![t >> 5]! |= bit;
      }
      for (let i = 0; i < b.length; i++) {
        if (OPENERS.has(b[i]!)) {
          this.opens[t >> 5]! |= bit;
          break;
        }
      }
      if (b.length === 1 && (this.byteToken[b[0]!] === -1 || !/^<0x[0-9A-Fa-f]{2}>$/.test(s))) this.byteToken[b[0]!] = t;
    }
    this.data = data.subarray(0, used);
  }

  /** How many bytes token t stands for (0 for stop, special and unknown ids). */
  byteLength(t: number): number {
    return t >= 0 && t < this.vocabSize ? this.offsets[t + 1]! - this.offsets[t]! : 0;
  }

  /** The decoder state after token t from `state`, or -1 when t makes the text ill-formed. */
  after(state: number, t: number): number {
    if (t < 0 || t >= this.vocabSize) return -1;
    const end = this.offsets[t + 1]!;
    let st = state;
    for (let i = this.offsets[t]!; i < end && st >= 0; i++) st = utf8Step(st, this.data[i]!);
    return this.offsets[t] === end && state !== UTF8_BOUNDARY ? -1 : st;
  }

  /**
   * Spells `text` in tokens, longest match first (fewest tokens, as BPE merges tend to). Returns
   * null when some byte has no token.
   */
  spell(text: Uint8Array): number[] | null {
    const out: number[] = [];
    for (let i = 0; i < text.length; ) {
      let n = Math.min(this.getIndex().longest, text.length - i);
      let t: number | undefined;
      for (; n > 0 && (t = this.tokenOf(text, i, n)) === undefined; n--);
      if (t === undefined) return null;
      out.push(t);
      i += n;
    }
    return out;
  }

  /** Sets in `mask` every token whose bytes are a prefix of `text`. */
  markPrefixes(text: Uint8Array, mask: Int32Array): void {
    const n = Math.min(this.getIndex().longest, text.length);
    for (let k = 1; k <= n; k++) {
      const t = this.tokenOf(text, 0, k);
      if (t !== undefined) mask[t >> 5]! |= 1 << (t & 31);
    }
  }

  private tokenOf(text: Uint8Array, start: number, n: number): number | undefined {
    return this.getIndex().byBytes.get(latin1(text.subarray(start, start + n)));
  }

  /** Token ids by their bytes (as a latin1 string: compact), built on first use. */
  private getIndex(): { byBytes: Map<string, number>; longest: number } {
    if (this.index !== null) return this.index;
    const byBytes = new Map<string, number>();
    let longest = 0;
    for (let t = 0; t < this.vocabSize; t++) {
      const b = this.data.subarray(this.offsets[t]!, this.offsets[t + 1]!);
      if (b.length === 0) continue;
      const key = latin1(b);
      if (!byBytes.has(key)) byBytes.set(key, t); // the first (lowest) id of equal strings
      longest = Math.max(longest, b.length);
    }
    // A single byte is spelled by its plain token (byteToken), not its <0xNN> twin.
    for (let x = 0; x < 256; x++) if (this.byteToken[x]! >= 0) byBytes.set(String.fromCharCode(x), this.byteToken[x]!);
    this.index = { byBytes, longest };
    return this.index;
  }
}

function latin1(b: Uint8Array): string {
  return String.fromCharCode.apply(null, b as unknown as number[]);
}

const utf8 = new TextEncoder();

/** How a token string maps to bytes under the tokenizer's decoder (as xgrammar's vocab type says). */
function tokenDecoder(vocabType: string): (s: string, out: number[]) => void {
  const text = (s: string, out: number[]) => {
    for (const x of utf8.encode(s)) out.push(x);
  };
  if (vocabType === 'byte_level') {
    return (s, out) => {
      for (const ch of s) {
        const b = CHAR_TO_BYTE.get(ch);
        if (b === undefined) {
          out.length = 0; // an added token: kept as text
          return text(s, out);
        }
        out.push(b);
      }
    };
  }
  if (vocabType === 'byte_fallback') {
    return (s, out) => {
      const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(s);
      if (m) out.push(parseInt(m[1]!, 16));
      else text(s.replace(/\u2581/g, ' '), out);
    };
  }
  return text;
}
