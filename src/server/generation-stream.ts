// One generation, protocol-neutral: submits a parsed request to the engine and turns its token
// deltas into ordered parts (content, reasoning, tool-call starts and argument fragments) and a
// final result. Chat Completions, Responses and Messages are shapes over these events, so the
// reasoning split, tool-call parsing and forced-call handling are written once.
import type { ServerResponse } from 'node:http';
import type { EngineLike, RequestHandle } from '../engine/engine.js';
import type { EngineDelta, EngineDone } from '../engine/request.js';
import type { GrammarProvider } from '../engine/grammar/grammar-service.js';
import type { RequestGrammar } from '../engine/grammar/request-grammar.js';
import { badRequest } from './http-errors.js';
import type { GenerationMetrics } from './metrics.js';
import { noteDone, noteFailed, noteFirstToken } from './access-log.js';
import { ReasoningSplitter } from './reasoning.js';
import { toolCallFrom, truncatedToolCall, type ToolCall } from './tools.js';
import { ToolCallStream } from './tool-parsers/tool-call-stream.js';
import type { GenerationRequest } from './validate.js';

export interface GenerationDeps {
  engine: EngineLike;
  metrics: GenerationMetrics;
  /** Structured output; without it, constrained requests get 400. */
  grammar?: GrammarProvider;
}

/** A piece of the output in order: text, reasoning, a tool call's start, or a fragment of its arguments. */
export type GenerationPart =
  | { type: 'content'; text: string }
  | { type: 'reasoning'; text: string }
  | { type: 'call'; index: number; id: string; name: string }
  | { type: 'args'; index: number; text: string };

export type FinishReason = 'stop' | 'length' | 'tool_calls';

export type GenerationEvent =
  /** What one engine delta completed (parts may be empty while text is held back); logprobs of its token. */
  | { type: 'step'; parts: GenerationPart[]; logprobs: EngineDelta[] }
  /** The end: the whole output in the same split the steps streamed. Not sent for an aborted request. */
  | {
      type: 'done';
      finishReason: FinishReason;
      /** Content outside reasoning and tool calls; null when there is none beside tool calls. */
      content: string | null;
      reasoning: string;
      toolCalls: ToolCall[];
      /** Deltas that carry logprobs, in order (empty unless asked for). */
      logprobs: EngineDelta[];
      engine: EngineDone;
    };

export interface GenerationRun {
  readonly id: string;
  readonly numPromptTokens: number;
  /** Steps, then one done event; throws (EngineRequestError, HttpError) when the request fails. */
  readonly events: AsyncIterable<GenerationEvent>;
  /** Frees the request's KV; its events end without a done event. */
  abort(): void;
  /** Aborts the run when the response closes before the run ended (the client went away). */
  abortOnClose(res: ServerResponse): void;
}

/**
 * Starts a generation. Throws before anything is queued when the request cannot run (a grammar the
 * server cannot build: 400), so the caller can still answer with a status.
 */
export async function startGeneration(deps: GenerationDeps, g: GenerationRequest, id: string): Promise<GenerationRun> {
  let grammar: RequestGrammar | undefined;
  if (g.responseFormat) {
    if (!deps.grammar) throw badRequest('structured output is not available on this server', 'response_format', 'unsupported');
    grammar = await deps.grammar.matcher(g.responseFormat, { budgetClose: g.budgetClose !== false, maxTokens: g.params.maxTokens }); // InvalidRequestError -> 400
  }
  const handle = deps.engine.submit({ promptIds: g.promptIds, params: g.params, id, grammar, multimodal: g.multimodal, keepSpecialTokens: g.keepSpecialTokens });
  if (handle.accepted) await handle.accepted; // an engine child refuses a request as submit would throw (400, 503)
  let ended = false;
  return {
    id,
    numPromptTokens: handle.numPromptTokens,
    events: events(deps.metrics, g, handle, () => (ended = true)),
    abort: () => handle.abort(),
    abortOnClose(res) {
      res.on('close', () => {
        if (ended) return;
        deps.metrics.disconnects++;
        handle.abort(); // the client went away: free its KV now
      });
    },
  };
}

