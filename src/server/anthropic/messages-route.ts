// POST /v1/messages and /v1/messages/count_tokens once the body is read: the Anthropic request is
// translated into a chat request (messages-request.ts), parsed by validate.ts, run through the
// protocol-neutral generation stream and shaped as an Anthropic message or its SSE events. Errors
// before anything is written are thrown (server.ts answers them in Anthropic's shape).
import type { ServerResponse } from 'node:http';
import { startGeneration, type GenerationDeps, type GenerationEvent } from '../generation-stream.js';
import { toHttpError } from '../http-errors.js';
import { loadRequestImages } from '../images.js';
import type { ServedModel } from '../served-model.js';
import { parseChatRequest, type GenerationRequest } from '../validate.js';
import type { RequestPolicy } from '../request-policy.js';
import { translatedError } from './messages-errors.js';
import { isKnownIgnoredField, translateMessagesRequest, type TranslatedRequest } from './messages-request.js';
import { anthropicUsage, fullMessage, messageId, MessageEventWriter, stopReason } from './messages-response.js';

export interface MessagesContext extends GenerationDeps {
  model: ServedModel;
  /** Ping interval while a stream is quiet (0 = off). */
  keepAliveMs: number;
  sendJson(res: ServerResponse, status: number, body: unknown): void;
  policy: RequestPolicy;
}

export interface MessagesRoute {
  create(res: ServerResponse, body: unknown): Promise<void>;
  countTokens(res: ServerResponse, body: unknown): Promise<void>;
}

export function createMessagesRoute(ctx: MessagesContext): MessagesRoute {
  /** Each ignored field is said once per server (the server's request policy), not per request. */
  const logIgnored = (fields: string[]) => {
    for (const f of fields) ctx.policy.note(f, isKnownIgnoredField(f) ? 'ignored' : 'unrecognized', '/v1/messages');
  };

  /** Parses a Messages body as a chat request and runs `then` on it; a 400 from either is restated in
   * the Anthropic request's terms (paths and field names). */
  async function withRequest<T>(body: unknown, kind: 'create' | 'count', then: (g: GenerationRequest) => Promise<T>): Promise<T> {
    const t: TranslatedRequest = translateMessagesRequest(body, kind);
    logIgnored(t.ignored);
    try {
      return await then(await parseChatRequest(t.chat, ctx.model, await loadRequestImages(t.chat, ctx.model), ctx.policy));
    } catch (err) {
      const e = toHttpError(err);
      throw e.status === 400 ? translatedError(e, t.translatedPath) : err;
    }
  }

  return {
    async countTokens(res, body) {
      const g = await withRequest(body, 'count', async (r) => r);
      ctx.sendJson(res, 200, { input_tokens: g.promptIds.length });
    },

    async create(res, body) {
      const id = messageId();
      // startGeneration throws before anything is queued (a schema the grammar refuses: 400).
      const { g, run } = await withRequest(body, 'create', async (r) => ({ g: r, run: await startGeneration(ctx, r, id) }));
      run.abortOnClose(res);
      if (!g.stream) {
        // A failure here is thrown before anything is written: server.ts answers with its status.
        for await (const ev of run.events) {
          if (ev.type !== 'done') continue;
          const message = fullMessage({
            id,
            model: ctx.model.id,
            reasoning: ev.reasoning,
            content: ev.content,
            toolCalls: ev.toolCalls,
            stop: stopReason(ev.finishReason, ev.engine),
            usage: anthropicUsage(ev.engine),
          });
          ctx.sendJson(res, 200, message);
        }
        return;
      }
      const out = new MessageEventWriter(res, ctx.keepAliveMs);
      out.start(id, ctx.model.id, run.numPromptTokens);
      let done: Extract<GenerationEvent, { type: 'done' }> | null = null;
      try {
        for await (const ev of run.events) {
          if (ev.type === 'step') out.parts(ev.parts);
          else done = ev;
        }
      } catch (err) {
        out.fail(toHttpError(err));
        return;
      }
      if (done === null) out.end(); // aborted: the client is gone
      else out.finish(stopReason(done.finishReason, done.engine), anthropicUsage(done.engine));
    },
  };
}
