// Exact grammars for bounded JSON numbers. xgrammar 0.1.27 gets float ranges wrong (for
// {"type":"number","minimum":-1,"maximum":1} it accepts 1.5 and -1.85 and refuses -0.5; exclusive
// bounds admit the bound itself), so such subschemas are swapped for placeholders before xgrammar
// converts the schema to EBNF, and each placeholder for a rule built here: plain decimals
// (-?int(.digits)?, no exponent) whose value lies in the range, built digit by digit.
import { isObject } from '../is-object.js';

export interface NumberBounds {
  min?: { value: number; strict: boolean };
  max?: { value: number; strict: boolean };
}

/** A non-negative decimal as integer part and fraction digits (no trailing zeros). */
interface Dec {
  int: bigint;
  frac: string;
}

function toDec(x: number): Dec {
  // Exact decimal expansion of the double, without exponent notation.
  if (Number.isInteger(x)) return { int: BigInt(Math.abs(x)), frac: '' };
  let s = Math.abs(x).toString();
  if (s.includes('e')) s = Math.abs(x).toFixed(Math.min(100, Math.max(0, -Math.floor(Math.log10(Math.abs(x))) + 20)));
  const [i, f = ''] = s.split('.');
  return { int: BigInt(i!), frac: f.replace(/0+$/, '') };
}

const q = (s: string) => JSON.stringify(s);
const alt = (xs: string[]) => (xs.length === 1 ? xs[0]! : `(${xs.join(' | ')})`);
const digits = (a: number, b: number) => (a === b ? q(String(a)) : `[${a}-${b}]`);

/** Equal-length digit strings from lo to hi (inclusive). */
function sameLength(lo: string, hi: string): string {
  if (lo.length === 0) return '""';
  if (lo === hi) return q(lo);
  const a = Number(lo[0]);
  const b = Number(hi[0]);
  const n = lo.length - 1;
  if (a === b) return `${q(lo[0]!)} ${sameLength(lo.slice(1), hi.slice(1))}`;
  const out: string[] = [];
  const loRest = lo.slice(1);
  const hiRest = hi.slice(1);
  let from = a;
  let to = b;
  if (/^0*$/.test(loRest) === false) {
    out.push(`${q(lo[0]!)} ${sameLength(loRest, '9'.repeat(n))}`);
    from = a + 1;
  }
  if (/^9*$/.test(hiRest) === false) {
    out.push(`${q(hi[0]!)} ${sameLength('0'.repeat(n), hiRest)}`);
    to = b - 1;
  }
  if (from <= to) out.push(n > 0 ? `${digits(from, to)} [0-9]{${n}}` : digits(from, to));
  return alt(out);
}

/** Integer strings (no leading zeros) from lo to hi (null: unbounded); null when empty. */
function intRange(lo: bigint, hi: bigint | null): string | null {
  if (hi !== null && hi < lo) return null;
  const out: string[] = [];
  if (lo === 0n) out.push('"0"');
  const start = lo === 0n ? 1n : lo;
  if (hi !== null && hi < start) return alt(out);
  const a = start.toString();
  const maxLen = hi === null ? a.length : hi.toString().length;
  for (let len = a.length; len <= maxLen; len++) {
    const from = len === a.length ? a : '1' + '0'.repeat(len - 1);
    const to = hi !== null && len === maxLen ? hi.toString() : '9'.repeat(len);
    out.push(sameLength(from, to));
  }
  if (hi === null) out.push(`[1-9] [0-9]{${maxLen}} [0-9]*`);
  return alt(out);
}

interface FracLang {
  /** Non-empty digit strings F, as EBNF; null when there are none. */
  some: string | null;
  /** Whether the empty fraction (the value .0) is in the language. */
  empty: boolean;
}

/**
 * Fraction digit strings F with 0.F >= 0.lo (> when loStrict) and 0.F <= 0.hi (< when hiStrict);
 * hi null: no upper bound (below 1). Each step consumes one digit of a bound.
 */
function fraction(lo: string, loStrict: boolean, hi: string | null, hiStrict: boolean): FracLang {
  const emptyOk = lo === '' && !loStrict && (hi === null || hi !== '' || !hiStrict);
  if (lo === '' && hi === '') return { some: emptyOk ? '"0"+' : null, empty: emptyOk };
  if (lo === '' && hi === null) return loStrict ? { some: '"0"* [1-9] [0-9]*', empty: false } : { some: '[0-9]+', empty: true };
  const d1 = lo === '' ? 0 : Number(lo[0]);
  const d2 = hi === null ? 10 : hi === '' ? 0 : Number(hi[0]);
  const out: string[] = [];
  const tail = (f: FracLang) => (f.some === null ? (f.empty ? '' : null) : f.empty ? ` (${f.some})?` : ` ${f.some}`);
  // The digits on a bound's path recurse; the ones strictly between them take any tail.
  const special = new Set([d1, d2]);
  for (const c of [...special].sort((x, y) => x - y)) {
    if (c > 9 || c < d1 || c > d2) continue;
    const nextLo: [string, boolean] = c === d1 ? [lo.slice(1), loStrict] : ['', false];
    const nextHi: [string | null, boolean] = hi !== null && c === d2 ? [hi.slice(1), hiStrict] : [null, false];
    const sub = fraction(nextLo[0], nextLo[1], nextHi[0], nextHi[1]);
    const t = tail(sub);
    if (t !== null) out.push(`${q(String(c))}${t}`);
  }
  const from = d1 + 1;
  const to = Math.min(d2 - 1, 9);
  if (from <= to) out.push(`${digits(from, to)} [0-9]*`);
  return { some: out.length > 0 ? alt(out) : null, empty: emptyOk };
}