async function* events(metrics: GenerationMetrics, g: GenerationRequest, handle: RequestHandle, end: () => void): AsyncGenerator<GenerationEvent> {
  const started = performance.now();
  let first = true;
  let lastToken = started;
  const splitter = g.reasoning ? new ReasoningSplitter() : null;
  // tool_choice auto: content until a call marker; calls as a start and argument fragments.
  const toolStream = g.tools?.auto ? new ToolCallStream(g.tools.auto, g.tools.maxCalls) : null;
  const forced = g.tools?.format !== undefined;
  let reasoning = '';
  let splitContent = ''; // everything outside reasoning, before tool-call parsing
  const calls: ToolCall[] = [];
  const logprobs: EngineDelta[] = [];
  const split = (text: string, out: GenerationPart[]) => {
    const p = splitter ? splitter.push(text) : { reasoning: '', content: text };
    if (p.reasoning) out.push({ type: 'reasoning', text: p.reasoning });
    contentParts(p.content, out);
  };
  const contentParts = (text: string, out: GenerationPart[]) => {
    splitContent += text;
    if (!toolStream) {
      if (text) out.push({ type: 'content', text });
      return;
    }
    for (const e of toolStream.push(text)) out.push(e.type === 'content' ? { type: 'content', text: e.text } : e);
  };
  const record = (parts: GenerationPart[]) => {
    for (const p of parts) if (p.type === 'reasoning') reasoning += p.text;
  };
  try {
    for await (const ev of handle.events) {
      if (ev.type === 'delta') {
        const now = performance.now();
        if (first) {
          first = false;
          metrics.observeTtft((now - started) / 1000);
          noteFirstToken();
        } else metrics.observeInterToken((now - lastToken) / 1000);
        lastToken = now;
        const lp = ev.logprob !== undefined ? [ev] : [];
        logprobs.push(...lp);
        const parts: GenerationPart[] = [];
        if (!forced) split(ev.text, parts); // a forced call is sent whole at the end
        record(parts);
        yield { type: 'step', parts, logprobs: lp };
        continue;
      }
      end();
      if (ev.finishReason === 'abort') return; // the client is gone
      const parts: GenerationPart[] = [];
      let finishReason: FinishReason = ev.finishReason;
      if (forced) {
        // Cut by max_tokens (budget closing off, or no room to close): still a call, its arguments as far as they got.
        const cut = ev.finishReason === 'length';
        const call = toolCallFrom(ev.text) ?? (cut ? truncatedToolCall(ev.text, g.tools?.forcedNames ?? []) : null);
        if (call) {
          calls.push(call);
          parts.push({ type: 'call', index: 0, id: call.id, name: call.function.name }, { type: 'args', index: 0, text: call.function.arguments });
          // Budget closing may have ended it at max_tokens: still a call, but said.
          finishReason = cut ? 'length' : 'tool_calls';
        } else if (ev.text && !cut) parts.push({ type: 'content', text: ev.text }); // not a call (a grammar fault): the raw text
      } else {
        const rest = splitter?.flush();
        if (rest?.reasoning) parts.push({ type: 'reasoning', text: rest.reasoning });
        contentParts(rest?.content ?? '', parts);
        if (toolStream) for (const e of toolStream.finish()) parts.push(e.type === 'content' ? { type: 'content', text: e.text } : e);
      }
      record(parts);
      if (parts.length > 0) yield { type: 'step', parts, logprobs: [] };
      // The whole-output view of auto tool calls: a region that did not parse is content again.
      const parsed = toolStream?.result();
      if (parsed && parsed.calls.length > 0) {
        calls.push(...parsed.calls);
        if (finishReason === 'stop') finishReason = 'tool_calls';
      }
      metrics.observeDone(ev, (performance.now() - started) / 1000);
      // A forced call cut before its name was decided: no call and no content (the wrapper JSON is not the model's reply).
      const finalContent = forced ? (calls.length > 0 || ev.finishReason === 'length' ? null : ev.text) : parsed && parsed.calls.length > 0 ? parsed.content : splitContent;
      noteDone(ev, finishReason);
      yield { type: 'done', finishReason, content: finalContent, reasoning, toolCalls: calls, logprobs, engine: ev };
      return;
    }
  } catch (err) {
    end();
    metrics.failures++;
    noteFailed();
    throw err;
  } finally {
    end();
  }
}
