// Translates Oniguruma (Ruby syntax, UTF-8) patterns as found in Hugging Face tokenizer.json files
// into equivalent JavaScript RegExp sources. JS lacks scoped inline flags, possessive quantifiers,
// atomic groups and Unicode-aware \d \w \s, so those are rewritten structurally.

/** Unicode White_Space, which is what Oniguruma's \s and Rust's char::is_whitespace match. */
export const WHITESPACE_CLASS_BODY = '\\t-\\r \\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000';
/** Oniguruma's Unicode \w: Letter | Mark | Number | Connector_Punctuation. */
export const ONIG_WORD_CLASS_BODY = '\\p{L}\\p{M}\\p{N}\\p{Pc}';
/** Rust regex's Unicode \w (used by the Whitespace pre-tokenizer and added-token word checks). */
export const WORD_CLASS_BODY = '\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}';

const SYNTAX_CHARS = new Set('^$\\.*+?()[]{}|/-');

export class RegexTranslationError extends Error {
  constructor(pattern: string, reason: string) {
    super(`cannot translate tokenizer regex ${JSON.stringify(pattern)}: ${reason}`);
    this.name = 'RegexTranslationError';
  }
}

interface Frame {
  /** Emitted atoms; a quantifier applies to the last one. */
  atoms: string[];
  caseInsensitive: boolean;
  dotAll: boolean;
  /** Text that opens this group in the output, e.g. "(?:" or "(?<g1>". */
  open: string;
  atomic: boolean;
  /** Whether the last atom already carries a quantifier (Ruby allows stacking them). */
  lastQuantified?: boolean;
}

const POSIX_CLASSES: Record<string, string> = {
  alpha: '\\p{Alphabetic}',
  digit: '\\p{Nd}',
  alnum: '\\p{Alphabetic}\\p{Nd}',
  upper: '\\p{Uppercase}',
  lower: '\\p{Lowercase}',
  space: WHITESPACE_CLASS_BODY,
  blank: '\\t\\p{Zs}',
  punct: '\\p{P}\\p{S}',
  word: ONIG_WORD_CLASS_BODY,
  xdigit: '0-9A-Fa-f',
  cntrl: '\\p{Cc}',
};

const propertyCache = new Map<string, string>();

/** Maps an Oniguruma property name to a JS \p{...} body, trying script names as a fallback. */
function translateProperty(pattern: string, name: string): string {
  const cached = propertyCache.get(name);
  if (cached !== undefined) return cached;
  const aliases: Record<string, string> = {
    Alpha: 'Alphabetic', Digit: 'Nd', Upper: 'Uppercase', Lower: 'Lowercase', Space: 'White_Space',
    Punct: 'P', Word: 'Alphabetic', Cntrl: 'Cc', Any: 'Any',
  };
  const candidates = [name, aliases[name], `Script=${name}`, `General_Category=${name}`];
  for (const c of candidates) {
    if (c === undefined) continue;
    try {
      new RegExp(`\\p{${c}}`, 'u');
      propertyCache.set(name, c);
      return c;
    } catch {
      // try the next spelling
    }
  }
  throw new RegexTranslationError(pattern, `unknown Unicode property \\p{${name}}`);
}

function codePointEscape(cp: number): string {
  return `\\u{${cp.toString(16)}}`;
}

/** A single literal code point as a JS regex atom outside a class. */
function literalAtom(cp: number, caseInsensitive: boolean): string {
  if (caseInsensitive) {
    const variants = caseVariants(cp);
    if (variants.length > 1) return `[${variants.map(classLiteral).join('')}]`;
  }
  const ch = String.fromCodePoint(cp);
  if (SYNTAX_CHARS.has(ch)) return `\\${ch}`;
  if (cp < 0x20 || cp === 0x7f) return codePointEscape(cp);
  return ch;
}

/** A literal code point as it must be written inside a JS character class. */
function classLiteral(cp: number): string {
  const ch = String.fromCodePoint(cp);
  if (ch === '\\' || ch === ']' || ch === '[' || ch === '^' || ch === '-') return `\\${ch}`;
  if (cp < 0x20 || cp === 0x7f) return codePointEscape(cp);
  return ch;
}

