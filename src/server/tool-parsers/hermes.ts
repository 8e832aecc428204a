// Qwen 2/2.5/3 and Hermes: each call is `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`,
// several in a row for parallel calls (the Qwen chat templates' own instruction and rendering).
import { couldBecome, scanCallObject, skipWs } from './json-call.js';
import type { RegionScan, ToolCallFormat } from './types.js';

const OPEN = '<tool_call>';
const CLOSE = '</tool_call>';

export const hermesFormat: ToolCallFormat = {
  name: 'hermes',
  needsSpecialTokens: false,
  markers: [{ text: OPEN }],
  scan(region: string, final: boolean): RegionScan {
    const at = skipWs(region, OPEN.length);
    if (at >= region.length) return final ? { calls: [], end: null, invalid: true } : { calls: [], end: null };
    const obj = scanCallObject(region, at, final);
    if (obj.invalid) return { calls: [], end: null, invalid: true };
    const calls = obj.call ? [obj.call] : [];
    if (obj.end < 0) return { calls, end: null };
    const j = skipWs(region, obj.end);
    if (region.startsWith(CLOSE, j)) return { calls, end: j + CLOSE.length };
    // Wait for the closing tag unless the text already went elsewhere (or nothing more comes).
    if (!final && (j >= region.length || couldBecome(region, j, CLOSE))) return { calls, end: null };
    return { calls, end: obj.end };
  },
};
