// The Anthropic Messages response over a generation (generation-stream.ts): the whole message, or
// its SSE events (message_start, content_block_start/delta/stop, message_delta, message_stop, ping,
// error) with one content block per run of thinking, text, or one tool call.
import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { EngineDone } from '../../engine/request.js';
import type { FinishReason, GenerationPart } from '../generation-stream.js';
import type { HttpError } from '../http-errors.js';
import type { ToolCall } from '../tools.js';
import { isObject } from '../../engine/is-object.js';
import { anthropicErrorBody } from './messages-errors.js';

export type StopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use';

export interface AnthropicUsage {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens: number;
  cache_creation_input_tokens: number;
}

export type ContentBlock =
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> };

export interface AnthropicMessage {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: ContentBlock[];
  stop_reason: StopReason | null;
  stop_sequence: string | null;
  usage: AnthropicUsage;
}

export const messageId = () => `msg_${randomUUID().replace(/-/g, '')}`;

/** Tool call ids in Anthropic's style; a client sends them back as tool_use_id. */
export const toolUseId = (callId: string) => callId.replace(/^call_/, 'toolu_');

/** Anthropic counts cached prompt tokens apart: input_tokens + cache_read_input_tokens is the prompt. */
export function anthropicUsage(done: EngineDone): AnthropicUsage {
  const cached = Math.min(done.usage.cachedTokens, done.usage.promptTokens);
  return { input_tokens: done.usage.promptTokens - cached, output_tokens: done.usage.completionTokens, cache_read_input_tokens: cached, cache_creation_input_tokens: 0 };
}

/** The stop reason, and for a stop string the one that matched (the engine's stop matcher says). */
export function stopReason(finish: FinishReason, done: EngineDone): { stop_reason: StopReason; stop_sequence: string | null } {
  if (finish === 'tool_calls') return { stop_reason: 'tool_use', stop_sequence: null };
  if (finish === 'length') return { stop_reason: 'max_tokens', stop_sequence: null };
  if (done.stopString !== null) return { stop_reason: 'stop_sequence', stop_sequence: done.stopString };
  return { stop_reason: 'end_turn', stop_sequence: null };
}

/** A call's arguments as the input object Anthropic clients expect (never a string or a number). */
export function toolInput(args: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(args);
    return isObject(v) ? v : {};
  } catch {
    return {};
  }
}

export interface MessageResult {
  id: string;
  model: string;
  reasoning: string;
  content: string | null;
  toolCalls: ToolCall[];
  stop: { stop_reason: StopReason; stop_sequence: string | null };
  usage: AnthropicUsage;
}

export function fullMessage(r: MessageResult): AnthropicMessage {
  const content: ContentBlock[] = [];
  if (r.reasoning) content.push({ type: 'thinking', thinking: r.reasoning, signature: '' });
  // Beside tool calls, whitespace alone is not a text block.
  if (r.content !== null && (r.toolCalls.length === 0 || r.content.trim() !== '')) content.push({ type: 'text', text: r.content });
  for (const c of r.toolCalls) content.push({ type: 'tool_use', id: toolUseId(c.id), name: c.function.name, input: toolInput(c.function.arguments) });
  if (content.length === 0) content.push({ type: 'text', text: '' });
  return { id: r.id, type: 'message', role: 'assistant', model: r.model, content, ...r.stop, usage: r.usage };
}

type OpenBlock = { kind: 'thinking' | 'text' } | { kind: 'tool'; call: number };

/**
 * Anthropic's SSE events for one message. Blocks open lazily as parts arrive and close when a part of
 * another kind follows; `ping` events keep a quiet stream (a long prefill) alive.
 */
export class MessageEventWriter {
  private timer: NodeJS.Timeout | undefined;
  private lastWrite = 0;
  private open: OpenBlock | null = null;
  private index = -1;
  /** Block index of each tool call by its index in the generation. */
  private readonly callBlocks = new Map<number, number>();

  constructor(
    private readonly res: ServerResponse,
    private readonly keepAliveMs: number,
  ) {}

  start(id: string, model: string, inputTokens: number): void {
    this.res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' });
    this.res.flushHeaders();
    const usage: AnthropicUsage = { input_tokens: inputTokens, output_tokens: 0, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };
    const message: AnthropicMessage = { id, type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null, usage };
    this.event('message_start', { type: 'message_start', message });
    this.event('ping', { type: 'ping' });
    if (this.keepAliveMs > 0) {
      this.timer = setInterval(() => {
        if (performance.now() - this.lastWrite >= this.keepAliveMs) this.event('ping', { type: 'ping' });
      }, Math.max(10, Math.floor(this.keepAliveMs / 2)));
      this.timer.unref();
    }
  }

  parts(parts: GenerationPart[]): void {
    for (const p of parts) {
      if (p.type === 'reasoning') {
        if (this.open?.kind !== 'thinking') this.openBlock({ kind: 'thinking' }, { type: 'thinking', thinking: '', signature: '' });
        this.delta({ type: 'thinking_delta', thinking: p.text });
      } else if (p.type === 'content') {
        if (this.open?.kind !== 'text') {
          if (this.open?.kind === 'tool' && p.text.trim() === '') continue; // whitespace between calls
          this.openBlock({ kind: 'text' }, { type: 'text', text: '' });
        }
        this.delta({ type: 'text_delta', text: p.text });
      } else if (p.type === 'call') {
        this.openBlock({ kind: 'tool', call: p.index }, { type: 'tool_use', id: toolUseId(p.id), name: p.name, input: {} });
        this.callBlocks.set(p.index, this.index);
      } else {
        const block = this.callBlocks.get(p.index);
        if (block !== undefined && p.text) this.event('content_block_delta', { type: 'content_block_delta', index: block, delta: { type: 'input_json_delta', partial_json: p.text } });
      }
    }
  }

  /** The end of a normal finish: the last block closed, message_delta, message_stop. */
  finish(stop: { stop_reason: StopReason; stop_sequence: string | null }, usage: AnthropicUsage): void {
    if (this.index < 0) this.openBlock({ kind: 'text' }, { type: 'text', text: '' }); // every message has a block
    this.closeBlock();
    this.event('message_delta', { type: 'message_delta', delta: stop, usage });
    this.event('message_stop', { type: 'message_stop' });
    this.end();
  }

  /** A failure after the stream started: an error event, then the end. */
  fail(e: HttpError): void {
    this.event('error', anthropicErrorBody(e));
    this.end();
  }

  end(): void {
    clearInterval(this.timer);
    if (!this.closed) this.res.end();
  }

  private get closed(): boolean {
    return this.res.destroyed || this.res.writableEnded;
  }

  private openBlock(kind: OpenBlock, block: ContentBlock): void {
    this.closeBlock();
    this.open = kind;
    this.index++;
    this.event('content_block_start', { type: 'content_block_start', index: this.index, content_block: block });
  }

  private closeBlock(): void {
    if (this.open === null) return;
    this.event('content_block_stop', { type: 'content_block_stop', index: this.index });
    this.open = null;
  }

  private delta(delta: unknown): void {
    this.event('content_block_delta', { type: 'content_block_delta', index: this.index, delta });
  }

  private event(name: string, data: unknown): void {
    if (this.closed) return;
    this.lastWrite = performance.now();
    this.res.write(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);
  }
}
