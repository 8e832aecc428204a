// Mistral: `[TOOL_CALLS]` then either a JSON array of call objects (v0.3-era tokenizers:
// `[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`) or, from tokenizer v11 on, one call per
// marker: `[TOOL_CALLS]name[ARGS]{...}` (v13 may put `[CALL_ID]id` before `[ARGS]`). The markers are
// special tokens, kept in the text for these requests. Formats as in vLLM's mistral_tool_parser.py.
import { couldBecome, jsonValueEnd, scanCallObject, skipWs } from './json-call.js';
import type { RegionScan, ScannedCall, ToolCallFormat } from './types.js';

const OPEN = '[TOOL_CALLS]';
const ARGS = '[ARGS]';
const CALL_ID = '[CALL_ID]';

function scanArray(region: string, start: number, final: boolean): RegionScan {
  const calls: ScannedCall[] = [];
  let i = start + 1;
  for (;;) {
    i = skipWs(region, i);
    if (i >= region.length) return final ? { calls, end: calls.length > 0 ? i : null, invalid: calls.length === 0 } : { calls, end: null };
    if (region[i] === ']' && calls.length > 0) return { calls, end: i + 1 };
    const obj = scanCallObject(region, i, final);
    if (obj.invalid) return calls.length > 0 ? { calls, end: i } : { calls, end: null, invalid: true };
    if (obj.call) calls.push(obj.call);
    if (obj.end < 0) return { calls, end: null };
    i = skipWs(region, obj.end);
    if (i >= region.length) return { calls, end: final ? i : null };
    if (region[i] === ',') i++;
    else if (region[i] === ']') return { calls, end: i + 1 };
    else return { calls, end: i };
  }
}

function scanNamed(region: string, start: number, final: boolean): RegionScan {
  const m = /^[A-Za-z0-9_.-]+/.exec(region.slice(start));
  if (!m) return { calls: [], end: null, invalid: true };
  const name = m[0];
  let i = start + name.length;
  if (i >= region.length) return final ? { calls: [], end: null, invalid: true } : { calls: [], end: null };
  if (region.startsWith(CALL_ID, i)) {
    const id = /^[A-Za-z0-9]*/.exec(region.slice(i + CALL_ID.length))![0];
    i += CALL_ID.length + id.length;
  } else if (couldBecome(region, i, CALL_ID) && !final) return { calls: [], end: null };
  if (couldBecome(region, i, ARGS) && !final) return { calls: [], end: null };
  if (!region.startsWith(ARGS, i)) return { calls: [], end: null, invalid: true };
  i += ARGS.length;
  const end = jsonValueEnd(region, i, final);
  if (end === -2) return { calls: [{ name, args: '', done: true, broken: true }], end: i };
  if (end < 0) return { calls: [{ name, args: region.slice(i), done: false }], end: null };
  const args = region.slice(i, end);
  let ok = false;
  try {
    const v = JSON.parse(args) as unknown;
    ok = typeof v === 'object' && v !== null && !Array.isArray(v);
  } catch {
    ok = false;
  }
  return { calls: [{ name, args, done: true, broken: !ok }], end };
}

export const mistralFormat: ToolCallFormat = {
  name: 'mistral',
  needsSpecialTokens: true,
  markers: [{ text: OPEN }],
  scan(region: string, final: boolean): RegionScan {
    const at = skipWs(region, OPEN.length);
    if (at >= region.length) return final ? { calls: [], end: null, invalid: true } : { calls: [], end: null };
    if (region[at] === '[') return scanArray(region, at, final);
    if (region[at] === '{') {
      const obj = scanCallObject(region, at, final);
      if (obj.invalid) return { calls: [], end: null, invalid: true };
      return { calls: obj.call ? [obj.call] : [], end: obj.end < 0 ? null : obj.end };
    }
    return scanNamed(region, at, final);
  },
};
