// POST /v1/chat/completions and /v1/completions once the body is parsed: submit to the engine (one
// request per choice, choices.ts), then stream SSE chunks or answer with one JSON object. A client
// that goes away aborts its request (freeing its KV); a failure after the stream started ends it
// with an error event.
import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { EngineLike, RequestHandle } from '../engine/engine.js';
import type { EngineDelta, EngineDone } from '../engine/request.js';
import type { GrammarProvider } from '../engine/grammar/grammar-service.js';
import type { RequestGrammar } from '../engine/grammar/request-grammar.js';
import { badRequest, toHttpError } from './http-errors.js';
import type { GenerationMetrics } from './metrics.js';
import type { ServedModel } from './served-model.js';
import type { ToolCall } from './tools.js';
import type { GenerationEvent, GenerationPart } from './generation-stream.js';
import { ChoiceFailure, startChoices, type Choices } from './choices.js';
import { SseWriter } from './sse.js';
import type { GenerationRequest } from './validate.js';

type Done = Extract<GenerationEvent, { type: 'done' }>;

export interface CompletionContext {
  engine: EngineLike;
  model: ServedModel;
  keepAliveMs: number;
  metrics: GenerationMetrics;
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

type Usage = ReturnType<ResponseShaper['usage']>;

/** Builds the response objects of one request, in chat or legacy completion form; one per choice. */
class ResponseShaper {
  readonly id: string;
  readonly created: number;
  private textOffset = 0;

  constructor(
    private readonly g: GenerationRequest,
    private readonly model: ServedModel,
    /** The choice whose chunks this shaper writes. */
    readonly index = 0,
    shared?: { id: string; created: number },
  ) {
    this.id = shared?.id ?? `${g.kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomUUID().replace(/-/g, '')}`;
    this.created = shared?.created ?? Math.floor(Date.now() / 1000);
  }

  /** The shaper of another choice of the same response. */
  forChoice(index: number): ResponseShaper {
    return new ResponseShaper(this.g, this.model, index, this);
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

  /** Usage of every choice: the prompt once (as OpenAI counts it, cached tokens of choice 0), completions summed. */
  usage(dones: EngineDone[]) {
    const first = dones[0]!.usage;
    const completion = dones.reduce((sum, d) => sum + d.usage.completionTokens, 0);
    return {
      prompt_tokens: first.promptTokens,
      completion_tokens: completion,
      total_tokens: first.promptTokens + completion,
      prompt_tokens_details: { cached_tokens: first.cachedTokens },
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
        choices: [{ index: this.index, delta, logprobs: withLp ? { content: lp.map((d) => this.chatLogprob(d)) } : null, finish_reason: this.legacyFinish(finish) }],
        ...(this.g.includeUsage ? { usage: null } : {}),
      };
    }
    return {
      ...base,
      object: 'text_completion',
      system_fingerprint: null,
      choices: [{ index: this.index, text: text ?? '', logprobs: withLp ? this.textLogprobs(lp) : null, finish_reason: finish }],
      ...(this.g.includeUsage ? { usage: null } : {}),
    };
  }

  /** The streamed tool call: one delta carrying the whole call (OpenAI's shape, index 0). */
  toolCallChunk(call: ToolCall): unknown {
    return this.toolDeltaChunk({ index: 0, ...call });
  }

  /** One tool-call delta: the first of a call carries index, id, type and name; later ones argument fragments. */
  toolDeltaChunk(tc: { index: number; id?: string; type?: 'function'; function: { name?: string; arguments: string } }): unknown {
    // A request with deprecated `functions` gets the deprecated shape: one function_call (validate.ts allows one call).
    const delta = this.g.legacyFunctions ? { function_call: tc.function } : { tool_calls: [tc] };
    return {
      id: this.id,
      object: 'chat.completion.chunk',
      created: this.created,
      model: this.model.id,
      system_fingerprint: null,
      choices: [{ index: this.index, delta, logprobs: null, finish_reason: null }],
      ...(this.g.includeUsage ? { usage: null } : {}),
    };
  }

  /** The chunk of one content or tool-call part of a parsed (tool_choice auto) stream. */
  partChunk(p: Exclude<GenerationPart, { type: 'reasoning' }>): unknown {
    if (p.type === 'content') return this.chunk(p.text, [], null);
    if (p.type === 'call') return this.toolDeltaChunk({ index: p.index, id: p.id, type: 'function', function: { name: p.name, arguments: '' } });
    return this.toolDeltaChunk({ index: p.index, function: { arguments: p.text } });
  }

  usageChunk(usage: Usage): unknown {
    const object = this.g.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    return { id: this.id, object, created: this.created, model: this.model.id, system_fingerprint: null, choices: [], usage };
  }

  /** The whole response: the choices' objects (choice(), in index order) and their usage. */
  full(choices: unknown[], usage: Usage): unknown {
    const object = this.g.kind === 'text' ? 'text_completion' : 'chat.completion';
    return { id: this.id, created: this.created, model: this.model.id, system_fingerprint: null, usage, object, choices };
  }