/** The code point plus its simple upper/lower-case counterparts (single code points only). */
function caseVariants(cp: number): number[] {
  const ch = String.fromCodePoint(cp);
  const out = new Set<number>([cp]);
  for (const v of [ch.toLowerCase(), ch.toUpperCase()]) {
    const arr = Array.from(v);
    if (arr.length === 1) out.add(arr[0]!.codePointAt(0)!);
  }
  // Close over one more step so that e.g. 'K' also yields the Kelvin sign's partners consistently.
  for (const c of [...out]) {
    const s = String.fromCodePoint(c);
    for (const v of [s.toLowerCase(), s.toUpperCase()]) {
      const arr = Array.from(v);
      if (arr.length === 1) out.add(arr[0]!.codePointAt(0)!);
    }
  }
  return [...out];
}

class Translator {
  private pos = 0;
  private readonly chars: string[];
  private groupCount = 0;
  private atomicCount = 0;

  constructor(private readonly pattern: string) {
    this.chars = Array.from(pattern);
  }

  private fail(reason: string): never {
    throw new RegexTranslationError(this.pattern, reason);
  }

  private peek(offset = 0): string | undefined {
    return this.chars[this.pos + offset];
  }

  private lookingAt(s: string): boolean {
    const parts = Array.from(s);
    for (let i = 0; i < parts.length; i++) if (this.chars[this.pos + i] !== parts[i]) return false;
    return true;
  }

  translate(): string {
    const stack: Frame[] = [{ atoms: [], caseInsensitive: false, dotAll: false, open: '', atomic: false }];
    const top = (): Frame => stack[stack.length - 1]!;
    while (this.pos < this.chars.length) {
      const ch = this.chars[this.pos]!;
      const frame = top();
      if (ch === '\\') {
        this.push(frame, this.readEscape(frame.caseInsensitive));
      } else if (ch === '[') {
        this.push(frame, this.readClass(frame.caseInsensitive));
      } else if (ch === '(') {
        const opened = this.readGroupOpen(frame);
        if (opened !== null) stack.push(opened);
      } else if (ch === ')') {
        this.pos++;
        if (stack.length === 1) this.fail('unbalanced )');
        const done = stack.pop()!;
        const body = done.atoms.join('');
        if (done.atomic) {
          // Atomic group emulation: a lookahead captures greedily, the backreference consumes it.
          const name = `a${++this.atomicCount}`;
          this.push(top(), `(?:(?=(?<${name}>${body}))\\k<${name}>)`);
        } else {
          this.push(top(), `${done.open}${body})`);
        }
      } else if (ch === '|') {
        this.pos++;
        this.push(frame, '|');
      } else if (ch === '*' || ch === '+' || ch === '?' || (ch === '{' && this.intervalAhead())) {
        this.applyQuantifier(frame);
      } else if (ch === '.') {
        this.pos++;
        this.push(frame, frame.dotAll ? '[\\s\\S]' : '[^\\n]');
      } else if (ch === '^') {
        this.pos++;
        this.push(frame, '(?<![^\\n])');
      } else if (ch === '$') {
        this.pos++;
        this.push(frame, '(?![^\\n])');
      } else {
        this.pos++;
        this.push(frame, literalAtom(ch.codePointAt(0)!, frame.caseInsensitive));
      }
    }
    if (stack.length !== 1) this.fail('unbalanced (');
    return stack[0]!.atoms.join('');
  }

  /** True when a '{' at pos starts a valid interval quantifier ({n}, {n,}, {,m}, {n,m}). */
  private intervalAhead(): boolean {
    let i = this.pos + 1;
    let digits = 0;
    while (/[0-9]/.test(this.chars[i] ?? '')) { i++; digits++; }
    if (this.chars[i] === '}') return digits > 0;
    if (this.chars[i] !== ',') return false;
    i++;
    let digits2 = 0;
    while (/[0-9]/.test(this.chars[i] ?? '')) { i++; digits2++; }
    return this.chars[i] === '}' && (digits > 0 || digits2 > 0);
  }

  private push(frame: Frame, atom: string): void {
    frame.atoms.push(atom);
    frame.lastQuantified = false;
  }

