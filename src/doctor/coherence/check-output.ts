// The coherence gate's checker: a garbage detector (empty, runaway, repetition, non-words) and the
// expected-answer match. A port of training/tiny-vlm/golden.py (check_output) so that rapid scores
// an output exactly as the training code does.
import type { GoldenItem } from './golden-set.js';

export interface CheckResult {
  ok: boolean;
  why: string; // "ok", "wrong answer", "wrong JSON", "invalid JSON: ...", or the garbage reason
}

/** Python's repr of a short string, so reasons read the same as golden.py's. */
function pyRepr(s: string): string {
  return s.includes("'") && !s.includes('"') ? `"${s}"` : `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

/** A reason `output` is garbage, or null. `words` holds the allowed words in lower case. */
export function garbage(output: string, words: ReadonlySet<string>): string | null {
  if (output.trim().length === 0) return 'empty';
  const chars = [...output]; // code points, as Python's str indexes them
  if (chars.length > 1200) return 'runaway length';
  const toks = output.match(/[A-Za-z]+|\p{Nd}+|[^\s\p{Nd}A-Za-z]/gu) ?? [];
  let run = 1;
  for (let i = 1; i < toks.length; i++) {
    run = toks[i] === toks[i - 1] ? run + 1 : 1;
    if (run >= 6) return `token repeated: ${pyRepr(toks[i]!)}`;
  }
  for (let n = 4; n <= 40; n++) {
    if (chars.length < 3 * n) break;
    const tail = chars.slice(-n);
    if (new Set(tail).size <= 1) continue;
    const t = tail.join('');
    if (chars.slice(-3 * n).join('') === t + t + t) return `looping tail: ${pyRepr(t)}`;
  }
  const bad = [...new Set(output.match(/[A-Za-z]+/g) ?? [])].filter((w) => !words.has(w.toLowerCase())).sort();
  if (bad.length > 0) return `non-words: ${bad.slice(0, 5).join(' ')}`;
  return null;
}

/** Trim, lower case, collapse whitespace, drop a trailing "." or "!". */
export function normalize(s: string): string {
  return s
    .trim()
    .toLowerCase()
    .replace(/\s+/g, ' ')
    .replace(/[.!]+$/, '')
    .trim();
}

/** Deep equality of parsed JSON values, key order ignored (Python dict ==). */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const bb = b as unknown[];
    return a.length === bb.length && a.every((x, i) => jsonEqual(x, bb[i]));
  }
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  const ob = b as Record<string, unknown>;
  return ka.every((k) => Object.hasOwn(ob, k) && jsonEqual((a as Record<string, unknown>)[k], ob[k]));
}

/** The kinds in `absent` that `output` names, singular or plural, in any case. */
export function namedAbsent(output: string, absent: readonly string[]): string[] {
  const lower = output.toLowerCase();
  return absent.filter((k) => new RegExp(`\\b${k}s?\\b`).test(lower));
}

export function checkOutput(item: GoldenItem, output: string, words: ReadonlySet<string>): CheckResult {
  const g = garbage(output, words);
  if (g) return { ok: false, why: g };
  const named = namedAbsent(output, item.absent ?? []);
  if (named.length > 0) return { ok: false, why: `names a shape not in the picture: ${named.join(', ')}` };
  if (item.match === 'json') {
    let got: unknown;
    try {
      got = JSON.parse(output);
    } catch (err) {
      return { ok: false, why: `invalid JSON: ${(err as Error).message}` };
    }
    const ok = jsonEqual(got, item.expected);
    return { ok, why: ok ? 'ok' : 'wrong JSON' };
  }
  const ok = typeof item.expected === 'string' && normalize(output) === normalize(item.expected);
  return { ok, why: ok ? 'ok' : 'wrong answer' };
}

/** golden.py's grouping: every image_* question counts as "image". */
export function categoryGroup(category: string): string {
  return category.startsWith('image_') ? 'image' : category;
}
