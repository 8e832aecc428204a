// How `rapid serve` writes its log: `[rapid] ...` lines for people, or one JSON object per line
// for log shippers (Loki, Elasticsearch, CloudWatch). Access entries use the same stream.
import { InvalidArgumentError } from 'commander';
import type { AccessEntry } from '../server/access-log.js';

export type LogFormat = 'text' | 'json';

export const LOG_FORMATS: readonly LogFormat[] = ['text', 'json'];

export function parseLogFormat(value: string): LogFormat {
  if (value !== 'text' && value !== 'json') throw new InvalidArgumentError(`expected ${LOG_FORMATS.join(' or ')}, got "${value}"`);
  return value;
}

export interface ServeLogger {
  /** A message (start-up, shutdown, an internal error). */
  log(line: string): void;
  /** One request's access entry. */
  access(e: AccessEntry): void;
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(3)}s`;

/** The access entry as one human-readable line (fields that do not apply are left out). */
export function accessText(e: AccessEntry): string {
  const parts = [`${e.method} ${e.route} ${e.status} ${seconds(e.durationMs)}`, `id=${e.requestId}`, `model=${e.model}`];
  if (e.promptTokens !== null) parts.push(`prompt=${e.promptTokens}`, `output=${e.outputTokens}`, `cached=${e.cachedTokens}`);
  if (e.ttftMs !== null) parts.push(`ttft=${seconds(e.ttftMs)}`);
  if (e.finishReason !== null) parts.push(`finish=${e.finishReason}`);
  if (e.incomplete) parts.push('incomplete');
  return parts.join(' ');
}

/** The access entry as the JSON object of one log line (snake_case, as log pipelines expect). */
export function accessJson(e: AccessEntry): Record<string, unknown> {
  return {
    msg: 'request',
    request_id: e.requestId,
    method: e.method,
    route: e.route,
    model: e.model,
    status: e.status,
    prompt_tokens: e.promptTokens,
    output_tokens: e.outputTokens,
    cached_tokens: e.cachedTokens,
    ttft_ms: e.ttftMs,
    duration_ms: e.durationMs,
    finish_reason: e.finishReason,
    incomplete: e.incomplete,
  };
}

export function createServeLogger(format: LogFormat, write: (text: string) => void): ServeLogger {
  if (format === 'json') {
    const line = (level: string, fields: Record<string, unknown>) => write(`${JSON.stringify({ time: new Date().toISOString(), level, ...fields })}\n`);
    return {
      log: (msg) => line('info', { msg }),
      access: (e) => line(e.status >= 500 ? 'error' : e.status >= 400 ? 'warn' : 'info', accessJson(e)),
    };
  }
  return {
    log: (msg) => write(`[rapid] ${msg}\n`),
    access: (e) => write(`[rapid] ${accessText(e)}\n`),
  };
}