  private applyQuantifier(frame: Frame): void {
    const ch = this.chars[this.pos]!;
    let quant: string;
    const isInterval = ch === '{';
    if (isInterval) {
      let s = '';
      while (this.chars[this.pos] !== '}') s += this.chars[this.pos++];
      this.pos++;
      s += '}';
      quant = s.startsWith('{,') ? `{0${s.slice(1)}` : s;
    } else {
      quant = ch;
      this.pos++;
    }
    const last = frame.atoms.length > 0 ? frame.atoms[frame.atoms.length - 1]! : undefined;
    if (last === undefined || last === '|') this.fail(`quantifier ${quant} with nothing to repeat`);
    const next = this.peek();
    if (next === '?') {
      this.pos++;
      frame.atoms[frame.atoms.length - 1] = `${last}${quant}?`;
    } else if (next === '+' && !isInterval) {
      // Possessive quantifier: equivalent to an atomic group around the greedy repetition.
      this.pos++;
      const name = `a${++this.atomicCount}`;
      frame.atoms[frame.atoms.length - 1] = `(?:(?=(?<${name}>${last}${quant}))\\k<${name}>)`;
    } else {
      // Ruby syntax: `{n,m}+` is an interval followed by a separate `+`, so group before stacking.
      const base = frame.lastQuantified === true ? `(?:${last})` : last;
      frame.atoms[frame.atoms.length - 1] = `${base}${quant}`;
    }
    frame.lastQuantified = true;
  }

  private readGroupOpen(parent: Frame): Frame | null {
    this.pos++; // '('
    const inherit = { caseInsensitive: parent.caseInsensitive, dotAll: parent.dotAll };
    if (this.peek() !== '?') {
      this.groupCount++;
      return { atoms: [], ...inherit, open: `(?<g${this.groupCount}>`, atomic: false };
    }
    this.pos++; // '?'
    const c = this.peek();
    if (c === ':' ) { this.pos++; return { atoms: [], ...inherit, open: '(?:', atomic: false }; }
    if (c === '=' || c === '!') { this.pos++; return { atoms: [], ...inherit, open: `(?${c}`, atomic: false }; }
    if (c === '>') { this.pos++; return { atoms: [], ...inherit, open: '(?:', atomic: true }; }
    if (c === '#') {
      while (this.pos < this.chars.length && this.chars[this.pos] !== ')') this.pos++;
      this.pos++;
      return null;
    }
    if (this.lookingAt('<=') || this.lookingAt('<!')) {
      const kind = this.chars[this.pos + 1]!;
      this.pos += 2;
      return { atoms: [], ...inherit, open: `(?<${kind}`, atomic: false };
    }
    if (c === '<' || (c === 'P' && this.peek(1) === '<') || c === "'") {
      if (c === 'P') this.pos++;
      const close = this.chars[this.pos] === "'" ? "'" : '>';
      this.pos++;
      let name = '';
      while (this.pos < this.chars.length && this.chars[this.pos] !== close) name += this.chars[this.pos++];
      this.pos++;
      this.groupCount++;
      return { atoms: [], ...inherit, open: `(?<${name}>`, atomic: false };
    }
    // Inline options: (?imx-imx) or (?imx-imx:subexp)
    let on = true;
    const flags = { ...inherit };
    while (this.pos < this.chars.length) {
      const f = this.chars[this.pos]!;
      if (f === '-') { on = false; this.pos++; continue; }
      if (f === 'i') { flags.caseInsensitive = on; this.pos++; continue; }
      // Ruby's 'm' is dot-matches-newline.
      if (f === 'm') { flags.dotAll = on; this.pos++; continue; }
      if (f === 'x') this.fail('extended-mode (?x) patterns are not supported');
      if (f === ':') {
        this.pos++;
        return { atoms: [], ...flags, open: '(?:', atomic: false };
      }
      if (f === ')') {
        // Applies to the rest of the enclosing group.
        this.pos++;
        parent.caseInsensitive = flags.caseInsensitive;
        parent.dotAll = flags.dotAll;
        return null;
      }
      this.fail(`unsupported group syntax (?${f}`);
    }
    this.fail('unterminated group');
  }

