// A POST /v1/responses body translated into the chat request rapid already validates
// (validate.ts): input items become messages (function_call / function_call_output become
// assistant tool_calls and tool messages), flat Responses tools become chat tools, text.format
// becomes response_format. Errors from the chat parser are renamed to the Responses field at fault.
import { HttpError, badRequest } from '../http-errors.js';
import { isObject } from '../../engine/is-object.js';
import type { ResponseItem, ResponseStore } from './store.js';

type Body = Record<string, unknown>;

/** Fields of the Responses create request rapid applies. */
const APPLIED = new Set([
  'model', 'input', 'instructions', 'tools', 'tool_choice', 'parallel_tool_calls', 'text', 'max_output_tokens', 'temperature',
  'top_p', 'stream', 'store', 'previous_response_id', 'metadata', 'reasoning', 'user',
]);
/** Responses fields that would change the result in a way rapid cannot honour: a 400, not silence. */
const REFUSED: Record<string, string> = {
  conversation: 'conversations are not supported; chain responses with previous_response_id',
  prompt: 'stored prompt templates are not supported; send input and instructions',
};
/** Chat-only sampling fields rapid also takes here (vLLM accepts them on /v1/responses too). */
const PASSED = ['top_k', 'min_p', 'repetition_penalty', 'presence_penalty', 'frequency_penalty', 'seed', 'stop', 'rapid_budget_close', 'chat_template_kwargs'];

export interface ResponsesRequest {
  /** A chat/completions body for parseChatRequest. */
  chat: Body;
  /** The conversation so far in Responses items (earlier turns, then this input), for the store. */
  input: ResponseItem[];
  instructions: string | null;
  previousResponseId: string | null;
  stream: boolean;
  store: boolean;
  /** Echoed in the response object. */
  echo: {
    tools: unknown[];
    tool_choice: unknown;
    text: unknown;
    max_output_tokens: number | null;
    metadata: unknown;
    parallel_tool_calls: boolean;
    reasoning: unknown;
    user: string | null;
  };
  /** Field names accepted but not applied (to log once). */
  ignored: string[];
  /** Renames chat-request field paths in an error to this request's. */
  renameError(err: unknown): unknown;
}

