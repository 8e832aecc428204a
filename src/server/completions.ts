// POST /v1/chat/completions and /v1/completions once the body is parsed: submit to the engine,
// then stream SSE chunks or answer with one JSON object. A client that goes away aborts its
// request (freeing its KV); a failure after the stream started ends it with an error event.
import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { EngineLike, RequestHandle } from '../engine/engine.js';
import type { EngineDelta, EngineDone } from '../engine/request.js';
import type { GrammarProvider } from '../engine/grammar/grammar-service.js';
import type { RequestGrammar } from '../engine/grammar/request-grammar.js';
import { badRequest, toHttpError } from './http-errors.js';
import type { ServerMetrics } from './metrics.js';
import type { ServedModel } from './served-model.js';
import type { ToolCall } from './tools.js';
import { startGeneration, type GenerationEvent, type GenerationPart, type GenerationRun } from './generation-stream.js';
import { SseWriter } from './sse.js';
import type { GenerationRequest } from './validate.js';

type Done = Extract<GenerationEvent, { type: 'done' }>;

export interface CompletionContext {
  engine: EngineLike;
  model: ServedModel;
  keepAliveMs: number;
  metrics: ServerMetrics;
  /** Structured output; without it, response_format json requests get 400. */
  grammar?: GrammarProvider;
  sendJson(res: ServerResponse, status: number, body: unknown, headers?: Record<string, string>): void;
}

interface ChatLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

interface TextLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Record<string, number>[] | null;
  text_offset: number[];
}

const utf8 = (s: string) => [...Buffer.from(s, 'utf8')];

/** Builds the response objects of one request, in chat or legacy completion form. */
class ResponseShaper {
  readonly id: string;
  readonly created = Math.floor(Date.now() / 1000);
  private textOffset = 0;

  constructor(
    private readonly g: GenerationRequest,
    private readonly model: ServedModel,
  ) {
    this.id = `${g.kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomUUID().replace(/-/g, '')}`;
  }

  chatLogprob(d: EngineDelta): ChatLogprob {
    const token = this.model.tokenText(d.token);
    return {
      token,
      logprob: d.logprob!,
      bytes: utf8(token),
      top_logprobs: (d.topLogprobs ?? []).map((t) => {
        const s = this.model.tokenText(t.token);
        return { token: s, logprob: t.logprob, bytes: utf8(s) };
      }),
    };
  }

  textLogprobs(ds: EngineDelta[]): TextLogprobs {
    const out: TextLogprobs = { tokens: [], token_logprobs: [], top_logprobs: this.g.logprobs > 0 ? [] : null, text_offset: [] };
    for (const d of ds) {
      const s = this.model.tokenText(d.token);
      out.tokens.push(s);
      out.token_logprobs.push(d.logprob!);
      out.text_offset.push(this.textOffset);
      this.textOffset += s.length;
      if (out.top_logprobs) out.top_logprobs.push(Object.fromEntries((d.topLogprobs ?? []).map((t) => [this.model.tokenText(t.token), t.logprob])));
    }
    return out;
  }

  usage(done: EngineDone) {
    return {
      prompt_tokens: done.usage.promptTokens,
      completion_tokens: done.usage.completionTokens,
      total_tokens: done.usage.totalTokens,
      prompt_tokens_details: { cached_tokens: done.usage.cachedTokens },
    };
  }

  chunk(text: string | null, lp: EngineDelta[], finish: string | null, first = false, reasoning = ''): unknown {
    const withLp = this.g.logprobs >= 0 && lp.length > 0;
    const base = { id: this.id, created: this.created, model: this.model.id };
    if (this.g.kind === 'chat') {
      const delta: Record<string, string> = {};
      if (first) delta.role = 'assistant';
      if (reasoning) delta.reasoning_content = reasoning;
      if (text !== null && (text !== '' || !reasoning)) delta.content = text;
      return {
        ...base,
        object: 'chat.completion.chunk',
        system_fingerprint: null,
        choices: [{ index: 0, delta, logprobs: withLp ? { content: lp.map((d) => this.chatLogprob(d)) } : null, finish_reason: finish }],
        ...(this.g.includeUsage ? { usage: null } : {}),
      };
    }
    return {
      ...base,
      object: 'text_completion',
      system_fingerprint: null,
      choices: [{ index: 0, text: text ?? '', logprobs: withLp ? this.textLogprobs(lp) : null, finish_reason: finish }],
      ...(this.g.includeUsage ? { usage: null } : {}),
    };
  }

  /** The streamed tool call: one delta carrying the whole call (OpenAI's shape, index 0). */
  toolCallChunk(call: ToolCall): unknown {
    return this.toolDeltaChunk({ index: 0, ...call });
  }

  /** One tool-call delta: the first of a call carries index, id, type and name; later ones argument fragments. */
  toolDeltaChunk(tc: { index: number; id?: string; type?: 'function'; function: { name?: string; arguments: string } }): unknown {
    return {
      id: this.id,
      object: 'chat.completion.chunk',
      created: this.created,
      model: this.model.id,
      system_fingerprint: null,
      choices: [{ index: 0, delta: { tool_calls: [tc] }, logprobs: null, finish_reason: null }],
      ...(this.g.includeUsage ? { usage: null } : {}),
    };
  }

