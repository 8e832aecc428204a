// An Anthropic Messages request (POST /v1/messages, /v1/messages/count_tokens) translated into the
// chat/completions body that validate.ts already parses: system into a system message, content
// blocks into OpenAI parts, tool_use / tool_result into tool_calls / tool messages, tools and
// tool_choice into OpenAI's, thinking into the template's enable_thinking. Only the Anthropic shape
// is checked here (with Anthropic paths in the messages); everything else is parseChatRequest's,
// and its error paths are mapped back onto the Anthropic request (translatedPath).
import { badRequest } from '../http-errors.js';
import { isObject } from '../../engine/is-object.js';

type Body = Record<string, unknown>;

/** Fields of Anthropic's request that rapid applies. */
const APPLIED = new Set([
  'model', 'max_tokens', 'messages', 'system', 'stop_sequences', 'stream', 'temperature', 'top_p', 'top_k', 'tools',
  'tool_choice', 'thinking', 'output_config',
]);
/** Fields of Anthropic's request that have no local meaning: accepted and ignored. */
const IGNORED = new Set([
  'metadata', 'service_tier', 'container', 'context_management', 'mcp_servers', 'cache_control', 'inference_geo', 'speed', 'diagnostics',
]);

export interface TranslatedRequest {
  /** A /v1/chat/completions body for parseChatRequest. */
  chat: Body;
  /** Request fields that were accepted but not applied (Anthropic's own, or unknown), for a log line. */
  ignored: string[];
  /** Maps a path in `chat` (validate.ts, images.ts) onto the Anthropic request. */
  translatedPath(path: string): string;
}

/** Where each chat message came from: the Anthropic message index and, per chat part, its block index. */
interface Origin {
  message: number | 'system';
  /** Block index of each chat content part (or of the tool_result a tool message came from). */
  blocks: number[];
  tool?: boolean;
}

const fieldError = (path: string, what: string, code = 'invalid_value') => badRequest(`${path}: ${what}`, path, code);

function str(v: unknown, path: string): string {
  if (typeof v !== 'string') throw fieldError(path, 'must be a string', 'invalid_type');
  return v;
}

/** `max_tokens` is required only for a generation; count_tokens has none. */
export function translateMessagesRequest(raw: unknown, kind: 'create' | 'count'): TranslatedRequest {
  if (!isObject(raw)) throw badRequest('the request body must be a JSON object', null, 'invalid_body');
  const body = raw;
  const ignored = Object.keys(body).filter((k) => !APPLIED.has(k) && body[k] !== undefined);
  const chat: Body = {};
  if (body.model !== undefined) chat.model = body.model;
  if (kind === 'create') {
    if (body.max_tokens === undefined || body.max_tokens === null) throw badRequest('max_tokens: Field required', 'max_tokens', 'missing_field');
    chat.max_tokens = body.max_tokens; // type and range: validate.ts
    for (const k of ['temperature', 'top_p', 'top_k', 'stream'] as const) if (body[k] !== undefined) chat[k] = body[k];
    if (body.stop_sequences !== undefined && body.stop_sequences !== null) {
      const s = body.stop_sequences;
      if (!Array.isArray(s) || !s.every((x) => typeof x === 'string')) throw fieldError('stop_sequences', 'must be an array of strings', 'invalid_type');
      chat.stop = s;
    }
  } // count_tokens: only what shapes the prompt counts; sampling fields a client sends along are dropped
  const origins: Origin[] = [];
  const messages: Body[] = [];
  const system = systemText(body.system);
  if (system !== null) {
    messages.push({ role: 'system', content: system });
    origins.push({ message: 'system', blocks: [] });
  }
  if (!Array.isArray(body.messages) || body.messages.length === 0) throw badRequest('messages: must be a non-empty array', 'messages', 'invalid_type');
  body.messages.forEach((m: unknown, i) => translateMessage(m, i, messages, origins));
  chat.messages = messages;
  const tools = translateTools(body.tools);
  if (tools) chat.tools = tools;
  const choice = translateToolChoice(body.tool_choice);
  // "auto" or "none" without tools asks for nothing: plain text, as Anthropic answers it.
  const idle = choice.choice === 'auto' || choice.choice === 'none';
  if (choice.choice !== undefined && !(idle && (tools?.length ?? 0) === 0)) chat.tool_choice = choice.choice;
  if (choice.parallel === false) chat.parallel_tool_calls = false;
  // Anthropic thinks only when asked: without `thinking`, a thinking model's switch is off, so clients
  // that read content[0].text get text.
  chat.chat_template_kwargs = { enable_thinking: thinkingSwitch(body.thinking) ?? false };
  const format = outputFormat(body.output_config);
  if (format && kind === 'create') chat.response_format = format;
  return { chat, ignored, translatedPath: (p) => mapPath(p, origins) };
}

