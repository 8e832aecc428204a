// HTTP errors in OpenAI's JSON shape ({error: {message, type, param, code}}), and the mapping from
// engine errors to statuses.
import { EngineRequestError } from '../engine/engine-errors.js';
import { InvalidRequestError, EngineUnavailableError } from '../errors/request-errors.js';

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
    this.name = 'HttpError';
  }

  body(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export const badRequest = (message: string, param: string | null = null, code: string | null = null) =>
  new HttpError(400, message, 'invalid_request_error', param, code);

export const notFound = (message: string, code = 'not_found') => new HttpError(404, message, 'invalid_request_error', null, code);

/** Maps anything thrown while handling a request to the HTTP error the client sees. */
export function toHttpError(err: unknown): HttpError {
  if (err instanceof HttpError) return err;
  if (err instanceof InvalidRequestError) return badRequest(err.message, err.param ?? null);
  if (err instanceof EngineUnavailableError) {
    return new HttpError(503, err.message, 'server_error', null, err.reason, { 'retry-after': String(err.retryAfterSeconds) });
  }
  if (err instanceof EngineRequestError) {
    const status = err.code === 'watchdog' || err.code === 'shutdown' ? 503 : 500;
    return new HttpError(status, err.message, 'server_error', null, err.code);
  }
  if (err instanceof Error && err.name === 'ChatTemplateError') return badRequest(err.message, 'messages', 'chat_template_error');
  const message = err instanceof Error ? err.message : String(err);
  return new HttpError(500, `internal server error: ${message}`, 'server_error', null, 'internal_error');
}
