// tools + tool_choice of a chat request. "required" and a named function are grammar-constrained:
// the output is one JSON object {"name", "arguments"} valid against the function's parameters,
// returned as a tool call. "none" generates text. "auto" (model-format parsing) is not done yet.
import { randomUUID } from 'node:crypto';
import { InvalidRequestError } from '../engine/errors.js';
import type { ResponseFormat } from '../engine/grammar/response-format.js';
import { checkSchemaSupported } from '../engine/grammar/schema-support.js';
import { badRequest } from './http-errors.js';

export interface ToolFunction {
  name: string;
  description?: string;
  parameters: Record<string, unknown>;
}

export interface ToolRequest {
  /** The tools in OpenAI's shape, for the chat template. */
  templateTools: unknown[];
  /** The grammar that forces a call (required / named). */
  format: ResponseFormat;
}

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function parseTools(raw: unknown): ToolFunction[] {
  if (!Array.isArray(raw)) throw badRequest('tools must be an array', 'tools', 'invalid_type');
  return raw.map((t, i) => {
    const at = `tools[${i}]`;
    if (!isObject(t) || t.type !== 'function' || !isObject(t.function)) throw badRequest(`${at} must be {"type": "function", "function": {...}}`, at, 'invalid_value');
    const f = t.function;
    if (typeof f.name !== 'string' || !/^[a-zA-Z0-9_-]{1,64}$/.test(f.name)) throw badRequest(`${at}.function.name must match ^[a-zA-Z0-9_-]{1,64}$`, `${at}.function.name`, 'invalid_value');
    const parameters = f.parameters ?? { type: 'object', properties: {} };
    if (!isObject(parameters)) throw badRequest(`${at}.function.parameters must be a JSON Schema object`, `${at}.function.parameters`, 'invalid_type');
    try {
      checkSchemaSupported(parameters);
    } catch (err) {
      if (err instanceof InvalidRequestError) throw badRequest(`${at}.function.parameters: ${err.message.replace(/^response_format\.json_schema\.schema/, '')}`, `${at}.function.parameters`, 'unsupported_schema');
      throw err;
    }
    return { name: f.name, description: typeof f.description === 'string' ? f.description : undefined, parameters };
  });
}

function callSchema(f: ToolFunction): Record<string, unknown> {
  return { type: 'object', properties: { name: { const: f.name }, arguments: f.parameters }, required: ['name', 'arguments'], additionalProperties: false };
}

/** null when no call is forced (no tools, or tool_choice "none"). Throws HttpError 400. */
export function parseToolRequest(tools: unknown, toolChoice: unknown): ToolRequest | null {
  const list = tools === undefined || tools === null ? [] : parseTools(tools);
  const choice = toolChoice ?? (list.length > 0 ? 'auto' : 'none');
  if (choice === 'none') return null;
  if (list.length === 0) throw badRequest('tool_choice needs tools', 'tool_choice', 'invalid_value');
  let picked: ToolFunction[];
  if (choice === 'required') picked = list;
  else if (choice === 'auto') {
    throw badRequest('tool_choice "auto" is not supported yet: pass "required", "none" or {"type": "function", "function": {"name": ...}}', 'tool_choice', 'unsupported');
  } else if (isObject(choice) && choice.type === 'function' && isObject(choice.function) && typeof choice.function.name === 'string') {
    const name = choice.function.name;
    const f = list.find((t) => t.name === name);
    if (!f) throw badRequest(`tool_choice names "${name}", which is not in tools`, 'tool_choice', 'invalid_value');
    picked = [f];
  } else throw badRequest('tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}', 'tool_choice', 'invalid_value');
  const schema = picked.length === 1 ? callSchema(picked[0]!) : { anyOf: picked.map(callSchema) };
  const templateTools = list.map((f) => ({ type: 'function', function: { name: f.name, ...(f.description ? { description: f.description } : {}), parameters: f.parameters } }));
  return { templateTools, format: { type: 'json_schema', name: 'tool_call', schema, strict: true } };
}

/** The tool call in a constrained output ({"name", "arguments"}); null if it does not parse. */
export function toolCallFrom(text: string): ToolCall | null {
  try {
    const v = JSON.parse(text) as unknown;
    if (!isObject(v) || typeof v.name !== 'string') return null;
    return { id: `call_${randomUUID().replace(/-/g, '').slice(0, 24)}`, type: 'function', function: { name: v.name, arguments: JSON.stringify(v.arguments ?? {}) } };
  } catch {
    return null;
  }
}
