// Which tool-call format a model writes: from its chat template (the tokens it renders calls
// with), else from its architecture family. Hermes (Qwen) is the fallback: it is what most
// open chat templates teach, and its marker never appears in ordinary text.
import { gemmaCallTokensFormat, gemmaFormat } from './gemma.js';
import { hermesFormat } from './hermes.js';
import { llama3JsonFormat } from './llama3-json.js';
import { mistralFormat } from './mistral.js';
import type { ToolCallFormat } from './types.js';

export const TOOL_FORMATS: Readonly<Record<string, ToolCallFormat>> = {
  hermes: hermesFormat,
  mistral: mistralFormat,
  llama3_json: llama3JsonFormat,
  gemma: gemmaFormat,
  gemma4: gemmaCallTokensFormat,
};

export function toolFormatByName(name: string): ToolCallFormat | undefined {
  return TOOL_FORMATS[name];
}

/**
 * The format name for a chat template source, the tokenizer's vocabulary (`hasToken`: whether a
 * token with that exact text exists; templates shipped without tool support still have the
 * tokens) and an architecture family ("qwen2", "gemma3", ...), in that order of evidence.
 */
export function detectToolFormat(template: string | null | undefined, family?: string, hasToken?: (text: string) => boolean): string {
  const t = template ?? '';
  if (t.includes('[TOOL_CALLS]')) return 'mistral';
  if (t.includes('<|tool_call>') || t.includes('<start_function_call>')) return 'gemma4';
  if (t.includes('<tool_call>')) return 'hermes';
  if (t.includes('<|python_tag|>') || (t.includes('<|start_header_id|>') && t.includes('"parameters"'))) return 'llama3_json';
  if (hasToken) {
    if (hasToken('[TOOL_CALLS]')) return 'mistral';
    if (hasToken('<|tool_call>') || hasToken('<start_function_call>')) return 'gemma4';
    if (hasToken('<tool_call>')) return 'hermes';
    if (hasToken('<|python_tag|>')) return 'llama3_json';
  }
  const f = (family ?? '').toLowerCase();
  if (f.startsWith('mistral') || f.startsWith('mixtral')) return 'mistral';
  if (f.startsWith('gemma')) return 'gemma';
  if (f.startsWith('llama')) return 'llama3_json';
  return 'hermes';
}
