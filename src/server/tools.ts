// tools + tool_choice of a chat request. "required" and a named function are grammar-constrained:
// the output is one JSON object {"name", "arguments"} valid against the function's parameters,
// returned as a tool call. "auto" (the default with tools) parses the model's own format
// (tool-parsers/) into calls. "none" generates text. Also: assistant tool_calls and role "tool"
// messages checked and shaped for chat templates (arguments as objects, as HF templates expect).
import { randomUUID } from 'node:crypto';
import { InvalidRequestError } from '../errors/request-errors.js';
import type { ResponseFormat } from './response-format.js';
import { checkJsonDepth, checkSchemaLimits } from '../engine/grammar/schema-limits.js';
import { checkSchemaSupported } from '../engine/grammar/schema-support.js';
import { badRequest } from './http-errors.js';
import type { ChatMessage } from '../template/chat-template.js';
import { detectToolFormat, toolFormatByName } from './tool-parsers/registry.js';
import type { ToolCallFormat } from './tool-parsers/types.js';
import { isObject } from '../engine/is-object.js';

export interface ToolFunction {
  name: string;
  description?: string;
  parameters: Record<string, unknown>;
}

export interface ToolRequest {
  /** The tools in OpenAI's shape, for the chat template. */
  templateTools: unknown[];
  /** The grammar that forces a call (required / named); absent for auto. */
  format?: ResponseFormat;
  /** The functions a forced call may name (for a call cut by max_tokens); absent for auto. */
  forcedNames?: string[];
  /** auto: the model's own tool-call format, parsed from its output. */
  auto?: ToolCallFormat;
  /** parallel_tool_calls=false: 1. */
  maxCalls: number;
}

export interface ToolRequestOptions {
  /** The request's parallel_tool_calls field (unchecked). */
  parallelToolCalls?: unknown;
  /** The served model's format name (tool-parsers/registry.ts); hermes when unknown. */
  formatName?: string;
}

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

function parseTools(raw: unknown): (ToolFunction & { index: number })[] {
  if (!Array.isArray(raw)) throw badRequest('tools must be an array', 'tools', 'invalid_type');
  return raw.map((t, i) => {
    const at = `tools[${i}]`;
    if (!isObject(t) || t.type !== 'function' || !isObject(t.function)) throw badRequest(`${at} must be {"type": "function", "function": {...}}`, at, 'invalid_value');
    const f = t.function;
    if (typeof f.name !== 'string' || !/^[a-zA-Z0-9_-]{1,64}$/.test(f.name)) throw badRequest(`${at}.function.name must match ^[a-zA-Z0-9_-]{1,64}$`, `${at}.function.name`, 'invalid_value');
    const parameters = f.parameters ?? { type: 'object', properties: {} };
    if (!isObject(parameters)) throw badRequest(`${at}.function.parameters must be a JSON Schema object`, `${at}.function.parameters`, 'invalid_type');
    // Arguments are a JSON object (as OpenAI requires); a schema without a type gets type object in callSchema.
    if (parameters.type !== undefined && parameters.type !== 'object') {
      throw badRequest(`${at}.function.parameters.type must be "object" (arguments are a JSON object), got ${JSON.stringify(parameters.type)}`, `${at}.function.parameters.type`, 'invalid_value');
    }
    // Every tool's, forced or not: the chat template and the grammar walk them recursively.
    try {
      checkSchemaLimits(parameters, `${at}.function.parameters`);
    } catch (err) {
      if (err instanceof InvalidRequestError) throw badRequest(err.message, `${at}.function.parameters`, 'schema_limit');
      throw err;
    }
    return { name: f.name, description: typeof f.description === 'string' ? f.description : undefined, parameters, index: i };
  });
}

/** A forced call is grammar-constrained: its parameters must be in the subset the grammar enforces. */
function checkForcedParameters(f: ToolFunction & { index?: number }): void {
  const at = `tools[${f.index ?? 0}]`;
  try {
    checkSchemaSupported(f.parameters);
  } catch (err) {
    if (err instanceof InvalidRequestError) throw badRequest(`${at}.function.parameters: ${err.message.replace(/^response_format\.json_schema\.schema/, '')}`, `${at}.function.parameters`, 'unsupported_schema');
    throw err;
  }
}