interface ChatMessageOut {
  role: string;
  content: unknown;
  tool_calls?: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

/** Where each chat message (and assistant tool call) came from, for error paths. */
interface Origins {
  messages: string[];
  calls: string[][];
}

const str = (v: unknown): v is string => typeof v === 'string';
/** 404 naming the field that referred to what is not there. */
const missing = (message: string, param: string, code: string) => new HttpError(404, message, 'invalid_request_error', param, code);

export function parseResponsesRequest(raw: unknown, store: ResponseStore): ResponsesRequest {
  if (!isObject(raw)) throw badRequest('the request body must be a JSON object', null, 'invalid_body');
  const body = raw;
  const ignored: string[] = [];
  for (const key of Object.keys(body)) {
    if (body[key] === undefined || body[key] === null) continue;
    if (REFUSED[key]) throw badRequest(REFUSED[key]!, key, 'unsupported');
    if (key === 'background' && body.background === true) throw badRequest('background responses are not supported', 'background', 'unsupported');
    // The rest (include, truncation, service_tier, top_logprobs, unknown fields...): accepted, logged once.
    if (!APPLIED.has(key) && !PASSED.includes(key)) ignored.push(key);
  }

  const stream = optBool(body, 'stream') ?? false;
  const keep = optBool(body, 'store') ?? true;
  const parallel = optBool(body, 'parallel_tool_calls') ?? true;
  const instructions = body.instructions ?? null;
  if (instructions !== null && !str(instructions)) throw badRequest('instructions must be a string', 'instructions', 'invalid_type');
  const previousResponseId = body.previous_response_id ?? null;
  if (previousResponseId !== null && !str(previousResponseId)) throw badRequest('previous_response_id must be a string', 'previous_response_id', 'invalid_type');
  if (body.user !== undefined && body.user !== null && !str(body.user)) throw badRequest('user must be a string', 'user', 'invalid_type');
  if (body.metadata !== undefined && body.metadata !== null && !isObject(body.metadata)) throw badRequest('metadata must be an object', 'metadata', 'invalid_type');

  // The conversation: the previous response's input and output (not its instructions), then this input.
  let earlier: ResponseItem[] = [];
  if (previousResponseId !== null) {
    const prev = store.get(previousResponseId);
    if (!prev) throw missing(`Previous response with id '${previousResponseId}' not found (unknown, stored with store: false, or evicted)`, 'previous_response_id', 'previous_response_not_found');
    earlier = [...prev.input, ...((prev.response.output as ResponseItem[] | undefined) ?? [])];
  }
  const own = inputItems(body.input, store);
  const conversation = [...earlier, ...own.items];
  const origins: Origins = { messages: [], calls: [] };
  const messages: ChatMessageOut[] = [];
  if (instructions !== null) {
    messages.push({ role: 'system', content: instructions });
    origins.messages.push('instructions');
  }
  const firstOwn = earlier.length;
  conversation.forEach((item, i) => addItem(item, i < firstOwn ? 'previous_response_id' : own.paths[i - firstOwn]!, messages, origins));
  if (messages.length === 0) throw badRequest('input must not be empty', 'input', 'invalid_value');

  const chat: Body = { messages };
  for (const k of PASSED) if (body[k] !== undefined) chat[k] = body[k];
  if (body.model !== undefined) chat.model = body.model;
  if (body.temperature !== undefined) chat.temperature = body.temperature;
  if (body.top_p !== undefined) chat.top_p = body.top_p;
  if (body.max_output_tokens !== undefined) chat.max_completion_tokens = body.max_output_tokens;
  chat.stream = stream;
  chat.parallel_tool_calls = parallel;
  const tools = toolsOf(body.tools);
  if (tools.length > 0) chat.tools = tools;
  if (body.tool_choice !== undefined && body.tool_choice !== null) chat.tool_choice = toolChoiceOf(body.tool_choice);
  const format = formatOf(body.text);
  if (format) chat.response_format = format;
  // The chat parser maps reasoning_effort onto a thinking model's switch, as for Chat Completions.
  const effort = reasoningEffort(body.reasoning);
  if (effort !== undefined) chat.reasoning_effort = effort;

  const maxOut = body.max_output_tokens;
  return {
    chat,
    input: conversation,
    instructions: instructions as string | null,
    previousResponseId: previousResponseId as string | null,
    stream,
    store: keep,
    echo: {
      tools: Array.isArray(body.tools) ? body.tools : [],
      tool_choice: body.tool_choice ?? 'auto',
      text: isObject(body.text) ? { format: { type: 'text' }, ...body.text } : { format: { type: 'text' } },
      max_output_tokens: typeof maxOut === 'number' ? maxOut : null,
      metadata: body.metadata ?? {},
      parallel_tool_calls: parallel,
      reasoning: isObject(body.reasoning) ? { effort: null, summary: null, ...body.reasoning } : null,
      user: str(body.user) ? body.user : null,
    },
    ignored,
    renameError: (err) => renameError(err, origins),
  };
}

function optBool(body: Body, key: string): boolean | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw badRequest(`${key} must be a boolean`, key, 'invalid_type');
  return v;
}

/** input: a string (one user message) or a list of items; item_reference items resolved from the store. */
function inputItems(input: unknown, store: ResponseStore): { items: ResponseItem[]; paths: string[] } {
  if (input === undefined || input === null) return { items: [], paths: [] };
  if (str(input)) return { items: [{ type: 'message', role: 'user', content: input }], paths: ['input'] };
  if (!Array.isArray(input)) throw badRequest('input must be a string or an array of input items', 'input', 'invalid_type');
  const items: ResponseItem[] = [];
  const paths: string[] = [];
  input.forEach((item: unknown, i) => {
    const at = `input[${i}]`;
    if (!isObject(item)) throw badRequest(`${at} must be an object`, at, 'invalid_type');
    if (item.type === 'item_reference') {
      if (!str(item.id)) throw badRequest(`${at}.id must be a string`, `${at}.id`, 'invalid_type');
      const found = store.item(item.id);
      if (!found) throw missing(`Item with id '${item.id}' not found: it is not in a stored response`, `${at}.id`, 'item_not_found');
      items.push(found);
    } else items.push(item);
    paths.push(at);
  });
  return { items, paths };
}

const MESSAGE_ROLES = new Set(['user', 'system', 'developer', 'assistant']);

