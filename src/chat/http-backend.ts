// `rapid chat --url URL`: the conversation goes to an OpenAI-compatible server (rapid serve or any
// other) as streamed chat completions; images travel inline as data: URIs. Requests honour
// HTTP(S)_PROXY / NO_PROXY like every client request rapid makes.
import { readFileSync } from 'node:fs';
import { extname } from 'node:path';
import { fetch } from 'undici';
import { chatCompletionsUrl, modelsUrl } from '../bench/sweep/endpoint.js';
import { SseParser } from '../bench/sweep/sse-parser.js';
import { proxyDispatcher } from '../net/dispatchers.js';
import type { ChatBackend, ChatTurn, ReplyEvent, ReplyOptions } from './chat-backend.js';

const IMAGE_TYPES: Record<string, string> = { '.png': 'image/png', '.jpg': 'image/jpeg', '.jpeg': 'image/jpeg', '.webp': 'image/webp', '.gif': 'image/gif', '.bmp': 'image/bmp' };

interface StreamChunk {
  choices?: { delta?: { content?: string | null }; finish_reason?: string | null }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number } | null;
  error?: { message?: string };
}

function dataUri(file: string): string {
  let bytes: Buffer;
  try {
    bytes = readFileSync(file);
  } catch (err) {
    throw new Error(`${file}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (err as Error).message}`);
  }
  return `data:${IMAGE_TYPES[extname(file).toLowerCase()] ?? 'application/octet-stream'};base64,${bytes.toString('base64')}`;
}

function wireMessage(t: ChatTurn): Record<string, unknown> {
  if (!t.images || t.images.length === 0) return { role: t.role, content: t.content };
  return { role: t.role, content: [...t.images.map((f) => ({ type: 'image_url', image_url: { url: dataUri(f) } })), { type: 'text', text: t.content }] };
}

/** The server's error message from a JSON error body, else the start of the body. */
function errorMessage(status: number, text: string): string {
  try {
    const m = (JSON.parse(text) as StreamChunk).error?.message;
    if (m) return `HTTP ${status}: ${m}`;
  } catch {
    /* not JSON */
  }
  return `HTTP ${status}${text ? `: ${text.slice(0, 200)}` : ''}`;
}

export async function httpBackend(url: string, o: { model?: string; apiKey?: string } = {}): Promise<ChatBackend> {
  const endpoint = chatCompletionsUrl(url);
  const dispatcher = proxyDispatcher();
  const auth: Record<string, string> = o.apiKey ? { authorization: `Bearer ${o.apiKey}` } : {};
  // The model name and context from /v1/models (rapid and vLLM report max_model_len).
  let model = o.model;
  let contextLength: number | null = null;
  try {
    const res = await fetch(modelsUrl(endpoint), { headers: auth, dispatcher, signal: AbortSignal.timeout(10_000) });
    if (!res.ok) throw new Error(errorMessage(res.status, await res.text().catch(() => '')));
    const cards = ((await res.json()) as { data?: { id?: unknown; max_model_len?: unknown }[] }).data ?? [];
    const card = cards.find((c) => model === undefined || c.id === model) ?? cards[0];
    if (model === undefined && typeof card?.id === 'string') model = card.id;
    if (typeof card?.max_model_len === 'number') contextLength = card.max_model_len;
  } catch (err) {
    if (model === undefined) throw new Error(`${url}: could not list its models (${(err as Error).message}); pass --model NAME`);
  }

  return {
    model: model ?? 'model',
    contextLength,
    acceptsImages: null,
    async *reply(turns: readonly ChatTurn[], r: ReplyOptions): AsyncGenerator<ReplyEvent> {
      const body = {
        model,
        messages: turns.map(wireMessage),
        stream: true,
        stream_options: { include_usage: true },
        max_tokens: r.maxTokens,
        ...(r.temperature !== undefined ? { temperature: r.temperature } : {}),
        ...(r.schema ? { response_format: { type: 'json_schema', json_schema: { name: 'schema', schema: r.schema, strict: true } } } : {}),
      };
      const started = performance.now();
      let deltas = 0;
      let finishReason = 'stop';
      let usage: StreamChunk['usage'] = null;
      try {
        const res = await fetch(endpoint, { method: 'POST', headers: { 'content-type': 'application/json', ...auth }, body: JSON.stringify(body), signal: r.signal, dispatcher });
        if (!res.ok || !res.body) throw new Error(errorMessage(res.status, await res.text().catch(() => '')));
        const parser = new SseParser();
        const decoder = new TextDecoder();
        for await (const bytes of res.body) {
          for (const data of parser.push(decoder.decode(bytes as Uint8Array, { stream: true }))) {
            if (data === '[DONE]') continue;
            const c = JSON.parse(data) as StreamChunk;
            if (c.error) throw new Error(c.error.message ?? 'the server ended the stream with an error');
            const choice = c.choices?.[0];
            const text = choice?.delta?.content;
            if (text) {
              deltas++;
              yield { type: 'delta', text };
            }
            if (choice?.finish_reason) finishReason = choice.finish_reason;
            if (c.usage) usage = c.usage;
          }
        }
      } catch (err) {
        if (!r.signal.aborted) throw err;
        finishReason = 'abort';
      }
      const completion = usage?.completion_tokens ?? deltas;
      const ms = performance.now() - started;
      yield {
        type: 'done',
        finishReason,
        promptTokens: usage?.prompt_tokens ?? 0,
        completionTokens: completion,
        // As the client sees it, prefill included: chunks may arrive in bursts, so a decode-only
        // rate from arrival times would be noise.
        tokensPerSecond: ms > 0 ? (completion * 1000) / ms : 0,
      };
    },
    async close() {
      // The proxy dispatcher is shared by the process; nothing of its own to close.
    },
  };
}