/** Magnitude strings int(.frac)? in [lo, hi] (strictness per end; hi null: unbounded). */
function magnitude(lo: Dec, loStrict: boolean, hi: Dec | null, hiStrict: boolean): string | null {
  const out: string[] = [];
  const withFrac = (int: string, f: FracLang) => {
    const parts: string[] = [];
    if (f.empty) parts.push(int);
    if (f.some !== null) parts.push(`${int} "." ${f.some}`);
    if (parts.length > 0) out.push(alt(parts));
  };
  if (hi !== null && hi.int === lo.int) {
    withFrac(q(lo.int.toString()), fraction(lo.frac, loStrict, hi.frac, hiStrict));
    return out.length > 0 ? alt(out) : null;
  }
  if (hi !== null && hi.int < lo.int) return null;
  withFrac(q(lo.int.toString()), fraction(lo.frac, loStrict, null, false));
  const middle = intRange(lo.int + 1n, hi === null ? null : hi.int - 1n);
  if (middle !== null) out.push(`${middle} ("." [0-9]+)?`);
  if (hi !== null) withFrac(q(hi.int.toString()), fraction('', false, hi.frac, hiStrict));
  return out.length > 0 ? alt(out) : null;
}

/** The EBNF body of a number in the bounds; null when no number satisfies them. */
export function numberRangeEbnf(b: NumberBounds): string | null {
  const lo = b.min;
  const hi = b.max;
  const out: string[] = [];
  // x >= 0
  if (hi === undefined || hi.value > 0 || (hi.value === 0 && !hi.strict)) {
    const from = lo !== undefined && lo.value >= 0 ? lo : { value: 0, strict: false };
    const m = magnitude(toDec(from.value), from.strict, hi === undefined ? null : toDec(hi.value), hi?.strict ?? false);
    if (m !== null) out.push(m);
  }
  // x < 0, written as "-" and a magnitude m > 0 with -hi <= m <= -lo
  if (lo === undefined || lo.value < 0) {
    const from = hi !== undefined && hi.value < 0 ? { value: -hi.value, strict: hi.strict } : { value: 0, strict: true };
    const m = magnitude(toDec(from.value), from.strict, lo === undefined ? null : toDec(-lo.value), lo?.strict ?? false);
    if (m !== null) out.push(`"-" ${m}`);
  }
  return out.length > 0 ? alt(out) : null;
}

const PLACEHOLDER = '__rapid_number_';

function boundsOf(s: Record<string, unknown>): NumberBounds | null {
  const b: NumberBounds = {};
  const num = (k: string) => (typeof s[k] === 'number' ? (s[k] as number) : undefined);
  const min = num('minimum');
  const xmin = num('exclusiveMinimum');
  const max = num('maximum');
  const xmax = num('exclusiveMaximum');
  if (min !== undefined) b.min = { value: min, strict: false };
  if (xmin !== undefined && (b.min === undefined || xmin >= b.min.value)) b.min = { value: xmin, strict: true };
  if (max !== undefined) b.max = { value: max, strict: false };
  if (xmax !== undefined && (b.max === undefined || xmax <= b.max.value)) b.max = { value: xmax, strict: true };
  return b.min === undefined && b.max === undefined ? null : b;
}

/**
 * Replaces every bounded `"type": "number"` subschema by a const placeholder. Returns the new
 * schema and the EBNF body of each placeholder (null entries: the range is empty).
 */
export function extractNumberRanges(schema: unknown): { schema: unknown; rules: (string | null)[] } {
  const rules: (string | null)[] = [];
  const walk = (s: unknown): unknown => {
    if (Array.isArray(s)) return s.map(walk);
    if (!isObject(s)) return s;
    const types = Array.isArray(s.type) ? s.type : [s.type];
    const bounds = types.includes('number') ? boundsOf(s) : null;
    if (bounds !== null) {
      const id = rules.length;
      rules.push(numberRangeEbnf(bounds));
      const placeholder = { const: `${PLACEHOLDER}${id}` };
      const others = types.filter((t) => t !== 'number' && t !== 'integer');
      if (others.length === 0) return placeholder;
      const rest = Object.fromEntries(Object.entries(s).filter(([k]) => k !== 'type'));
      return { anyOf: [placeholder, walk({ ...rest, type: others })] };
    }
    return Object.fromEntries(Object.entries(s).map(([k, v]) => [k, k === 'const' || k === 'enum' || k === 'default' || k === 'examples' ? v : walk(v)]));
  };
  return { schema: walk(schema), rules };
}

/** Puts the number rules in place of their placeholders in xgrammar's EBNF of the schema. */
export function substituteNumberRules(ebnf: string, rules: (string | null)[]): string {
  let out = ebnf;
  rules.forEach((body, id) => {
    const literal = JSON.stringify(JSON.stringify(`${PLACEHOLDER}${id}`));
    if (!out.includes(literal)) throw new Error(`number range ${id} lost in the grammar`);
    if (body === null) throw new Error('a number range admits no value (minimum above maximum)');
    out = out.split(literal).join(`rapid_number_${id}`);
    out += `\nrapid_number_${id} ::= ${body}`;
  });
  return out;
}