/** One input item onto the chat messages. */
function addItem(item: ResponseItem, at: string, messages: ChatMessageOut[], origins: Origins): void {
  const type = item.type ?? (item.role !== undefined ? 'message' : undefined);
  const last = messages[messages.length - 1];
  switch (type) {
    case 'message': {
      if (!str(item.role) || !MESSAGE_ROLES.has(item.role)) throw badRequest(`${at}.role must be one of ${[...MESSAGE_ROLES].join(', ')}`, `${at}.role`, 'invalid_value');
      messages.push({ role: item.role, content: contentOf(item.content, `${at}.content`) });
      origins.messages.push(at);
      origins.calls.push([]);
      return;
    }
    case 'function_call': {
      for (const k of ['call_id', 'name', 'arguments'] as const) {
        if (!str(item[k])) throw badRequest(`${at}.${k} must be a string`, `${at}.${k}`, 'invalid_type');
      }
      const call = { id: item.call_id as string, type: 'function' as const, function: { name: item.name as string, arguments: item.arguments as string } };
      // Calls right after assistant text (or other calls) belong to that same assistant turn.
      if (last?.role === 'assistant') {
        (last.tool_calls ??= []).push(call);
        origins.calls[messages.length - 1]!.push(at);
      } else {
        messages.push({ role: 'assistant', content: null, tool_calls: [call] });
        origins.messages.push(at);
        origins.calls.push([at]);
      }
      return;
    }
    case 'function_call_output': {
      if (!str(item.call_id)) throw badRequest(`${at}.call_id must be a string`, `${at}.call_id`, 'invalid_type');
      messages.push({ role: 'tool', tool_call_id: item.call_id, content: outputText(item.output, `${at}.output`) });
      origins.messages.push(at);
      origins.calls.push([]);
      return;
    }
    case 'reasoning':
      return; // earlier reasoning is not replayed (thinking models' templates drop it too)
    default:
      throw badRequest(
        `${at}.type ${JSON.stringify(type ?? null)} is not supported; rapid takes message, function_call, function_call_output, reasoning and item_reference items`,
        `${at}.type`,
        'unsupported',
      );
  }
}

/** Message content: a string, or parts (text-only parts joined into one string, as every chat template takes). */
function contentOf(content: unknown, at: string): unknown {
  if (str(content)) return content;
  if (!Array.isArray(content)) throw badRequest(`${at} must be a string or an array of content parts`, at, 'invalid_type');
  const parts = content.map((p: unknown, j) => {
    const pat = `${at}[${j}]`;
    if (!isObject(p) || !str(p.type)) throw badRequest(`${pat} must be a content part with a type`, pat, 'invalid_type');
    switch (p.type) {
      case 'input_text':
      case 'output_text':
      case 'text':
        if (!str(p.text)) throw badRequest(`${pat}.text must be a string`, `${pat}.text`, 'invalid_type');
        return { type: 'text', text: p.text };
      case 'refusal':
        if (!str(p.refusal)) throw badRequest(`${pat}.refusal must be a string`, `${pat}.refusal`, 'invalid_type');
        return { type: 'text', text: p.refusal };
      case 'input_image': {
        if (p.file_id !== undefined && p.file_id !== null) throw badRequest(`${pat}.file_id: file ids are not supported (there is no Files API); send image_url as a data: URI`, `${pat}.file_id`, 'unsupported');
        if (!str(p.image_url)) throw badRequest(`${pat}.image_url must be a string: a data: URI or an http(s) URL`, `${pat}.image_url`, 'invalid_type');
        return { type: 'image_url', image_url: { url: p.image_url, ...(p.detail !== undefined && p.detail !== null ? { detail: p.detail } : {}) } };
      }
      case 'input_file':
        throw badRequest(`${pat}: input_file parts are not supported`, `${pat}.type`, 'unsupported');
      default:
        throw badRequest(`unsupported content part type ${JSON.stringify(p.type)}`, `${pat}.type`, 'invalid_value');
    }
  });
  return parts.every((p) => p.type === 'text') ? parts.map((p) => (p as { text: string }).text).join('') : parts;
}

/** A function_call_output's output: a string, or input_text parts (joined). */
function outputText(output: unknown, at: string): string {
  if (str(output)) return output;
  if (Array.isArray(output)) {
    return output
      .map((p: unknown, j) => {
        if (isObject(p) && (p.type === 'input_text' || p.type === 'output_text') && str(p.text)) return p.text;
        throw badRequest(`${at}[${j}]: only input_text parts are supported in a function call output`, `${at}[${j}]`, 'unsupported');
      })
      .join('');
  }
  throw badRequest(`${at} must be a string or an array of input_text parts`, at, 'invalid_type');
}

