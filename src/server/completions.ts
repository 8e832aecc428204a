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
import { ReasoningSplitter } from './reasoning.js';
import { toolCallFrom, type ToolCall } from './tools.js';
import { ToolCallStream, type ToolStreamEvent } from './tool-parsers/tool-call-stream.js';
import { SseWriter } from './sse.js';
import type { GenerationRequest } from './validate.js';

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

  /** The chunk of one event of a parsed (tool_choice auto) stream. */
  toolEventChunk(e: ToolStreamEvent): unknown {
    if (e.type === 'content') return this.chunk(e.text, [], null);
    if (e.type === 'call') return this.toolDeltaChunk({ index: e.index, id: e.id, type: 'function', function: { name: e.name, arguments: '' } });
    return this.toolDeltaChunk({ index: e.index, function: { arguments: e.text } });
  }

  /** tool_choice auto, not streamed: the model's calls parsed out of its output (after any reasoning). */
  private autoToolChoice(text: string, lp: EngineDelta[], done: EngineDone): unknown {
    const tools = this.g.tools!;
    const split = this.g.reasoning ? ReasoningSplitter.split(text) : { reasoning: '', content: text };
    const parsed = ToolCallStream.parse(tools.auto!, split.content, tools.maxCalls);
    const withCalls = parsed.calls.length > 0;
    const message = {
      role: 'assistant',
      content: withCalls ? parsed.content : split.content,
      ...(split.reasoning ? { reasoning_content: split.reasoning } : {}),
      ...(withCalls ? { tool_calls: parsed.calls } : {}),
    };
    const logprobs = this.g.logprobs >= 0 ? { content: lp.map((d) => this.chatLogprob(d)) } : null;
    return { index: 0, message, logprobs, finish_reason: withCalls && done.finishReason === 'stop' ? 'tool_calls' : done.finishReason };
  }

  usageChunk(done: EngineDone): unknown {
    const object = this.g.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    return { id: this.id, object, created: this.created, model: this.model.id, system_fingerprint: null, choices: [], usage: this.usage(done) };
  }

  full(text: string, lp: EngineDelta[], done: EngineDone): unknown {
    const base = { id: this.id, created: this.created, model: this.model.id, system_fingerprint: null, usage: this.usage(done) };
    const withLp = this.g.logprobs >= 0;
    const call = this.g.tools?.format && done.finishReason !== 'abort' ? toolCallFrom(text) : null;
    if (this.g.kind === 'chat' && this.g.tools?.auto) return { ...base, object: 'chat.completion', choices: [this.autoToolChoice(text, lp, done)] };
    if (call) {
      return {
        ...base,
        object: 'chat.completion',
        choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [call] }, logprobs: null, finish_reason: toolFinish(done) }],
      };
    }
    if (this.g.kind === 'chat') {
      return {
        ...base,
        object: 'chat.completion',
        choices: [
          {
            index: 0,
            message: this.g.reasoning ? { role: 'assistant', ...reasoningMessage(text) } : { role: 'assistant', content: text },
            logprobs: withLp ? { content: lp.map((d) => this.chatLogprob(d)) } : null,
            finish_reason: done.finishReason,
          },
        ],
      };
    }
    return {
      ...base,
      object: 'text_completion',
      choices: [{ index: 0, text, logprobs: withLp ? this.textLogprobs(lp) : null, finish_reason: done.finishReason }],
    };
  }
}