/** Whether a field name is Anthropic's (ignored quietly) rather than unknown. */
export function isKnownIgnoredField(name: string): boolean {
  return IGNORED.has(name);
}

function systemText(system: unknown): string | null {
  if (system === undefined || system === null) return null;
  if (typeof system === 'string') return system;
  if (!Array.isArray(system)) throw fieldError('system', 'must be a string or an array of text blocks', 'invalid_type');
  return system
    .map((b: unknown, j) => {
      if (!isObject(b) || b.type !== 'text') throw fieldError(`system[${j}]`, 'must be a text block {"type": "text", "text": ...}', 'invalid_type');
      return str(b.text, `system[${j}].text`);
    })
    .join('\n');
}

/** One Anthropic message into one or more chat messages: tool_result blocks become tool messages first. */
function translateMessage(m: unknown, i: number, out: Body[], origins: Origin[]): void {
  const at = `messages[${i}]`;
  if (!isObject(m)) throw fieldError(at, 'must be an object with role and content', 'invalid_type');
  if (m.role !== 'user' && m.role !== 'assistant') throw fieldError(`${at}.role`, 'must be "user" or "assistant" (system goes in the top-level system field)');
  const role = m.role;
  if (typeof m.content === 'string') {
    out.push({ role, content: m.content });
    origins.push({ message: i, blocks: [] });
    return;
  }
  if (!Array.isArray(m.content)) throw fieldError(`${at}.content`, 'must be a string or an array of content blocks', 'invalid_type');
  const parts: Body[] = [];
  const blocks: number[] = [];
  const calls: Body[] = [];
  const toolImages: { part: Body; block: number }[] = [];
  m.content.forEach((b: unknown, j) => {
    const where = `${at}.content[${j}]`;
    if (!isObject(b) || typeof b.type !== 'string') throw fieldError(where, 'must be a content block with a type', 'invalid_type');
    switch (b.type) {
      case 'text':
        parts.push({ type: 'text', text: str(b.text, `${where}.text`) });
        blocks.push(j);
        return;
      case 'image':
        if (role !== 'user') break;
        parts.push(imagePart(b, where));
        blocks.push(j);
        return;
      case 'thinking':
      case 'redacted_thinking':
        return; // earlier turns' reasoning is not part of the prompt (chat templates drop it too)
      case 'tool_use': {
        if (role !== 'assistant') break;
        const id = str(b.id, `${where}.id`);
        const name = str(b.name, `${where}.name`);
        if (!isObject(b.input)) throw fieldError(`${where}.input`, 'must be an object', 'invalid_type');
        calls.push({ id, type: 'function', function: { name, arguments: JSON.stringify(b.input) } });
        return;
      }
      case 'tool_result': {
        if (role !== 'user') break;
        const id = str(b.tool_use_id, `${where}.tool_use_id`);
        const { text, images } = toolResultContent(b.content, `${where}.content`);
        out.push({ role: 'tool', tool_call_id: id, content: b.is_error === true ? `Error: ${text}` : text });
        origins.push({ message: i, blocks: [j], tool: true });
        for (const part of images) toolImages.push({ part, block: j });
        return;
      }
    }
    throw fieldError(`${where}.type`, `"${b.type}" blocks are not supported in ${role} messages here`, 'unsupported');
  });
  // Images a tool returned go to the model in the user turn that carried the results.
  const allParts = [...toolImages.map((t) => t.part), ...parts];
  const allBlocks = [...toolImages.map((t) => t.block), ...blocks];
  if (role === 'assistant') {
    if (parts.length === 0 && calls.length === 0) return; // only thinking: nothing to render
    const text = parts.map((p) => p.text as string).join('\n');
    out.push(calls.length > 0 ? { role, content: text.length > 0 ? text : null, tool_calls: calls } : { role, content: text });
    origins.push({ message: i, blocks: [] });
    return;
  }
  if (allParts.length > 0) {
    // Text alone is a string: chat templates print a list of parts as it is.
    const textOnly = allParts.every((p) => p.type === 'text');
    out.push({ role, content: textOnly ? allParts.map((p) => p.text as string).join('\n') : allParts });
    origins.push({ message: i, blocks: allBlocks });
  } else if (m.content.length === 0) throw fieldError(`${at}.content`, 'must not be empty');
}