/** Responses' flat function tools ({type, name, description, parameters, strict}) in chat's shape. */
function toolsOf(tools: unknown): unknown[] {
  if (tools === undefined || tools === null) return [];
  if (!Array.isArray(tools)) throw badRequest('tools must be an array', 'tools', 'invalid_type');
  return tools.map((t: unknown, i) => {
    const at = `tools[${i}]`;
    if (!isObject(t)) throw badRequest(`${at} must be an object`, at, 'invalid_type');
    if (t.type !== 'function') {
      throw badRequest(`${at}.type ${JSON.stringify(t.type ?? null)} is not supported: rapid runs only function tools (hosted tools such as web_search need OpenAI's servers)`, `${at}.type`, 'unsupported');
    }
    const fn: Body = { name: t.name };
    if (t.description !== undefined && t.description !== null) fn.description = t.description;
    if (t.parameters !== undefined && t.parameters !== null) fn.parameters = t.parameters;
    return { type: 'function', function: fn };
  });
}

function toolChoiceOf(choice: unknown): unknown {
  if (str(choice)) return choice; // none / auto / required, checked by the chat parser
  if (isObject(choice) && choice.type === 'function') {
    if (!str(choice.name)) throw badRequest('tool_choice.name must be a string', 'tool_choice.name', 'invalid_type');
    return { type: 'function', function: { name: choice.name } };
  }
  throw badRequest('tool_choice must be "none", "auto", "required" or {"type": "function", "name": ...}', 'tool_choice', 'invalid_value');
}

/** text.format as a chat response_format. */
function formatOf(text: unknown): Body | undefined {
  if (text === undefined || text === null) return undefined;
  if (!isObject(text)) throw badRequest('text must be an object', 'text', 'invalid_type');
  const f = text.format;
  if (f === undefined || f === null) return undefined;
  if (!isObject(f)) throw badRequest('text.format must be an object', 'text.format', 'invalid_type');
  if (f.type === 'text' || f.type === 'json_object') return { type: f.type };
  if (f.type === 'json_schema') {
    if (!isObject(f.schema)) throw badRequest('text.format.schema must be a JSON Schema object', 'text.format.schema', 'missing_field');
    const { type: _type, ...schema } = f;
    return { type: 'json_schema', json_schema: schema };
  }
  throw badRequest('text.format.type must be "text", "json_object" or "json_schema"', 'text.format.type', 'invalid_value');
}

function reasoningEffort(reasoning: unknown): string | undefined {
  if (reasoning === undefined || reasoning === null) return undefined;
  if (!isObject(reasoning)) throw badRequest('reasoning must be an object', 'reasoning', 'invalid_type');
  const e = reasoning.effort;
  if (e === undefined || e === null) return undefined;
  if (!str(e)) throw badRequest('reasoning.effort must be a string', 'reasoning.effort', 'invalid_type');
  return e;
}

// --- errors from the chat parser, in this request's terms ---

const CHAT_PATH = /messages\[(\d+)\]((?:\.tool_calls\[(\d+)\])?(?:\.[A-Za-z_]+|\[\d+\])*)|response_format((?:\.[A-Za-z_]+)*)|max_completion_tokens|tools\[(\d+)\]\.function((?:\.[A-Za-z_]+)*)|\bmessages\b/g;

/** `bare`: also the word "messages" alone (a param; in prose it stays a word). */
function renamePath(o: Origins, path: string, bare: boolean): string {
  return path.replace(CHAT_PATH, (whole, m: string | undefined, rest: string | undefined, call: string | undefined, rf: string | undefined, tool: string | undefined, toolRest: string | undefined) => {
    if (m !== undefined) {
      const k = Number(m);
      if (call !== undefined) {
        const at = o.calls[k]?.[Number(call)] ?? o.messages[k] ?? 'input';
        const tail = rest!.replace(/^\.tool_calls\[\d+\]/, '').replace(/^\.function\./, '.').replace(/^\.id\b/, '.call_id');
        return at + tail;
      }
      const at = o.messages[k] ?? 'input';
      // Chat's image_url object is a plain string (and a detail beside it) in Responses.
      return at + rest!.replace(/^\.tool_call_id\b/, '.call_id').replace(/\.image_url\.url$/, '.image_url').replace(/\.image_url\.detail$/, '.detail');
    }
    if (rf !== undefined) return 'text.format' + rf.replace(/^\.json_schema/, '');
    if (whole === 'max_completion_tokens') return 'max_output_tokens';
    if (tool !== undefined) return `tools[${tool}]${toolRest ?? ''}`;
    return bare ? 'input' : whole;
  });
}

function renameError(err: unknown, o: Origins): unknown {
  if (!(err instanceof HttpError)) return err;
  const param = err.param === null ? null : renamePath(o, err.param, true);
  const message = renamePath(o, err.message, false);
  if (param === err.param && message === err.message) return err;
  return new HttpError(err.status, message, err.type, param, err.code, err.headers);
}
