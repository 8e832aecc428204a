// The shortest way to finish a constrained output from where it stands, found with the request's
// own matcher (so patterns, number ranges, required properties and minItems are all respected):
// a greedy walk that tries closing bytes first and takes forced text whole, then the walk's bytes
// spelled in the model's tokens and replayed through the matcher. Every trial is rolled back.
import type { TokenBytes } from './token-bytes.js';
import type { Utf8Grammar } from './utf8-grammar.js';

/** The longest closing searched for (bytes); past it the output is left to run as before. */
export const MAX_CLOSING_BYTES = 512;

export interface Closing {
  /** The completion's bytes. */
  bytes: Uint8Array;
  /** Those bytes in tokens, each accepted in turn by the matcher, after which a stop is allowed. */
  tokens: number[];
}

const ascii = (s: string) => [...s].map((c) => c.charCodeAt(0));

/**
 * Bytes in the order the walk tries them: what ends a string, object, array or value; the shortest
 * values (a digit, null, false, empty containers); then everything printable. Separators come
 * before digits so a number ends as soon as it may, and '1' before '0' so a number that must grow
 * (0.000...) reaches a valid value instead of repeating zeros.
 */
const BOUNDARY_ORDER: readonly number[] = (() => {
  const first = ascii('"}],:10nft[{-.23456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ');
  const seen = new Set(first);
  const rest: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) if (!seen.has(b)) rest.push(b);
  return [...first, ...rest, 0x20];
})();
/** Mid-character only continuation bytes can follow (the guard refuses out-of-range ones). */
const CONTINUATIONS: readonly number[] = Array.from({ length: 0x40 }, (_, i) => 0x80 + i);

const utf8 = new TextEncoder();

/** The shortest closing found from g's current state (left as it was), or null when none was found. */
export function shortestClosing(g: Utf8Grammar, tables: TokenBytes, stopId: number): Closing | null {
  const text: number[] = [];
  let taken = 0;
  const take = (b: number): boolean => {
    const t = tables.byteToken[b]!;
    if (t < 0 || !g.accept(t)) return false;
    taken++;
    text.push(b);
    return true;
  };
  let found = false;
  try {
    while (text.length <= MAX_CLOSING_BYTES) {
      if (canStop(g, stopId)) {
        found = true;
        break;
      }
      const forced = g.forcedText();
      if (forced !== '') {
        if (!utf8.encode(forced).every(take)) break;
        continue;
      }
      const b = nextByte(g, tables, g.atBoundary ? BOUNDARY_ORDER : CONTINUATIONS);
      if (b < 0 || !take(b)) break;
    }
  } finally {
    g.rollBack(taken);
  }
  if (!found) return null;
  const bytes = Uint8Array.from(text);
  const spelled = tables.spell(bytes);
  if (spelled !== null && replays(g, spelled, stopId)) return { bytes, tokens: spelled };
  // The byte-by-byte spelling is the walk itself: it replays by construction.
  return { bytes, tokens: text.map((b) => tables.byteToken[b]!) };
}

/** Where the next byte is a letter (a key, an enum value), this many allowed letters are compared. */
const BRANCH_LOOKAHEAD = 4;
const isLetter = (b: number) => (b >= 0x61 && b <= 0x7a) || (b >= 0x41 && b <= 0x5a);

/**
 * The byte the walk takes next: the first allowed one in `order`; but where that is a letter (the
 * choice of a key or an enum value), of the first few allowed letters the one whose forced text
 * after it is shortest ("a" over "the quick brown fox"). -1 when none is allowed.
 */
function nextByte(g: Utf8Grammar, tables: TokenBytes, order: readonly number[]): number {
  let best = -1;
  let bestCost = Number.POSITIVE_INFINITY;
  let seen = 0;
  for (const b of order) {
    if (seen > 0 && !isLetter(b)) continue;
    const t = tables.byteToken[b]!;
    if (t < 0 || !g.accept(t)) continue;
    if (seen === 0 && !isLetter(b)) {
      g.rollBack(1);
      return b;
    }
    const cost = g.forcedText().length;
    g.rollBack(1);
    if (cost < bestCost) {
      best = b;
      bestCost = cost;
    }
    if (++seen >= BRANCH_LOOKAHEAD || cost === 0) break;
  }
  return best;
}

/** Whether a stop token is allowed now (tried and taken back). */
function canStop(g: Utf8Grammar, stopId: number): boolean {
  if (!g.accept(stopId)) return false;
  g.rollBack(1);
  return true;
}

/** Whether the matcher takes `tokens` in turn and then allows a stop; leaves g as it was. */
function replays(g: Utf8Grammar, tokens: readonly number[], stopId: number): boolean {
  let n = 0;
  try {
    for (const t of tokens) {
      if (!g.accept(t)) return false;
      n++;
    }
    return canStop(g, stopId);
  } finally {
    g.rollBack(n);
  }
}
