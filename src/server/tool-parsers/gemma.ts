// Gemma. Gemma 3 has no official tool format; Google's function-calling guide for it
// (ai.google.dev/gemma/docs/capabilities/function-calling) has the model answer with a Python call,
// conventionally fenced as ```tool_code\nget_weather(city="Oslo")\n```, and prompt-based setups ask
// for a bare JSON object {"name": ..., "arguments"|"parameters": {...}} (also fenced ```tool_call).
// Both are parsed here. The function-calling checkpoints have real formats, matched against
// public parsers (mlx-lm tool_parsers/function_gemma.py, llama.cpp's function-gemma chat format,
// vLLM's Gemma 4 parser): FunctionGemma `<start_function_call>call:name{k:<escape>str<escape>,n:1}
// <end_function_call>` and Gemma 4 `<|tool_call>call:name{k:<|"|>str<|"|>,n:1}<tool_call|>`, where
// strings are wrapped in the delimiter token, keys are bare and other values are JSON-like literals.
import { scanCallSequence } from './llama3-json.js';
import { skipWs } from './json-call.js';
import type { RegionScan, ScannedCall, ToolCallFormat } from './types.js';

const FG_OPEN = '<start_function_call>';
const FG_CLOSE = '<end_function_call>';
const G4_OPEN = '<|tool_call>';
const G4_CLOSE = '<tool_call|>';
const CODE_FENCE = '```tool_code';
const CALL_FENCE = '```tool_call';
const FENCE_END = '```';

class SyntaxErr extends Error {}

/** A recursive-descent reader of call arguments: `{k:v,...}` bodies (Gemma) or `k=v, ...` (Python). */
class ArgReader {
  i = 0;
  constructor(
    readonly s: string,
    /** The string delimiter of the FunctionGemma / Gemma 4 syntax; null for Python literals. */
    readonly quote: string | null,
  ) {}

  ws(): void {
    this.i = skipWs(this.s, this.i);
  }

  eat(ch: string): boolean {
    this.ws();
    if (this.s.startsWith(ch, this.i)) {
      this.i += ch.length;
      return true;
    }
    return false;
  }

  expect(ch: string): void {
    if (!this.eat(ch)) throw new SyntaxErr(`expected ${ch} at ${this.i}`);
  }

  key(): string {
    this.ws();
    if (this.quote !== null && this.s.startsWith(this.quote, this.i)) return this.delimited();
    const c = this.s[this.i];
    if (c === '"' || c === "'") return this.quoted();
    const m = /^[A-Za-z_][A-Za-z0-9_.-]*/.exec(this.s.slice(this.i));
    if (!m) throw new SyntaxErr(`expected a key at ${this.i}`);
    this.i += m[0].length;
    return m[0];
  }

  delimited(): string {
    const q = this.quote!;
    const start = this.i + q.length;
    const end = this.s.indexOf(q, start);
    if (end < 0) throw new SyntaxErr('unterminated string');
    this.i = end + q.length;
    return this.s.slice(start, end);
  }

  /** A '...' or "..." literal with backslash escapes. */
  quoted(): string {
    const q = this.s[this.i]!;
    let out = '';
    for (let j = this.i + 1; j < this.s.length; j++) {
      const c = this.s[j]!;
      if (c === '\\' && j + 1 < this.s.length) {
        const n = this.s[++j]!;
        out += n === 'n' ? '\n' : n === 't' ? '\t' : n === 'r' ? '\r' : n;
        continue;
      }
      if (c === q) {
        this.i = j + 1;
        return out;
      }
      out += c;
    }
    throw new SyntaxErr('unterminated string');
  }

  value(): unknown {
    this.ws();
    if (this.quote !== null && this.s.startsWith(this.quote, this.i)) return this.delimited();
    const c = this.s[this.i];
    if (c === '"' || c === "'") return this.quoted();
    if (c === '{') return this.object('{', '}', ':');
    if (c === '[') {
      this.i++;
      const arr: unknown[] = [];
      while (!this.eat(']')) {
        if (arr.length > 0) this.expect(',');
        if (this.eat(']')) break; // trailing comma
        arr.push(this.value());
      }
      return arr;
    }
    const m = /^[-+.0-9A-Za-z_]+/.exec(this.s.slice(this.i));
    if (!m) throw new SyntaxErr(`expected a value at ${this.i}`);
    this.i += m[0].length;
    const t = m[0];
    if (t === 'true' || t === 'True') return true;
    if (t === 'false' || t === 'False') return false;
    if (t === 'null' || t === 'None') return null;
    if (/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(t)) return Number(t);
    if (this.quote !== null) return t; // Gemma writes some enum-like strings bare
    throw new SyntaxErr(`unknown literal ${t}`);
  }

  /** `open k sep v, ... close`; Python keyword arguments use ('(', ')', '='). */
  object(open: string, close: string, sep: string): Record<string, unknown> {
    this.expect(open);
    const out: Record<string, unknown> = {};
    let first = true;
    while (!this.eat(close)) {
      if (!first) this.expect(',');
      first = false;
      if (this.eat(close)) break;
      const k = this.key();
      this.expect(sep);
      out[k] = this.value();
    }
    return out;
  }
}