  /** This shaper's choice of a whole response. */
  choice(ev: Done): unknown {
    const logprobs = this.g.logprobs >= 0 ? ev.logprobs : null;
    if (this.g.kind === 'text') {
      return { index: this.index, text: ev.engine.text, logprobs: logprobs && this.textLogprobs(logprobs), finish_reason: ev.finishReason };
    }
    const calls = ev.toolCalls.length > 0;
    const message = {
      role: 'assistant',
      content: ev.content,
      ...(ev.reasoning ? { reasoning_content: ev.reasoning } : {}),
      ...(calls ? (this.g.legacyFunctions ? { function_call: ev.toolCalls[0]!.function } : { tool_calls: ev.toolCalls }) : {}),
    };
    // A forced call carries no logprobs (its tokens are the grammar's wrapper).
    const lp = logprobs && !(calls && this.g.tools?.format) ? { content: logprobs.map((d) => this.chatLogprob(d)) } : null;
    return { index: this.index, message, logprobs: lp, finish_reason: this.legacyFinish(ev.finishReason) };
  }

  /** OpenAI's finish reason for a call requested through deprecated `functions` is "function_call". */
  private legacyFinish<T extends string | null>(finish: T): T | 'function_call' {
    return this.g.legacyFunctions && finish === 'tool_calls' ? 'function_call' : finish;
  }
}

export async function handleGeneration(ctx: CompletionContext, res: ServerResponse, g: GenerationRequest): Promise<void> {
  const shaper = new ResponseShaper(g, ctx.model);
  // Throws before anything is written: the caller answers with the error's status.
  const choices = await startChoices(ctx, g, shaper.id, res);
  if (g.stream) return streamChat(ctx, res, g, shaper, choices);
  const shapers = Array.from({ length: choices.n }, (_, i) => shaper.forChoice(i));
  const dones: Done[] = [];
  try {
    for await (const { index, event } of choices.events) if (event.type === 'done') dones[index] = event;
  } catch (err) {
    const e = toHttpError(err instanceof ChoiceFailure ? err.cause : err);
    ctx.sendJson(res, e.status, e.body(), { ...e.headers });
    return;
  }
  if (dones.filter(Boolean).length < choices.n) return; // aborted: the client is gone
  ctx.sendJson(res, 200, shaper.full(dones.map((d, i) => shapers[i]!.choice(d)), shaper.usage(dones.map((d) => d.engine))));
}

/** One choice's SSE chunks: its parts in order as they come, then its finish. */
class ChoiceChunks {
  private callsStreamed = 0;
  private readonly forced: boolean;

  constructor(
    private readonly g: GenerationRequest,
    readonly shaper: ResponseShaper,
  ) {
    this.forced = g.tools?.format !== undefined;
  }

  step(ev: Extract<GenerationEvent, { type: 'step' }>): unknown[] {
    const { g, shaper } = this;
    if (this.forced) return []; // the done event's call is sent whole
    const out: unknown[] = [];
    const reasoning = ev.parts.map((p) => (p.type === 'reasoning' ? p.text : '')).join('');
    if (g.tools?.auto) {
      // Content and calls go out in order, each as its own chunk; reasoning and logprobs first.
      if (reasoning || ev.logprobs.length > 0) out.push(shaper.chunk('', ev.logprobs, null, false, reasoning));
      for (const p of ev.parts) {
        if (p.type === 'reasoning') continue;
        if (p.type === 'call') this.callsStreamed++;
        out.push(shaper.partChunk(p));
      }
      return out;
    }
    const content = ev.parts.map((p) => (p.type === 'content' ? p.text : '')).join('');
    if (content || reasoning || ev.logprobs.length > 0) out.push(shaper.chunk(content, ev.logprobs, null, false, reasoning));
    return out;
  }

  done(ev: Done): unknown[] {
    const { g, shaper } = this;
    const out: unknown[] = [];
    let finish: string = ev.finishReason;
    if (this.forced) {
      const call = ev.toolCalls[0];
      if (call) out.push(shaper.toolCallChunk(call));
      else if (ev.content) out.push(shaper.chunk(ev.content, [], null)); // cut short: the raw text
    } else if (g.tools?.auto) finish = this.callsStreamed > 0 && ev.engine.finishReason === 'stop' ? 'tool_calls' : ev.engine.finishReason;
    out.push(shaper.chunk(g.kind === 'chat' ? null : '', [], finish));
    return out;
  }
}

async function streamChat(ctx: CompletionContext, res: ServerResponse, g: GenerationRequest, shaper: ResponseShaper, choices: Choices): Promise<void> {
  const sse = new SseWriter(res, ctx.keepAliveMs);
  const each = Array.from({ length: choices.n }, (_, i) => new ChoiceChunks(g, shaper.forChoice(i)));
  const dones: EngineDone[] = [];
  sse.open();
  if (g.kind === 'chat') for (const c of each) sse.send(c.shaper.chunk('', [], null, true)); // the role comes first
  try {
    for await (const { index, event } of choices.events) {
      const chunks = event.type === 'step' ? each[index]!.step(event) : each[index]!.done(event);
      for (const c of chunks) sse.send(c);
      if (event.type === 'done') dones[index] = event.engine;
    }
    const finished = dones.filter(Boolean).length === choices.n;
    if (finished && g.includeUsage) sse.send(shaper.usageChunk(shaper.usage(dones)));
    sse.end(finished); // not finished: aborted, the client is gone
  } catch (err) {
    const failed = err instanceof ChoiceFailure ? err : new ChoiceFailure(0, err);
    const e = toHttpError(failed.cause);
    sse.send(each[failed.index]!.shaper.chunk(g.kind === 'chat' ? null : '', [], 'error'));
    sse.send(e.body());
    sse.end(false);
  }
}
