// POST /v1/responses (the OpenAI Responses API) over the shared generation stream, and
// GET/DELETE /v1/responses/{id} (+ /input_items) for stored responses. A request is translated to
// a chat request (request.ts) and validated by the chat parser; output items and events come from
// events.ts; finished responses are kept in the bounded store unless store is false.
import type { ServerResponse } from 'node:http';
import { startGeneration, type GenerationDeps } from '../generation-stream.js';
import { HttpError, toHttpError } from '../http-errors.js';
import { loadRequestImages } from '../images.js';
import type { ServedModel } from '../served-model.js';
import { SseWriter } from '../sse.js';
import { parseChatRequest } from '../validate.js';
import type { RequestPolicy } from '../request-policy.js';
import { ResponseBuilder, newResponseId } from './events.js';
import { parseResponsesRequest } from './request.js';
import type { ResponseStore } from './store.js';

export interface ResponsesContext {
  deps: GenerationDeps;
  model: ServedModel;
  keepAliveMs: number;
  store: ResponseStore;
  /** The server's field policy: each ignored field is logged once per server, whatever the route. */
  policy: RequestPolicy;
  sendJson(res: ServerResponse, status: number, body: unknown, headers?: Record<string, string>): void;
}

export async function createResponse(ctx: ResponsesContext, res: ServerResponse, raw: unknown): Promise<void> {
  const r = parseResponsesRequest(raw, ctx.store);
  for (const f of r.ignored) ctx.policy.note(f, 'ignored', '/v1/responses');
  const id = newResponseId();
  try {
    // Images are fetched/decoded first; any problem is a 400 before anything is queued.
    const g = await parseChatRequest(r.chat, ctx.model, await loadRequestImages(r.chat, ctx.model), ctx.policy);
    const run = await startGeneration(ctx.deps, g, id);
    const shell = {
      id,
      object: 'response',
      created_at: Math.floor(Date.now() / 1000),
      background: false,
      instructions: r.instructions,
      max_output_tokens: r.echo.max_output_tokens,
      model: ctx.model.id,
      parallel_tool_calls: r.echo.parallel_tool_calls,
      previous_response_id: r.previousResponseId,
      reasoning: r.echo.reasoning,
      service_tier: 'default',
      store: r.store,
      temperature: g.params.temperature,
      text: r.echo.text,
      tool_choice: r.echo.tool_choice,
      tools: r.echo.tools,
      top_p: g.params.topP,
      truncation: 'disabled',
      user: r.echo.user,
      metadata: r.echo.metadata,
    };
    run.abortOnClose(res);
    const keep = (final: Record<string, unknown>) => {
      if (r.store) ctx.store.put(id, { response: final, input: r.input });
    };
    if (r.stream) {
      const sse = new SseWriter(res, ctx.keepAliveMs);
      sse.open();
      const b = new ResponseBuilder(shell, (type, ev) => sse.sendEvent(type, ev));
      b.start();
      try {
        for await (const ev of run.events) {
          if (ev.type === 'step') b.step(ev.parts);
          else keep(b.finish(ev));
        }
      } catch (err) {
        b.fail(toHttpError(err)); // the stream always ends, with the reason
      }
      sse.end(false); // Responses streams have no [DONE]
      return;
    }
    const b = new ResponseBuilder(shell, null);
    for await (const ev of run.events) {
      if (ev.type === 'step') b.step(ev.parts);
      else {
        const final = b.finish(ev);
        keep(final);
        ctx.sendJson(res, 200, final);
      }
    }
  } catch (err) {
    throw r.renameError(err); // answered by the server with the error's status
  }
}

/** GET / DELETE /v1/responses/{id} and GET /v1/responses/{id}/input_items. */
export function storedResponse(ctx: Pick<ResponsesContext, 'store' | 'sendJson'>, res: ServerResponse, method: string, rest: string): void {
  const [id, sub, ...more] = rest.split('/');
  const notStored = () => new HttpError(404, `Response with id '${id}' not found (unknown, stored with store: false, or evicted)`, 'invalid_request_error', 'response_id', 'not_found');
  if (!id || more.length > 0 || (sub !== undefined && sub !== 'input_items')) throw new HttpError(404, `no route ${method} /v1/responses/${rest}`, 'invalid_request_error', null, 'not_found');
  const allowed = sub === undefined ? ['GET', 'DELETE'] : ['GET'];
  if (!allowed.includes(method)) {
    throw new HttpError(405, `/v1/responses/{id}${sub ? `/${sub}` : ''} accepts ${allowed.join(', ')}`, 'invalid_request_error', null, 'method_not_allowed', { allow: allowed.join(', ') });
  }
  if (method === 'DELETE') {
    if (!ctx.store.delete(id)) throw notStored();
    ctx.sendJson(res, 200, { id, object: 'response.deleted', deleted: true });
    return;
  }
  const s = ctx.store.get(id);
  if (!s) throw notStored();
  if (sub === undefined) {
    ctx.sendJson(res, 200, s.response);
    return;
  }
  const data = s.input;
  const ids = data.map((i) => (typeof i.id === 'string' ? i.id : null));
  ctx.sendJson(res, 200, { object: 'list', data, first_id: ids[0] ?? null, last_id: ids[ids.length - 1] ?? null, has_more: false });
}