/** An image block as an OpenAI image_url part (images.ts loads it: data: URIs always, URLs if allowed). */
function imagePart(b: Body, where: string): Body {
  const s = b.source;
  if (!isObject(s)) throw fieldError(`${where}.source`, 'must be {"type": "base64", "media_type", "data"} or {"type": "url", "url"}', 'invalid_type');
  if (s.type === 'base64') {
    const media = str(s.media_type, `${where}.source.media_type`);
    if (!/^image\/[a-z0-9.+-]+$/i.test(media)) throw fieldError(`${where}.source.media_type`, `must be an image type such as image/png, got ${JSON.stringify(media).slice(0, 60)}`);
    return { type: 'image_url', image_url: { url: `data:${media};base64,${str(s.data, `${where}.source.data`)}` } };
  }
  if (s.type === 'url') return { type: 'image_url', image_url: { url: str(s.url, `${where}.source.url`) } };
  throw fieldError(`${where}.source.type`, 'must be "base64" or "url"');
}

/** A tool_result's content: text (joined) and any images. */
function toolResultContent(content: unknown, where: string): { text: string; images: Body[] } {
  if (content === undefined || content === null) return { text: '', images: [] };
  if (typeof content === 'string') return { text: content, images: [] };
  if (!Array.isArray(content)) throw fieldError(where, 'must be a string or an array of text/image blocks', 'invalid_type');
  const texts: string[] = [];
  const images: Body[] = [];
  content.forEach((b: unknown, k) => {
    const at = `${where}[${k}]`;
    if (isObject(b) && b.type === 'text') texts.push(str(b.text, `${at}.text`));
    else if (isObject(b) && b.type === 'image') images.push(imagePart(b, at));
    else throw fieldError(at, 'must be a text or image block', 'unsupported');
  });
  return { text: texts.join('\n'), images };
}

function translateTools(tools: unknown): Body[] | undefined {
  if (tools === undefined || tools === null) return undefined;
  if (!Array.isArray(tools)) throw fieldError('tools', 'must be an array', 'invalid_type');
  return tools.map((t: unknown, i) => {
    const at = `tools[${i}]`;
    if (!isObject(t)) throw fieldError(at, 'must be an object {"name", "description", "input_schema"}', 'invalid_type');
    if (t.type !== undefined && t.type !== null && t.type !== 'custom') {
      throw fieldError(`${at}.type`, `server tools ("${String(t.type)}") are not available here; define a custom tool with name and input_schema`, 'unsupported');
    }
    const name = str(t.name, `${at}.name`);
    if (!isObject(t.input_schema)) throw fieldError(`${at}.input_schema`, 'must be a JSON Schema object', 'invalid_type');
    const description = t.description === undefined || t.description === null ? undefined : str(t.description, `${at}.description`);
    return { type: 'function', function: { name, ...(description !== undefined ? { description } : {}), parameters: t.input_schema } };
  });
}