/** {"name", "arguments"}; arguments always an object: `parameters: {}` alone would admit any JSON value. */
function callSchema(f: ToolFunction): Record<string, unknown> {
  const args = f.parameters.type === undefined ? { ...f.parameters, type: 'object' } : f.parameters;
  return { type: 'object', properties: { name: { const: f.name }, arguments: args }, required: ['name', 'arguments'], additionalProperties: false };
}

/** null when tools play no part (no tools, or tool_choice "none"). Throws HttpError 400. */
export function parseToolRequest(tools: unknown, toolChoice: unknown, opts: ToolRequestOptions = {}): ToolRequest | null {
  const list = tools === undefined || tools === null ? [] : parseTools(tools);
  const choice = toolChoice ?? (list.length > 0 ? 'auto' : 'none');
  const parallel = opts.parallelToolCalls;
  if (parallel !== undefined && parallel !== null && typeof parallel !== 'boolean') throw badRequest('parallel_tool_calls must be a boolean', 'parallel_tool_calls', 'invalid_type');
  if (choice === 'none') return null;
  if (list.length === 0) throw badRequest('tool_choice needs tools', 'tool_choice', 'invalid_value');
  const templateTools = list.map((f) => ({ type: 'function', function: { name: f.name, ...(f.description ? { description: f.description } : {}), parameters: f.parameters } }));
  const maxCalls = parallel === false ? 1 : Infinity;
  let picked: ToolFunction[];
  if (choice === 'required') picked = list;
  else if (choice === 'auto') {
    const auto = toolFormatByName(opts.formatName ?? detectToolFormat(null));
    if (!auto) throw new Error(`unknown tool-call format ${opts.formatName}`);
    return { templateTools, auto, maxCalls };
  } else if (isObject(choice) && choice.type === 'function' && isObject(choice.function) && typeof choice.function.name === 'string') {
    const name = choice.function.name;
    const f = list.find((t) => t.name === name);
    if (!f) throw badRequest(`tool_choice names "${name}", which is not in tools`, 'tool_choice', 'invalid_value');
    picked = [f];
  } else throw badRequest('tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}', 'tool_choice', 'invalid_value');
  picked.forEach(checkForcedParameters);
  const schema = picked.length === 1 ? callSchema(picked[0]!) : { anyOf: picked.map(callSchema) };
  return { templateTools, format: { type: 'json_schema', name: 'tool_call', schema, strict: true }, forcedNames: picked.map((f) => f.name), maxCalls };
}

function textOf(content: ChatMessage['content']): string {
  if (content === null) return '';
  if (typeof content === 'string') return content;
  return content.map((p) => p.text ?? '').join('');
}

/**
 * Checks the tool parts of a conversation and shapes them for chat templates: an assistant
 * message's tool_calls get their arguments as objects (the Qwen/Hermes/Llama templates apply
 * `tojson` to them), and a "tool" message must answer a call of the assistant message before it,
 * by tool_call_id; its content becomes plain text and it gets the function's name.
 */
