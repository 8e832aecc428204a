// OpenAI's deprecated function calling, mapped onto tools: `functions` -> tools, `function_call`
// -> tool_choice, an assistant message's `function_call` -> one tool call, and a role "function"
// message -> a role "tool" message answering the latest call of that name. Older LangChain and
// agent code still send these; the tool machinery (tools.ts) then handles them as tool calls.
import type { ChatMessage } from '../template/chat-template.js';
import { isObject } from '../engine/is-object.js';
import { badRequest, HttpError } from './http-errors.js';

const given = (v: unknown) => v !== undefined && v !== null;

/** The request's tools and tool_choice, `functions`/`function_call` folded in. Throws HttpError 400. */
export function toolsWithFunctions(body: Record<string, unknown>): { tools: unknown; toolChoice: unknown; legacy: boolean } {
  const { functions, function_call: call } = body;
  if (!given(functions)) {
    if (given(call)) throw badRequest('function_call needs functions', 'function_call', 'invalid_value');
    return { tools: body.tools, toolChoice: body.tool_choice, legacy: false };
  }
  if (given(body.tools)) throw badRequest('functions (deprecated) and tools cannot be combined: send tools only', 'functions', 'invalid_value');
  if (given(call) && given(body.tool_choice)) throw badRequest('function_call (deprecated) and tool_choice cannot be combined', 'function_call', 'invalid_value');
  if (!Array.isArray(functions)) throw badRequest('functions must be an array', 'functions', 'invalid_type');
  const tools = functions.map((f, i) => {
    if (!isObject(f)) throw badRequest(`functions[${i}] must be an object {"name", "parameters"}`, `functions[${i}]`, 'invalid_type');
    return { type: 'function', function: f };
  });
  let toolChoice: unknown;
  if (!given(call)) toolChoice = undefined;
  else if (call === 'none' || call === 'auto') toolChoice = call;
  else if (isObject(call) && typeof call.name === 'string') toolChoice = { type: 'function', function: { name: call.name } };
  else throw badRequest('function_call must be "none", "auto" or {"name": ...}', 'function_call', 'invalid_value');
  return { tools, toolChoice, legacy: true };
}

/**
 * Assistant `function_call` messages become one tool call (id `call_fn_<i>`), role "function"
 * messages answer the latest such call of their name; everything else is unchanged.
 */
export function foldFunctionMessages(messages: ChatMessage[]): ChatMessage[] {
  const lastCallId = new Map<string, string>(); // function name -> id of its latest call
  return messages.map((m, i) => {
    const where = `messages[${i}]`;
    if (m.role === 'assistant' && given(m.function_call) && !given(m.tool_calls)) {
      const fc = m.function_call;
      if (!isObject(fc) || typeof fc.name !== 'string') throw badRequest(`${where}.function_call must be {"name": ..., "arguments": "<JSON>"}`, `${where}.function_call`, 'invalid_value');
      const id = `call_fn_${i}`;
      lastCallId.set(fc.name, id);
      const { function_call: _, ...rest } = m;
      return { ...rest, tool_calls: [{ id, type: 'function', function: { name: fc.name, arguments: fc.arguments ?? '{}' } }] };
    }
    if (m.role === 'function') {
      if (typeof m.name !== 'string') throw badRequest(`${where}.name is required: the function this message answers`, `${where}.name`, 'missing_field');
      const id = lastCallId.get(m.name);
      if (id === undefined) throw badRequest(`${where} (role "function") answers "${m.name}", which no earlier assistant function_call called`, `${where}.name`, 'invalid_value');
      return { ...m, role: 'tool', tool_call_id: id };
    }
    return m;
  });
}

/** Runs the tool parsing of a request that sent `functions`: its errors name functions[i] / function_call. */
export function inFunctionTerms<T>(parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    if (!(err instanceof HttpError)) throw err;
    const rename = (s: string) => s.replace(/tools\[(\d+)\]\.function\./g, 'functions[$1].').replace(/tools\[(\d+)\]/g, 'functions[$1]').replace(/\btool_choice\b/g, 'function_call');
    throw new HttpError(err.status, rename(err.message), err.type, err.param === null ? null : rename(err.param), err.code, err.headers);
  }
}
