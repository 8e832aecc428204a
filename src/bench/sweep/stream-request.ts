// One streamed chat completion over fetch (undici) with per-token timing: TTFT, the gap before
// every token-bearing chunk, and end-to-end latency. Every request is bounded by its own timeout
// and by the level's abort signal; a dropped connection or a stall ends as a failure, never a hang.
import { fetch, type Dispatcher } from 'undici';
import type { RequestOutcome } from './outcome.js';
import { SseParser } from './sse-parser.js';
import type { BenchRequest } from './workload.js';

export interface StreamTarget {
  /** The chat-completions endpoint. */
  endpoint: string;
  /** Sent as "model" when set. */
  model?: string;
  apiKey?: string;
  /** The pooled agent of this bench run (src/net/dispatchers.ts). */
  dispatcher?: Dispatcher;
}

export interface StreamOptions {
  timeoutMs: number;
  temperature: number;
  /** Aborted when the level deadline passes. */
  deadline?: AbortSignal;
  /** ms timestamps are relative to this performance.now() value. */
  levelStart: number;
  /** Called on every token-bearing chunk (live progress). */
  onToken?: () => void;
}

interface ChunkChoice {
  delta?: { content?: string | null; reasoning_content?: string | null };
  message?: { content?: string | null; reasoning_content?: string | null };
  finish_reason?: string | null;
}
interface Chunk {
  choices?: ChunkChoice[];
  usage?: { completion_tokens?: number; prompt_tokens?: number } | null;
  error?: { message?: string } | string;
}

export function requestBody(target: StreamTarget, req: BenchRequest, temperature: number, schema?: Record<string, unknown>): Record<string, unknown> {
  return {
    ...(target.model !== undefined ? { model: target.model } : {}),
    messages: req.messages,
    max_tokens: req.maxTokens,
    temperature,
    ...(req.topP !== undefined ? { top_p: req.topP } : {}),
    seed: req.seed,
    stream: true,
    stream_options: { include_usage: true },
    ...(req.kind === 'schema' && schema ? { response_format: { type: 'json_schema', json_schema: { name: 'bench', schema, strict: true } } } : {}),
  };
}

function errorText(e: Chunk['error']): string {
  return typeof e === 'string' ? e : (e?.message ?? 'error');
}

function describeError(err: unknown): string {
  const e = err as { message?: string; cause?: { code?: string; message?: string } };
  const cause = e?.cause ? `: ${e.cause.code ?? e.cause.message ?? ''}` : '';
  return `${e?.message ?? String(err)}${cause}`.slice(0, 200);
}