  /** Reads an escape outside a character class and returns the JS atom. */
  private readEscape(caseInsensitive: boolean): string {
    this.pos++; // '\'
    const c = this.chars[this.pos++];
    if (c === undefined) this.fail('trailing backslash');
    switch (c) {
      case 'd': return '\\p{Nd}';
      case 'D': return '\\P{Nd}';
      case 'w': return `[${ONIG_WORD_CLASS_BODY}]`;
      case 'W': return `[^${ONIG_WORD_CLASS_BODY}]`;
      case 's': return `[${WHITESPACE_CLASS_BODY}]`;
      case 'S': return `[^${WHITESPACE_CLASS_BODY}]`;
      case 'h': return '[0-9A-Fa-f]';
      case 'H': return '[^0-9A-Fa-f]';
      case 'A': return '(?<![\\s\\S])';
      case 'z': return '(?![\\s\\S])';
      case 'Z': return '(?=\\n?(?![\\s\\S]))';
      case 'b': return `(?:(?<=[${ONIG_WORD_CLASS_BODY}])(?![${ONIG_WORD_CLASS_BODY}])|(?<![${ONIG_WORD_CLASS_BODY}])(?=[${ONIG_WORD_CLASS_BODY}]))`;
      case 'B': return `(?:(?<=[${ONIG_WORD_CLASS_BODY}])(?=[${ONIG_WORD_CLASS_BODY}])|(?<![${ONIG_WORD_CLASS_BODY}])(?![${ONIG_WORD_CLASS_BODY}]))`;
      case 'R': return '(?:\\r\\n|[\\n\\v\\f\\r\\x85\\u2028\\u2029])';
      case 'p': case 'P': return `\\${c}{${this.readPropertyName()}}`;
      case 'k': {
        if (this.peek() !== '<') this.fail('unsupported \\k form');
        this.pos++;
        let name = '';
        while (this.pos < this.chars.length && this.chars[this.pos] !== '>') name += this.chars[this.pos++];
        this.pos++;
        return /^[0-9]+$/.test(name) ? `\\k<g${name}>` : `\\k<${name}>`;
      }
      case 'G': case 'K': case 'X': case 'y': case 'Y': case 'g':
        this.fail(`\\${c} has no JavaScript equivalent`);
      default: break;
    }
    if (/[1-9]/.test(c)) {
      let num = c;
      while (/[0-9]/.test(this.peek() ?? '')) num += this.chars[this.pos++];
      return `\\k<g${num}>`;
    }
    const cp = this.readSimpleEscapeCodePoint(c);
    return literalAtom(cp, caseInsensitive);
  }

  /** Escapes that denote a single code point (\n, \x41, \u{...}, identity escapes). */
  private readSimpleEscapeCodePoint(c: string): number {
    switch (c) {
      case 'n': return 0x0a;
      case 't': return 0x09;
      case 'r': return 0x0d;
      case 'f': return 0x0c;
      case 'v': return 0x0b;
      case 'a': return 0x07;
      case 'e': return 0x1b;
      case '0': {
        let oct = '';
        while (oct.length < 2 && /[0-7]/.test(this.peek() ?? '')) oct += this.chars[this.pos++];
        return oct === '' ? 0 : parseInt(oct, 8);
      }
      case 'x': {
        if (this.peek() === '{') {
          this.pos++;
          let hex = '';
          while (this.pos < this.chars.length && this.chars[this.pos] !== '}') hex += this.chars[this.pos++];
          this.pos++;
          return parseInt(hex, 16);
        }
        let hex = '';
        while (hex.length < 2 && /[0-9a-fA-F]/.test(this.peek() ?? '')) hex += this.chars[this.pos++];
        return parseInt(hex, 16);
      }
      case 'u': {
        let hex = '';
        while (hex.length < 4 && /[0-9a-fA-F]/.test(this.peek() ?? '')) hex += this.chars[this.pos++];
        return parseInt(hex, 16);
      }
      default:
        if (/[a-zA-Z]/.test(c)) this.fail(`unknown escape \\${c}`);
        return c.codePointAt(0)!;
    }
  }

  private readPropertyName(): string {
    let name = '';
    let negate = false;
    if (this.peek() === '{') {
      this.pos++;
      if (this.peek() === '^') { negate = true; this.pos++; }
      while (this.pos < this.chars.length && this.chars[this.pos] !== '}') name += this.chars[this.pos++];
      this.pos++;
    } else {
      name = this.chars[this.pos++] ?? '';
    }
    if (negate) this.fail('\\p{^...} negation is not supported');
    return translateProperty(this.pattern, name);
  }