export function prepareToolMessages(messages: ChatMessage[]): ChatMessage[] {
  let open = new Map<string, string>(); // id -> name, of the latest assistant message's calls
  return messages.map((m, i) => {
    const where = `messages[${i}]`;
    if (m.role === 'assistant') {
      const raw = m.tool_calls;
      if (raw === undefined || raw === null) {
        open = new Map();
        if (m.content === null) throw badRequest(`${where} needs content or tool_calls`, `${where}.content`, 'invalid_value');
        return m;
      }
      if (!Array.isArray(raw)) throw badRequest(`${where}.tool_calls must be an array`, `${where}.tool_calls`, 'invalid_type');
      open = new Map();
      const calls = raw.map((c: unknown, j) => {
        const at = `${where}.tool_calls[${j}]`;
        if (!isObject(c) || (c.type !== undefined && c.type !== 'function') || !isObject(c.function)) {
          throw badRequest(`${at} must be {"id": ..., "type": "function", "function": {"name": ..., "arguments": "<JSON object>"}}`, at, 'invalid_value');
        }
        const f = c.function;
        if (typeof f.name !== 'string' || f.name.length === 0) throw badRequest(`${at}.function.name must be a non-empty string`, `${at}.function.name`, 'invalid_value');
        let args: unknown = f.arguments ?? {};
        if (typeof args === 'string') {
          try {
            args = JSON.parse(args.trim() === '' ? '{}' : args);
          } catch {
            throw badRequest(`${at}.function.arguments must be a JSON object encoded as a string; got ${JSON.stringify(f.arguments).slice(0, 80)}`, `${at}.function.arguments`, 'invalid_value');
          }
        }
        if (!isObject(args)) throw badRequest(`${at}.function.arguments must encode a JSON object`, `${at}.function.arguments`, 'invalid_value');
        try {
          checkJsonDepth(args, `${at}.function.arguments`); // the template's tojson recurses over it
        } catch (err) {
          if (err instanceof InvalidRequestError) throw badRequest(err.message, `${at}.function.arguments`, 'invalid_value');
          throw err;
        }
        if (c.id !== undefined && typeof c.id !== 'string') throw badRequest(`${at}.id must be a string`, `${at}.id`, 'invalid_type');
        const id = typeof c.id === 'string' ? c.id : `call_${i}_${j}`;
        open.set(id, f.name);
        return { id, type: 'function', function: { name: f.name, arguments: args } };
      });
      return { ...m, tool_calls: calls };
    }
    if (m.role === 'tool') {
      if (open.size === 0) throw badRequest(`${where} (role "tool") must follow an assistant message with tool_calls`, where, 'invalid_value');
      const id = m.tool_call_id;
      if (typeof id !== 'string') throw badRequest(`${where}.tool_call_id is required: the id of the call this message answers`, `${where}.tool_call_id`, 'missing_field');
      const name = open.get(id);
      if (name === undefined) {
        throw badRequest(`${where}.tool_call_id "${id}" matches no call of the preceding assistant message (ids: ${[...open.keys()].join(', ')})`, `${where}.tool_call_id`, 'invalid_value');
      }
      return { ...m, content: textOf(m.content), name: typeof m.name === 'string' ? m.name : name };
    }
    if (m.role === 'user' || m.role === 'system') open = new Map();
    return m;
  });
}

const callId = () => `call_${randomUUID().replace(/-/g, '').slice(0, 24)}`;

/** The tool call in a constrained output ({"name", "arguments"}); null if it does not parse. */
export function toolCallFrom(text: string): ToolCall | null {
  try {
    const v = JSON.parse(text) as unknown;
    if (!isObject(v) || typeof v.name !== 'string') return null;
    return { id: callId(), type: 'function', function: { name: v.name, arguments: JSON.stringify(v.arguments ?? {}) } };
  } catch {
    return null;
  }
}

/**
 * A forced call that max_tokens cut short (`{"name": "get_wea` or `{"name": "f", "arguments": {"city": "Os`):
 * the name when it was written out or only one of `names` can still be it, and the arguments as the
 * text produced so far, as OpenAI returns a cut call (possibly not valid JSON; nothing is made up).
 * Null when the name is still undecided.
 */
export function truncatedToolCall(text: string, names: readonly string[]): ToolCall | null {
  // The grammar writes name first, then arguments (the schema's order), with optional whitespace.
  const m = /^\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)(")?/.exec(text);
  let name: string | undefined;
  if (m?.[2] !== undefined) {
    try {
      name = JSON.parse(`"${m[1]}"`) as string;
    } catch {
      return null;
    }
  } else {
    const prefix = m?.[1] ?? '';
    const left = names.filter((n) => n.startsWith(prefix));
    if (left.length === 1) name = left[0];
  }
  if (name === undefined) return null;
  const a = /"arguments"\s*:\s*/.exec(text.slice(m?.[0].length ?? 0));
  // Without the wrapper's closing brace, arguments that were finished are a whole JSON object.
  const args = a ? text.slice((m?.[0].length ?? 0) + a.index + a[0].length).trimEnd() : '';
  return { id: callId(), type: 'function', function: { name, arguments: args } };
}
