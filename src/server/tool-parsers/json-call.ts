// Shared scanning of JSON inside model output: where a JSON value ends (while it is still being
// written), and the `{"name": ..., "arguments"|"parameters": {...}}` call object that Hermes/Qwen,
// Mistral's array form, Llama 3 JSON and the Gemma JSON convention all use.
import type { ScannedCall } from './types.js';
import { isObject } from '../../engine/is-object.js';

export const WS = /\s/;

export function skipWs(s: string, i: number): number {
  while (i < s.length && WS.test(s[i]!)) i++;
  return i;
}

/**
 * The index just past the JSON value starting at s[i], -1 if it is not finished yet, -2 if s[i]
 * cannot start a value. Strings, objects and arrays are tracked by depth and escapes; a bare
 * literal (number, true, ...) ends at the first delimiter, or at the end of `s` when `final`.
 */
export function jsonValueEnd(s: string, i: number, final: boolean): number {
  if (i >= s.length) return -1;
  const c = s[i]!;
  if (c === '{' || c === '[' || c === '"') {
    let depth = 0;
    let inString = false;
    for (let j = i; j < s.length; j++) {
      const ch = s[j]!;
      if (inString) {
        if (ch === '\\') j++;
        else if (ch === '"') {
          inString = false;
          if (depth === 0) return j + 1;
        }
        continue;
      }
      if (ch === '"') inString = true;
      else if (ch === '{' || ch === '[') depth++;
      else if (ch === '}' || ch === ']') {
        depth--;
        if (depth === 0) return j + 1;
        if (depth < 0) return -2;
      }
    }
    return -1;
  }
  if (!/[-0-9tfn]/.test(c)) return -2;
  let j = i;
  while (j < s.length && /[-+.0-9a-zA-Z]/.test(s[j]!)) j++;
  return j < s.length || final ? j : -1;
}

/** The arguments of a parsed call object as JSON text of an object; null if they are not one. */
export function argsText(v: unknown): string | null {
  if (v === undefined || v === null) return '{}';
  if (isObject(v)) return JSON.stringify(v);
  if (typeof v === 'string') {
    // Some models write the arguments as a JSON string holding the object.
    try {
      const inner = JSON.parse(v) as unknown;
      return isObject(inner) ? JSON.stringify(inner) : null;
    } catch {
      return null;
    }
  }
  return null;
}

/** A complete call object `{"name", "arguments"|"parameters"}`, or null if `v` is not one. */
export function callFromObject(v: unknown): { name: string; args: string } | null {
  if (!isObject(v) || typeof v.name !== 'string' || v.name.length === 0) return null;
  const args = argsText(v.arguments ?? v.parameters);
  return args === null ? null : { name: v.name, args };
}

// The usual key order: the name first, then the arguments object, which can then be streamed raw.
const HEADER = /^\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\{)/;

export interface CallObjectScan {
  call: ScannedCall | null;
  /** Index just past the object once it is closed; -1 while open. */
  end: number;
  /** s[i..] is not (the beginning of) a call object. */
  invalid: boolean;
}

/**
 * Scans a call object starting at s[i] (which must be `{`). With the name first, the name is
 * reported as soon as it is written and the arguments stream as raw text; otherwise the call is
 * reported whole when the object closes. A closed object that is not a call is invalid.
 */
export function scanCallObject(s: string, i: number, final: boolean): CallObjectScan {
  if (i >= s.length) return { call: null, end: -1, invalid: false };
  if (s[i] !== '{') return { call: null, end: -1, invalid: true };
  const end = jsonValueEnd(s, i, final);
  if (end === -2) return { call: null, end: -1, invalid: true };
  const head = HEADER.exec(s.slice(i));
  if (head) {
    let name: string;
    try {
      name = JSON.parse(`"${head[1]!}"`) as string;
    } catch {
      return { call: null, end: -1, invalid: true };
    }
    const argsAt = i + head[0].length;
    const argsEnd = jsonValueEnd(s, argsAt, final);
    if (argsEnd < 0) return { call: { name, args: s.slice(argsAt), done: false }, end: -1, invalid: false };
    const args = s.slice(argsAt, argsEnd);
    if (end < 0) return { call: { name, args, done: false }, end: -1, invalid: false };
    let ok = false;
    try {
      const whole = JSON.parse(s.slice(i, end)) as unknown;
      ok = callFromObject(whole) !== null && isObject(JSON.parse(args));
    } catch {
      ok = false;
    }
    return { call: { name, args, done: true, broken: !ok }, end, invalid: false };
  }
  if (end < 0) return { call: null, end: -1, invalid: false };
  let parsed: unknown;
  try {
    parsed = JSON.parse(s.slice(i, end));
  } catch {
    return { call: null, end: -1, invalid: true };
  }
  const call = callFromObject(parsed);
  if (!call) return { call: null, end: -1, invalid: true };
  return { call: { ...call, done: true }, end, invalid: false };
}

/** True when `s` (from i) could still grow into `word`. */
export function couldBecome(s: string, i: number, word: string): boolean {
  const rest = s.slice(i);
  return rest.length < word.length && word.startsWith(rest);
}