  /** Reads a bracket expression and returns a JS class. */
  private readClass(caseInsensitive: boolean): string {
    this.pos++; // '['
    let negated = false;
    if (this.peek() === '^') { negated = true; this.pos++; }
    const items: string[] = [];
    let first = true;
    while (true) {
      const c = this.chars[this.pos];
      if (c === undefined) this.fail('unterminated character class');
      if (c === ']' && !first) { this.pos++; break; }
      first = false;
      if (c === '[' && this.peek(1) === ':') {
        const end = this.chars.indexOf(']', this.pos);
        const spec = this.chars.slice(this.pos + 2, end).join('');
        if (!spec.endsWith(':')) this.fail('malformed POSIX bracket');
        const name = spec.slice(0, -1);
        const neg = name.startsWith('^');
        const body = POSIX_CLASSES[neg ? name.slice(1) : name];
        if (body === undefined || neg) this.fail(`unsupported POSIX class [:${name}:]`);
        items.push(body);
        this.pos = end + 1;
        continue;
      }
      if (c === '[') this.fail('nested character classes are not supported');
      if (c === '&' && this.peek(1) === '&') this.fail('class intersection && is not supported');
      const lo = this.readClassAtom();
      if (typeof lo === 'string') { items.push(lo); continue; }
      if (this.peek() === '-' && this.peek(1) !== ']' && this.peek(1) !== undefined) {
        this.pos++;
        const hi = this.readClassAtom();
        if (typeof hi === 'string') this.fail('class range with a class escape as an end');
        items.push(this.classRange(lo, hi, caseInsensitive));
        continue;
      }
      if (caseInsensitive) items.push(caseVariants(lo).map(classLiteral).join(''));
      else items.push(classLiteral(lo));
    }
    return `[${negated ? '^' : ''}${items.join('')}]`;
  }

  private classRange(lo: number, hi: number, caseInsensitive: boolean): string {
    let out = `${classLiteral(lo)}-${classLiteral(hi)}`;
    if (caseInsensitive && hi - lo <= 512) {
      const extra = new Set<number>();
      for (let cp = lo; cp <= hi; cp++) for (const v of caseVariants(cp)) if (v < lo || v > hi) extra.add(v);
      for (const v of extra) out += classLiteral(v);
    }
    return out;
  }

  /** A class member: a code point, or a string holding a ready-made class body fragment. */
  private readClassAtom(): number | string {
    const c = this.chars[this.pos]!;
    if (c !== '\\') {
      this.pos++;
      return c.codePointAt(0)!;
    }
    this.pos++;
    const e = this.chars[this.pos++];
    if (e === undefined) this.fail('trailing backslash in class');
    switch (e) {
      case 'd': return '\\p{Nd}';
      case 'D': return '\\P{Nd}';
      case 'w': return ONIG_WORD_CLASS_BODY;
      // JS has no class-set negation without the v flag; the native escapes differ only on rare code points.
      case 'W': return '\\W';
      case 's': return WHITESPACE_CLASS_BODY;
      case 'S': return '\\S';
      case 'h': return '0-9A-Fa-f';
      case 'p': case 'P': return `\\${e}{${this.readPropertyName()}}`;
      case 'b': return 0x08;
      default: return this.readSimpleEscapeCodePoint(e);
    }
  }
}

/** Returns a JS regex source equivalent to the Oniguruma pattern (to be compiled with the `u` flag). */
export function translateOnigPattern(pattern: string): string {
  return new Translator(pattern).translate();
}

const compiled = new Map<string, RegExp>();

/** Compiles an Oniguruma pattern to a global, Unicode JS RegExp (cached per pattern). */
export function compileOnigRegex(pattern: string): RegExp {
  let re = compiled.get(pattern);
  if (re === undefined) {
    const source = translateOnigPattern(pattern);
    try {
      re = new RegExp(source, 'gu');
    } catch (err) {
      throw new RegexTranslationError(pattern, `translated form ${JSON.stringify(source)} is invalid: ${(err as Error).message}`);
    }
    compiled.set(pattern, re);
  }
  // Callers iterate with lastIndex, so hand out a fresh object sharing the compiled source.
  return new RegExp(re.source, re.flags);
}

/** Escapes a literal string for use inside a JS RegExp. */
export function escapeRegexLiteral(s: string): string {
  return s.replace(/[\\^$.*+?()[\]{}|/-]/g, '\\$&');
}
