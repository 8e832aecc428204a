// What one benchmark request came to: its timings, tokens and, when it failed, why.
import type { WorkloadKind } from './workload.js';

/** Why a request failed; every failed request has exactly one. */
export const FAILURE_TYPES = [
  'http_error', // a non-2xx status (httpStatus says which)
  'timeout', // no complete reply within --timeout-ms, or cut off by the level deadline
  'connection_dropped', // refused, reset, or the stream ended before the reply did
  'stream_error', // the server reported an error inside the stream, or sent unparseable chunks
  'empty_content', // a complete reply with no text
  'invalid_json', // a structured-output reply that does not parse as JSON
  'schema_violation', // parses, but does not satisfy --schema
  'not_started', // the level deadline passed before the request was sent
] as const;
export type FailureType = (typeof FAILURE_TYPES)[number];

/** Failures of a reply that did arrive in full: its latency and tokens still count. */
export const CONTENT_FAILURES: readonly FailureType[] = ['empty_content', 'invalid_json', 'schema_violation'];

export interface RequestOutcome {
  index: number;
  kind: WorkloadKind;
  ok: boolean;
  failure?: FailureType;
  /** The HTTP status, when response headers arrived. */
  httpStatus?: number;
  /** A short description of the failure. */
  error?: string;
  /** When the request was sent, ms after the level started. */
  startMs: number;
  /** Time to the first generated token (content or reasoning), ms. */
  ttftMs?: number;
  /** Gaps between successive token-bearing chunks, ms. */
  itlMs: number[];
  /** Send to last byte, ms. */
  e2eMs: number;
  /** usage.completion_tokens when the server sent usage, else the token-bearing chunks counted. */
  outputTokens: number;
  tokensFromUsage: boolean;
  promptTokens?: number;
  finishReason?: string;
  /** The reply text (content only, no reasoning). */
  content: string;
  /** Structured-output requests: whether the reply parsed as JSON, and satisfied the schema. */
  jsonValid?: boolean;
  schemaValid?: boolean;
}

/** A complete reply came back (whatever its content): the server did the work and it is timed. */
export function completed(o: RequestOutcome): boolean {
  return o.ok || (o.failure !== undefined && CONTENT_FAILURES.includes(o.failure));
}