  /** The chunk of one content or tool-call part of a parsed (tool_choice auto) stream. */
  partChunk(p: Exclude<GenerationPart, { type: 'reasoning' }>): unknown {
    if (p.type === 'content') return this.chunk(p.text, [], null);
    if (p.type === 'call') return this.toolDeltaChunk({ index: p.index, id: p.id, type: 'function', function: { name: p.name, arguments: '' } });
    return this.toolDeltaChunk({ index: p.index, function: { arguments: p.text } });
  }

  usageChunk(done: EngineDone): unknown {
    const object = this.g.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    return { id: this.id, object, created: this.created, model: this.model.id, system_fingerprint: null, choices: [], usage: this.usage(done) };
  }

  full(ev: Done): unknown {
    const base = { id: this.id, created: this.created, model: this.model.id, system_fingerprint: null, usage: this.usage(ev.engine) };
    const logprobs = this.g.logprobs >= 0 ? ev.logprobs : null;
    if (this.g.kind === 'text') {
      return { ...base, object: 'text_completion', choices: [{ index: 0, text: ev.engine.text, logprobs: logprobs && this.textLogprobs(logprobs), finish_reason: ev.finishReason }] };
    }
    const calls = ev.toolCalls.length > 0;
    const message = {
      role: 'assistant',
      content: ev.content,
      ...(ev.reasoning ? { reasoning_content: ev.reasoning } : {}),
      ...(calls ? { tool_calls: ev.toolCalls } : {}),
    };
    // A forced call carries no logprobs (its tokens are the grammar's wrapper).
    const lp = logprobs && !(calls && this.g.tools?.format) ? { content: logprobs.map((d) => this.chatLogprob(d)) } : null;
    return { ...base, object: 'chat.completion', choices: [{ index: 0, message, logprobs: lp, finish_reason: ev.finishReason }] };
  }
}

export async function handleGeneration(ctx: CompletionContext, res: ServerResponse, g: GenerationRequest): Promise<void> {
  const shaper = new ResponseShaper(g, ctx.model);
  // Throws before anything is written: the caller answers with the error's status.
  const run = await startGeneration(ctx, g, shaper.id);
  run.abortOnClose(res);
  if (g.stream) return streamChat(ctx, res, g, shaper, run);
  try {
    for await (const ev of run.events) if (ev.type === 'done') ctx.sendJson(res, 200, shaper.full(ev));
  } catch (err) {
    const e = toHttpError(err);
    ctx.sendJson(res, e.status, e.body(), { ...e.headers });
  }
}

async function streamChat(ctx: CompletionContext, res: ServerResponse, g: GenerationRequest, shaper: ResponseShaper, run: GenerationRun): Promise<void> {
  const sse = new SseWriter(res, ctx.keepAliveMs);
  const forced = g.tools?.format !== undefined;
  let callsStreamed = 0;
  sse.open();
  if (g.kind === 'chat') sse.send(shaper.chunk('', [], null, true)); // the role comes first
  try {
    for await (const ev of run.events) {
      if (ev.type === 'step') {
        if (forced) continue; // the done event's call is sent whole
        const reasoning = ev.parts.map((p) => (p.type === 'reasoning' ? p.text : '')).join('');
        if (g.tools?.auto) {
          // Content and calls go out in order, each as its own chunk; reasoning and logprobs first.
          if (reasoning || ev.logprobs.length > 0) sse.send(shaper.chunk('', ev.logprobs, null, false, reasoning));
          for (const p of ev.parts) {
            if (p.type === 'reasoning') continue;
            if (p.type === 'call') callsStreamed++;
            sse.send(shaper.partChunk(p));
          }
          continue;
        }
        const content = ev.parts.map((p) => (p.type === 'content' ? p.text : '')).join('');
        if (content || reasoning || ev.logprobs.length > 0) sse.send(shaper.chunk(content, ev.logprobs, null, false, reasoning));
        continue;
      }
      let finish: string = ev.finishReason;
      if (forced) {
        const call = ev.toolCalls[0];
        if (call) sse.send(shaper.toolCallChunk(call));
        else if (ev.content) sse.send(shaper.chunk(ev.content, [], null)); // cut short: the raw text
      } else if (g.tools?.auto) finish = callsStreamed > 0 && ev.engine.finishReason === 'stop' ? 'tool_calls' : ev.engine.finishReason;
      sse.send(shaper.chunk(g.kind === 'chat' ? null : '', [], finish));
      if (g.includeUsage) sse.send(shaper.usageChunk(ev.engine));
      sse.end(true);
      return;
    }
    sse.end(false); // aborted: the client is gone
  } catch (err) {
    const e = toHttpError(err);
    sse.send(shaper.chunk(g.kind === 'chat' ? null : '', [], 'error'));
    sse.send(e.body());
    sse.end(false);
  }
}
