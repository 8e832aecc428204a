// Llama 3.1/3.2/3.3 JSON tool calls: the whole reply is `{"name": ..., "parameters": {...}}`
// (optionally after `<|python_tag|>`), several separated by `;`. Only at the start of the output,
// as vLLM's llama3_json parser does: a `{` later in a reply is content.
import { scanCallObject, skipWs } from './json-call.js';
import type { RegionScan, ScannedCall, ToolCallFormat } from './types.js';

const TAG = '<|python_tag|>';

/** Call objects separated by `;` from `start` (shared with the Gemma bare-JSON convention). */
export function scanCallSequence(region: string, start: number, final: boolean, separator: string): RegionScan {
  const calls: ScannedCall[] = [];
  let i = start;
  for (;;) {
    i = skipWs(region, i);
    if (i >= region.length) {
      if (calls.length === 0) return final ? { calls, end: null, invalid: true } : { calls, end: null };
      return { calls, end: final ? i : null };
    }
    const obj = scanCallObject(region, i, final);
    if (obj.invalid) return calls.length > 0 ? { calls, end: i } : { calls, end: null, invalid: true };
    if (obj.call) calls.push(obj.call);
    if (obj.end < 0) return { calls, end: null };
    const j = skipWs(region, obj.end);
    if (j >= region.length) return { calls, end: final ? obj.end : null };
    if (region[j] !== separator) return { calls, end: obj.end };
    i = j + 1;
  }
}

export const llama3JsonFormat: ToolCallFormat = {
  name: 'llama3_json',
  needsSpecialTokens: false,
  markers: [{ text: '{', startOnly: true }, { text: TAG, startOnly: true }],
  scan(region: string, final: boolean): RegionScan {
    return scanCallSequence(region, region.startsWith(TAG) ? TAG.length : 0, final, ';');
  },
};