/** `call:name{...}<close>` after an open marker: the name when `{` is reached, the args at the close. */
function scanCallSyntax(region: string, open: string, close: string, quote: string, final: boolean): RegionScan {
  const at = skipWs(region, open.length);
  const rest = region.slice(at);
  if (!rest.startsWith('call:')) {
    return !final && 'call:'.startsWith(rest) ? { calls: [], end: null } : { calls: [], end: null, invalid: true };
  }
  const m = /^call:([A-Za-z0-9_.-]+)\s*(\{)?/.exec(rest);
  if (!m || !m[2]) {
    const partial = /^call:[A-Za-z0-9_.-]*\s*$/.test(rest);
    return partial && !final ? { calls: [], end: null } : { calls: [], end: null, invalid: true };
  }
  const name = m[1]!;
  const body = at + m[0].length - 1; // at the `{`
  const closeAt = region.indexOf(close, body);
  if (closeAt < 0) {
    if (!final) return { calls: [{ name, args: '', done: false }], end: null };
    return { calls: [{ name, args: '', done: true, broken: true }], end: region.length };
  }
  try {
    const r = new ArgReader(region.slice(body, closeAt), quote);
    const args = r.object('{', '}', ':');
    r.ws();
    if (r.i !== r.s.length) throw new SyntaxErr('text after the arguments');
    return { calls: [{ name, args: JSON.stringify(args), done: true }], end: closeAt + close.length };
  } catch {
    return { calls: [{ name, args: '', done: true, broken: true }], end: closeAt + close.length };
  }
}

/** Python calls `name(k=v, ...)`, one per line or as a `[a(...), b(...)]` list. */
function parsePythonCalls(code: string): ScannedCall[] | null {
  let src = code.trim();
  if (src.startsWith('[') && src.endsWith(']')) src = src.slice(1, -1);
  const r = new ArgReader(src, null);
  const calls: ScannedCall[] = [];
  try {
    for (;;) {
      r.ws();
      if (r.i >= src.length) break;
      if (calls.length > 0) r.eat(',');
      r.ws();
      const m = /^(?:print\()?([A-Za-z_][A-Za-z0-9_.]*)\s*(?=\()/.exec(src.slice(r.i));
      if (!m) return null;
      const wrapped = m[0].startsWith('print(');
      r.i += m[0].length;
      const args = r.object('(', ')', '=');
      if (wrapped) r.expect(')');
      calls.push({ name: m[1]!, args: JSON.stringify(args), done: true });
    }
  } catch {
    return null;
  }
  return calls.length > 0 ? calls : null;
}

/** A fenced block: nothing until the closing fence, then every call in it (or not a call at all). */
function scanFence(region: string, open: string, final: boolean, parse: (body: string) => ScannedCall[] | null): RegionScan {
  const bodyAt = open.length;
  const closeAt = region.indexOf(FENCE_END, bodyAt);
  if (closeAt < 0) {
    if (!final) return { calls: [], end: null };
    const calls = parse(region.slice(bodyAt));
    return calls ? { calls, end: region.length } : { calls: [], end: null, invalid: true };
  }
  const calls = parse(region.slice(bodyAt, closeAt));
  return calls ? { calls, end: closeAt + FENCE_END.length } : { calls: [], end: null, invalid: true };
}

function parseJsonCalls(body: string): ScannedCall[] | null {
  const s = scanCallSequence(body, 0, true, ';');
  if (s.invalid || s.end === null || s.calls.some((c) => !c.done || c.broken)) return null;
  return skipWs(body, s.end) === body.length ? s.calls : null;
}

/** Gemma 3 (text conventions; its tokenizer has no tool tokens to keep). */
export const gemmaFormat: ToolCallFormat = {
  name: 'gemma',
  needsSpecialTokens: false,
  markers: [{ text: FG_OPEN }, { text: G4_OPEN }, { text: CODE_FENCE }, { text: CALL_FENCE }, { text: '{', startOnly: true }],
  scan(region: string, final: boolean): RegionScan {
    if (region.startsWith(FG_OPEN)) return scanCallSyntax(region, FG_OPEN, FG_CLOSE, '<escape>', final);
    if (region.startsWith(G4_OPEN)) return scanCallSyntax(region, G4_OPEN, G4_CLOSE, '<|"|>', final);
    if (region.startsWith(CODE_FENCE)) return scanFence(region, CODE_FENCE, final, (b) => parsePythonCalls(b) ?? parseJsonCalls(b));
    if (region.startsWith(CALL_FENCE)) return scanFence(region, CALL_FENCE, final, parseJsonCalls);
    return scanCallSequence(region, 0, final, ';');
  },
};


/** FunctionGemma and Gemma 4: the same parser, with the special tokens its markers are kept in the text. */
export const gemmaCallTokensFormat: ToolCallFormat = { ...gemmaFormat, name: 'gemma4', needsSpecialTokens: true };