export async function handleGeneration(ctx: CompletionContext, res: ServerResponse, g: GenerationRequest): Promise<void> {
  const shaper = new ResponseShaper(g, ctx.model);
  const started = performance.now();
  // Throws before anything is written: the caller answers with the error's status.
  let grammar: RequestGrammar | undefined;
  if (g.responseFormat) {
    if (!ctx.grammar) throw badRequest('structured output is not available on this server', 'response_format', 'unsupported');
    grammar = await ctx.grammar.matcher(g.responseFormat, { budgetClose: g.budgetClose !== false, maxTokens: g.params.maxTokens }); // InvalidRequestError -> 400
  }
  const handle: RequestHandle = ctx.engine.submit({ promptIds: g.promptIds, params: g.params, id: shaper.id, grammar, multimodal: g.multimodal, keepSpecialTokens: g.keepSpecialTokens });
  let finished = false;
  res.on('close', () => {
    if (!finished) {
      ctx.metrics.disconnects++;
      handle.abort(); // client went away: free its KV now
    }
  });
  let firstAt = 0;
  const onDelta = () => {
    if (firstAt === 0) {
      firstAt = performance.now();
      ctx.metrics.observeTtft((firstAt - started) / 1000);
    }
  };

  if (g.stream) {
    const sse = new SseWriter(res, ctx.keepAliveMs);
    const splitter = g.kind === 'chat' && g.reasoning ? new ReasoningSplitter() : null;
    // tool_choice auto: content streams until a call marker; calls stream as tool_calls deltas.
    const toolStream = g.tools?.auto ? new ToolCallStream(g.tools.auto, g.tools.maxCalls) : null;
    const sendTools = (events: ToolStreamEvent[]) => {
      for (const e of events) sse.send(shaper.toolEventChunk(e));
    };
    sse.open();
    if (g.kind === 'chat') sse.send(shaper.chunk('', [], null, true)); // the role comes first
    try {
      for await (const ev of handle.events) {
        if (ev.type === 'delta') {
          onDelta();
          const lp = ev.logprob !== undefined ? [ev] : [];
          if (g.tools?.format) continue; // the done event's text is sent as one tool call at the end
          if (toolStream) {
            const p = splitter ? splitter.push(ev.text) : { reasoning: '', content: ev.text };
            if (p.reasoning || lp.length > 0) sse.send(shaper.chunk('', lp, null, false, p.reasoning));
            sendTools(toolStream.push(p.content));
            continue;
          }
          if (splitter) {
            const p = splitter.push(ev.text);
            if (p.content || p.reasoning || lp.length > 0) sse.send(shaper.chunk(p.content, lp, null, false, p.reasoning));
          } else if (ev.text || lp.length > 0) sse.send(shaper.chunk(ev.text, lp, null));
          continue;
        }
        finished = true;
        if (ev.finishReason === 'abort') break; // the client is gone
        const call = g.tools?.format ? toolCallFrom(ev.text) : null;
        if (call) {
          sse.send(shaper.toolCallChunk(call));
          sse.send(shaper.chunk(null, [], toolFinish(ev)));
          if (g.includeUsage) sse.send(shaper.usageChunk(ev));
          ctx.metrics.observeDone(ev, (performance.now() - started) / 1000);
          sse.end(true);
          return;
        }
        if (g.tools?.format && ev.text) sse.send(shaper.chunk(ev.text, [], null)); // cut short: the raw text
        const rest = splitter?.flush();
        let finish: string = ev.finishReason;
        if (toolStream) {
          if (rest?.reasoning) sse.send(shaper.chunk('', [], null, false, rest.reasoning));
          sendTools(toolStream.push(rest?.content ?? ''));
          sendTools(toolStream.finish());
          if (toolStream.callCount > 0 && finish === 'stop') finish = 'tool_calls';
        } else if (rest && (rest.content || rest.reasoning)) sse.send(shaper.chunk(rest.content, [], null, false, rest.reasoning));
        sse.send(shaper.chunk(g.kind === 'chat' ? null : '', [], finish));
        if (g.includeUsage) sse.send(shaper.usageChunk(ev));
        ctx.metrics.observeDone(ev, (performance.now() - started) / 1000);
        sse.end(true);
        return;
      }
      finished = true;
      sse.end(false);
    } catch (err) {
      finished = true;
      const e = toHttpError(err);
      ctx.metrics.failures++;
      sse.send(shaper.chunk(g.kind === 'chat' ? null : '', [], 'error'));
      sse.send(e.body());
      sse.end(false);
    }
    return;
  }

  const lp: EngineDelta[] = [];
  try {
    for await (const ev of handle.events) {
      if (ev.type === 'delta') {
        onDelta();
        if (ev.logprob !== undefined) lp.push(ev);
        continue;
      }
      finished = true;
      if (ev.finishReason === 'abort') return;
      ctx.metrics.observeDone(ev, (performance.now() - started) / 1000);
      ctx.sendJson(res, 200, shaper.full(ev.text, lp, ev));
      return;
    }
  } catch (err) {
    finished = true;
    ctx.metrics.failures++;
    const e = toHttpError(err);
    ctx.sendJson(res, e.status, e.body(), { ...e.headers });
  }
}

/** The message fields of a thinking model's whole output. */
function reasoningMessage(text: string): { content: string; reasoning_content?: string } {
  const p = ReasoningSplitter.split(text);
  return p.reasoning ? { content: p.content, reasoning_content: p.reasoning } : { content: p.content };
}

/** A forced call that parses is a tool call; budget closing may have ended it at max_tokens ("length"). */
function toolFinish(done: EngineDone): string {
  return done.finishReason === 'length' ? 'length' : 'tool_calls';
}
