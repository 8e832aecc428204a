// One access-log entry per HTTP request: who asked what, how it ended, how long it took. The
// generation code notes tokens and the finish reason through an AsyncLocalStorage set around the
// route, so no route signature has to carry the record.
import { AsyncLocalStorage } from 'node:async_hooks';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { EngineDone } from '../engine/request.js';

export interface AccessEntry {
  requestId: string;
  method: string;
  /** The route template (/v1/models/:id), not the raw path: bounded and free of client text. */
  route: string;
  model: string;
  status: number;
  promptTokens: number | null;
  outputTokens: number | null;
  cachedTokens: number | null;
  /** Milliseconds from the request's arrival to its first token; null when none was produced. */
  ttftMs: number | null;
  durationMs: number;
  /** stop, length, tool_calls; abort when the client left, error when it failed; null for non-generating routes. */
  finishReason: string | null;
  /** The response was cut before it was complete (client gone, server closing). */
  incomplete: boolean;
}

/** Routes that load balancers and scrapers poll: logged only when they fail. */
const PROBE_ROUTES = new Set(['/health', '/health/ready', '/metrics']);

class AccessRecord {
  readonly started = performance.now();
  route = 'other';
  ttftMs: number | null = null;
  finishReason: string | null = null;
  usage: EngineDone['usage'] | null = null;

  constructor(
    readonly requestId: string,
    readonly method: string,
    public model: string,
  ) {}

  entry(status: number, incomplete: boolean): AccessEntry {
    return {
      requestId: this.requestId,
      method: this.method,
      route: this.route,
      model: this.model,
      status,
      promptTokens: this.usage?.promptTokens ?? null,
      outputTokens: this.usage?.completionTokens ?? null,
      cachedTokens: this.usage?.cachedTokens ?? null,
      ttftMs: this.ttftMs,
      durationMs: Math.round((performance.now() - this.started) * 10) / 10,
      finishReason: this.finishReason ?? (incomplete && this.ttftMs !== null ? 'abort' : null),
      incomplete,
    };
  }
}

const current = new AsyncLocalStorage<AccessRecord>();

/** The request was routed to this model (several models: known once the body is read). */
export function noteModel(id: string): void {
  const r = current.getStore();
  if (r) r.model = id;
}

/** The generation of the request being served produced its first token. */
export function noteFirstToken(): void {
  const r = current.getStore();
  if (r && r.ttftMs === null) r.ttftMs = Math.round((performance.now() - r.started) * 10) / 10;
}

/** The generation ended (tokens counted, finish reason as the client sees it). */
export function noteDone(done: EngineDone, finishReason: string): void {
  const r = current.getStore();
  if (!r) return;
  r.usage = done.usage;
  r.finishReason = finishReason;
}

/** The generation failed after it was queued. */
export function noteFailed(): void {
  const r = current.getStore();
  if (r) r.finishReason = 'error';
}

export interface AccessTracker {
  /** Names the route once the path is known. */
  setRoute(route: string): void;
  /** Runs the route with the record as the current one. */
  run<T>(fn: () => T): T;
}

/** Starts the record of one request; `sink` gets its entry when the response closes (probes only when they fail). */
export function trackAccess(req: IncomingMessage, res: ServerResponse, requestId: string, model: string, sink: (e: AccessEntry) => void): AccessTracker {
  const record = new AccessRecord(requestId, req.method ?? 'GET', model);
  res.once('close', () => {
    const e = record.entry(res.statusCode, !res.writableFinished);
    if (PROBE_ROUTES.has(e.route) && e.status < 400 && !e.incomplete) return;
    sink(e);
  });
  return {
    setRoute: (route) => void (record.route = route),
    run: (fn) => current.run(record, fn),
  };
}