function translateToolChoice(tc: unknown): { choice?: unknown; parallel?: boolean } {
  if (tc === undefined || tc === null) return {};
  if (!isObject(tc)) throw fieldError('tool_choice', 'must be an object {"type": "auto" | "any" | "tool" | "none"}', 'invalid_type');
  const d = tc.disable_parallel_tool_use;
  if (d !== undefined && d !== null && typeof d !== 'boolean') throw fieldError('tool_choice.disable_parallel_tool_use', 'must be a boolean', 'invalid_type');
  const parallel = d === true ? false : undefined;
  switch (tc.type) {
    case 'auto':
      return { choice: 'auto', parallel };
    case 'any':
      return { choice: 'required', parallel };
    case 'none':
      return { choice: 'none' };
    case 'tool':
      return { choice: { type: 'function', function: { name: str(tc.name, 'tool_choice.name') } }, parallel };
  }
  throw fieldError('tool_choice.type', 'must be "auto", "any", "tool" or "none"');
}

/** thinking.type: enabled/adaptive turn a thinking model's thinking on, disabled off. */
function thinkingSwitch(t: unknown): boolean | undefined {
  if (t === undefined || t === null) return undefined;
  if (!isObject(t)) throw fieldError('thinking', 'must be an object {"type": "enabled" | "disabled", ...}', 'invalid_type');
  if (t.budget_tokens !== undefined && (typeof t.budget_tokens !== 'number' || !Number.isInteger(t.budget_tokens) || t.budget_tokens < 0)) {
    throw fieldError('thinking.budget_tokens', 'must be a non-negative integer', 'invalid_type');
  }
  if (t.type === 'enabled' || t.type === 'adaptive') return true;
  if (t.type === 'disabled') return false;
  throw fieldError('thinking.type', 'must be "enabled", "adaptive" or "disabled"');
}

/** output_config.format {type: "json_schema", schema} constrains the text to the schema. */
function outputFormat(oc: unknown): Body | undefined {
  if (oc === undefined || oc === null) return undefined;
  if (!isObject(oc)) throw fieldError('output_config', 'must be an object', 'invalid_type');
  const f = oc.format;
  if (f === undefined || f === null) return undefined;
  if (!isObject(f) || f.type !== 'json_schema' || !isObject(f.schema)) throw fieldError('output_config.format', 'must be {"type": "json_schema", "schema": {...}}', 'invalid_value');
  return { type: 'json_schema', json_schema: { name: 'output', schema: f.schema, strict: true } };
}

/** A validate.ts / images.ts / tools.ts path (and message text) in the Anthropic request's terms. */
function mapPath(text: string, origins: Origin[]): string {
  return text
    .replace(/messages\[(\d+)\](?:\.content\[(\d+)\])?(\.tool_call_id)?/g, (whole, mi: string, pi: string | undefined, toolId: string | undefined) => {
      const o = origins[Number(mi)];
      if (!o) return whole;
      if (o.message === 'system') return 'system';
      const base = `messages[${o.message}]`;
      if (o.tool) return `${base}.content[${o.blocks[0]}]${toolId ? '.tool_use_id' : ''}`;
      if (pi === undefined) return base + (toolId ?? '');
      const b = o.blocks[Number(pi)];
      return b === undefined ? base : `${base}.content[${b}]`;
    })
    .replace(/tools\[(\d+)\]\.function\.parameters/g, 'tools[$1].input_schema')
    .replace(/tools\[(\d+)\]\.function\.name/g, 'tools[$1].name')
    .replace(/\.image_url(\.url)?\b/g, '.source')
    .replace(/response_format(\.json_schema\.schema)?/g, (_, schema: string | undefined) => (schema ? 'output_config.format.schema' : 'output_config.format'));
}
