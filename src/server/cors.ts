// CORS: which web origins may read rapid's answers, the preflight (answered before auth, since
// browsers never send credentials on it), and the headers every response to an allowed origin
// carries. Without --cors-origin a keyless server allows no origin (any page could drive a local
// server, see cross-site.ts) and a keyed one allows any (the key is the guard, as at OpenAI).
// Access-Control-Allow-Credentials is never sent: clients authenticate with a header, not cookies.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { HttpError } from './http-errors.js';

export interface CorsPolicy {
  /** Every origin may read responses ("*"). */
  readonly any: boolean;
  /** Otherwise these origins, normalized (see normalizeOrigin). */
  readonly origins: ReadonlySet<string>;
}

/** How long a browser may cache a preflight answer (Chromium caps it at 2 h). */
export const PREFLIGHT_MAX_AGE_S = 7200;

/** Response headers a page may read besides the CORS-safelisted ones (SDKs read these). */
export const EXPOSED_HEADERS = ['x-request-id', 'retry-after', 'www-authenticate', 'allow'] as const;

/** Allowed when a preflight names no headers; what the OpenAI and Anthropic SDKs send from a page. */
const DEFAULT_ALLOWED_HEADERS = 'authorization, content-type, x-api-key, anthropic-version, x-request-id';

/** A preflight's Access-Control-Request-Headers is echoed when it is a short list of header names. */
const MAX_REQUESTED_HEADERS = 64;
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9a-z-]{1,128}$/;

/**
 * An origin as browsers send it: scheme://host[:port], lower case, no default port, no trailing
 * slash; null when the text is not one (a path, no scheme, or the opaque "null" origin).
 */
export function normalizeOrigin(text: string): string | null {
  const t = text.trim().replace(/\/+$/, '');
  if (!/^[a-z][a-z0-9+.-]*:\/\/[^/?#\s@]+$/i.test(t)) return null;
  if (/^https?:/i.test(t)) {
    try {
      return new URL(t).origin; // drops :80/:443, lower-cases the host, IDN to punycode
    } catch {
      return null;
    }
  }
  return t.toLowerCase(); // chrome-extension://id and the like: URL gives them an opaque origin
}

/** The policy for --cors-origin values (validated here: a typo must fail at start, not block every page). */
export function resolveCorsPolicy(corsOrigins: readonly string[] | undefined, hasApiKey: boolean): CorsPolicy {
  const given = corsOrigins ?? [];
  if (given.length === 0) return { any: hasApiKey, origins: new Set() };
  const origins = new Set<string>();
  for (const o of given) {
    if (o.trim() === '*') return { any: true, origins: new Set() };
    origins.add(parseCorsOrigin(o));
  }
  return { any: false, origins };
}

/** One --cors-origin value, normalized; throws a RangeError naming it when it is not an origin. */
export function parseCorsOrigin(value: string): string {
  if (value.trim() === '*') return '*';
  const o = normalizeOrigin(value);
  if (o === null) throw new RangeError(`--cors-origin ${JSON.stringify(value)} is not an origin: give scheme://host[:port] (e.g. https://app.example or http://localhost:5173), or * for any`);
  return o;
}

export function originAllowed(policy: CorsPolicy, origin: string | undefined): boolean {
  if (origin === undefined) return false;
  if (policy.any) return true;
  const o = normalizeOrigin(origin);
  return o !== null && policy.origins.has(o);
}

const requestOrigin = (req: IncomingMessage) => (typeof req.headers.origin === 'string' ? req.headers.origin : undefined);

/**
 * Sets the CORS headers on `res` before anything is written: writeHead (sendJson, SseWriter, the
 * error path) merges them into every response, so one call at the top of the handler covers all.
 */
export function applyCorsHeaders(req: IncomingMessage, res: ServerResponse, policy: CorsPolicy): void {
  // Answers differ by Origin unless every origin gets "*": shared caches must key on it.
  if (!policy.any && policy.origins.size > 0) res.setHeader('vary', 'Origin');
  const origin = requestOrigin(req);
  if (!originAllowed(policy, origin)) return;
  res.setHeader('access-control-allow-origin', policy.any ? '*' : origin!);
  res.setHeader('access-control-expose-headers', EXPOSED_HEADERS.join(', '));
}

/** The header names a preflight asks for, lower case, or null when the list is missing or not plain names. */
function requestedHeaders(req: IncomingMessage): string | null {
  const h = req.headers['access-control-request-headers'];
  if (typeof h !== 'string' || h.trim() === '') return null;
  const names = h.split(',').map((n) => n.trim().toLowerCase()).filter((n) => n !== '');
  if (names.length === 0 || names.length > MAX_REQUESTED_HEADERS || !names.every((n) => HEADER_NAME.test(n))) return null;
  return [...new Set(names)].join(', ');
}

/**
 * Answers an OPTIONS request for a route accepting `methods`. A preflight (Origin and
 * Access-Control-Request-Method) from an allowed origin gets 204 with what it asked for; from any
 * other origin a 403 naming the flag (the browser blocks the call either way, the status tells the
 * developer why). A plain OPTIONS (no preflight) gets 204 with Allow.
 */
export function answerOptions(req: IncomingMessage, res: ServerResponse, policy: CorsPolicy, methods: readonly string[]): void {
  const allow = [...new Set([...methods, 'OPTIONS'])].join(', ');
  const origin = requestOrigin(req);
  const preflight = origin !== undefined && typeof req.headers['access-control-request-method'] === 'string';
  if (preflight && !originAllowed(policy, origin)) {
    throw new HttpError(
      403,
      `cross-origin requests from ${origin} are not allowed: start the server with --cors-origin ${origin}` +
        (policy.any || policy.origins.size > 0 ? '' : ' (a server without --api-key allows no web page by default)'),
      'invalid_request_error',
      null,
      'cors_origin_not_allowed',
    );
  }
  const headers: Record<string, string> = { allow };
  if (preflight) {
    headers['access-control-allow-methods'] = allow;
    headers['access-control-allow-headers'] = requestedHeaders(req) ?? DEFAULT_ALLOWED_HEADERS;
    headers['access-control-max-age'] = String(PREFLIGHT_MAX_AGE_S);
    // Chromium's Private Network Access: a public page calling a server on localhost or the LAN.
    if (String(req.headers['access-control-request-private-network']).toLowerCase() === 'true') headers['access-control-allow-private-network'] = 'true';
    res.setHeader('vary', 'Origin, Access-Control-Request-Method, Access-Control-Request-Headers');
  }
  res.writeHead(204, headers);
  res.end();
}