export async function streamRequest(target: StreamTarget, req: BenchRequest, opts: StreamOptions, schema?: Record<string, unknown>): Promise<RequestOutcome> {
  const ac = new AbortController();
  let cause: 'timeout' | 'deadline' | null = null;
  const timer = setTimeout(() => {
    cause ??= 'timeout';
    ac.abort();
  }, opts.timeoutMs);
  const onDeadline = () => {
    cause ??= 'deadline';
    ac.abort();
  };
  if (opts.deadline?.aborted) onDeadline();
  else opts.deadline?.addEventListener('abort', onDeadline, { once: true });

  // Serialized before the clock starts: a large inline image must not count as server latency.
  const body = JSON.stringify(requestBody(target, req, opts.temperature, schema));
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'text/event-stream' };
  if (target.apiKey) headers.authorization = `Bearer ${target.apiKey}`;
  const t0 = performance.now();
  const out: RequestOutcome = { index: req.index, kind: req.kind, ok: false, startMs: t0 - opts.levelStart, itlMs: [], e2eMs: 0, outputTokens: 0, tokensFromUsage: false, content: '' };
  let chunks = 0;
  let last = 0;
  let done = false;
  let usageTokens: number | undefined;
  const token = (content: string | null | undefined, reasoning: string | null | undefined) => {
    if (content) out.content += content;
    if (!content && !reasoning) return;
    const now = performance.now();
    if (chunks === 0) out.ttftMs = now - t0;
    else out.itlMs.push(now - last);
    last = now;
    chunks++;
    opts.onToken?.();
  };
  const chunk = (data: string): string | null => {
    if (data.trim() === '[DONE]') {
      done = true;
      return null;
    }
    let c: Chunk;
    try {
      c = JSON.parse(data) as Chunk;
    } catch {
      return `unparseable stream chunk: ${data.slice(0, 80)}`;
    }
    if (c.error) return errorText(c.error);
    const ch = c.choices?.[0];
    if (ch) {
      token(ch.delta?.content ?? ch.message?.content, ch.delta?.reasoning_content ?? ch.message?.reasoning_content);
      if (ch.finish_reason) out.finishReason = ch.finish_reason;
    }
    if (c.usage && typeof c.usage.completion_tokens === 'number') {
      usageTokens = c.usage.completion_tokens;
      out.promptTokens = c.usage.prompt_tokens;
    }
    return null;
  };

  try {
    const res = await fetch(target.endpoint, { method: 'POST', headers, body, signal: ac.signal, dispatcher: target.dispatcher });
    out.httpStatus = res.status;
    if (!res.ok) {
      const text = await res.text().catch(() => '');
      let msg = text.slice(0, 200);
      try {
        const e = (JSON.parse(text) as Chunk).error;
        if (e) msg = errorText(e);
      } catch {
        /* not JSON: keep the raw text */
      }
      out.failure = 'http_error';
      out.error = `HTTP ${res.status}${msg ? `: ${msg}` : ''}`;
      return out;
    }
    if (!res.body) throw new Error('response without a body');
    const contentType = res.headers.get('content-type') ?? '';
    if (contentType.includes('application/json')) {
      // A server that ignores stream:true: one reply, no per-token timings.
      const err = chunk(await res.text());
      if (err) {
        out.failure = 'stream_error';
        out.error = err;
        return out;
      }
      done = true;
    } else {
      const parser = new SseParser();
      const decoder = new TextDecoder();
      const reader = res.body.getReader();
      let err: string | null = null;
      for (;;) {
        const { value, done: eof } = await reader.read();
        const events = eof ? parser.push(decoder.decode()).concat(parser.end()) : parser.push(decoder.decode(value, { stream: true }));
        for (const data of events) {
          err ??= chunk(data);
          if (err || done) break;
        }
        if (err || done || eof) break;
      }
      if (err || out.finishReason === 'error') {
        await reader.cancel().catch(() => undefined);
        out.failure = 'stream_error';
        out.error = err ?? 'the server ended the stream with finish_reason "error"';
        return out;
      }
      // Past [DONE] nothing is read; not awaited, so closing the body never delays the timing.
      if (done) void reader.cancel().catch(() => undefined);
      if (!done && !out.finishReason) {
        out.failure = 'connection_dropped';
        out.error = 'the stream ended before the reply finished';
        return out;
      }
    }
    out.ok = true;
    return out;
  } catch (err) {
    if (cause === 'timeout') {
      out.failure = 'timeout';
      out.error = `no complete reply within ${opts.timeoutMs} ms`;
    } else if (cause === 'deadline') {
      out.failure = 'timeout';
      out.error = 'cut off by the level deadline';
    } else if (/TIMEOUT/.test((err as { cause?: { code?: string } })?.cause?.code ?? '')) {
      out.failure = 'timeout'; // undici's own headers/body timeouts (300 s by default)
      out.error = describeError(err);
    } else {
      out.failure = 'connection_dropped';
      out.error = describeError(err);
    }
    return out;
  } finally {
    clearTimeout(timer);
    opts.deadline?.removeEventListener('abort', onDeadline);
    out.e2eMs = performance.now() - t0;
    out.outputTokens = usageTokens ?? chunks;
    out.tokensFromUsage = usageTokens !== undefined;
  }
}
