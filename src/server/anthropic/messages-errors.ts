// Errors on the Messages routes in Anthropic's shape, {"type": "error", "error": {"type", "message"}},
// with the error type Anthropic's clients map from the status.
import { HttpError } from '../http-errors.js';

export interface AnthropicErrorBody {
  type: 'error';
  error: { type: string; message: string };
}

const TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  500: 'api_error',
  503: 'overloaded_error',
  529: 'overloaded_error',
};

export function anthropicErrorType(status: number): string {
  return TYPES[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error');
}

export function anthropicErrorBody(e: HttpError): AnthropicErrorBody {
  return { type: 'error', error: { type: anthropicErrorType(e.status), message: e.message } };
}

/** The Messages routes: their errors (401s and body errors before the handler included) take this shape. */
export function isMessagesPath(path: string): boolean {
  return path === '/v1/messages' || path.startsWith('/v1/messages/');
}

/** An HttpError from the chat parser restated in the Anthropic request's terms (paths and field names). */
export function translatedError(e: HttpError, translatedPath: (s: string) => string): HttpError {
  let message = translatedPath(e.message);
  let param = e.param === null ? null : translatedPath(e.param);
  if (param === 'stop') {
    message = message.replace(/\bstop\b/g, 'stop_sequences');
    param = 'stop_sequences';
  }
  // Anthropic's error shape has no param: the message names the field.
  if (param !== null && !message.includes(param)) message = `${param}: ${message}`;
  if (message === e.message && param === e.param) return e;
  return new HttpError(e.status, message, e.type, param, e.code, e.headers);
}
