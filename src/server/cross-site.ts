// The cross-site rule for a server without an API key: a web page must not make it do work.
// Browsers send "simple" POSTs (text/plain, form, multipart) cross-site without a CORS preflight,
// and since Fetch they always send an Origin header (or fetch metadata) on a POST; curl and SDKs
// send neither. So a POST carrying a browser's marks from an origin not on the allow list is
// refused whatever its type (a foreign Origin with a JSON type never passed a preflight: it is a
// DNS-rebound page); a POST without them must still declare a JSON content type (old browsers sent
// form posts without an Origin), unless the server was started with --no-require-json-content-type.
// With an API key the key is the guard and none of this applies.
import type { IncomingMessage } from 'node:http';
import { HttpError } from './http-errors.js';
import { originAllowed, type CorsPolicy } from './cors.js';

export interface CrossSitePolicy {
  /** The origins allowed to POST to a keyless server (--cors-origin). */
  cors: CorsPolicy;
  /** Refuse keyless POSTs without an allowed Origin unless they declare a JSON content type. */
  requireJsonContentType: boolean;
}

/** application/json, or any +json type (application/vnd.x+json), parameters ignored. */
export function isJsonContentType(header: string | undefined): boolean {
  const type = (header ?? '').split(';', 1)[0]!.trim().toLowerCase();
  return type === 'application/json' || /^application\/[a-z0-9.!#$&^_-]+\+json$/.test(type);
}

/** Fetch metadata a browser attaches to a request another site started. */
const CROSS_SITE = new Set(['cross-site', 'same-site']);

/** Why a keyless server refuses this request, or null; only methods that act (POST and the like) are checked. */
export function crossSiteRefusal(req: IncomingMessage, policy: CrossSitePolicy): HttpError | null {
  const method = req.method ?? 'GET';
  if (method === 'GET' || method === 'HEAD' || method === 'OPTIONS') return null;
  const origin = typeof req.headers.origin === 'string' ? req.headers.origin : undefined;
  if (originAllowed(policy.cors, origin)) return null;
  const site = req.headers['sec-fetch-site'];
  if (origin !== undefined || (typeof site === 'string' && CROSS_SITE.has(site.toLowerCase()))) {
    return new HttpError(
      403,
      `cross-origin request${origin !== undefined ? ` from ${origin}` : ''} refused: this server has no API key, so web pages may not use it; ` +
        'start it with --cors-origin <origin> to allow that page, or with --api-key <key> and send Authorization: Bearer <key>',
      'invalid_request_error',
      null,
      'cross_origin_refused',
    );
  }
  if (policy.requireJsonContentType && !isJsonContentType(req.headers['content-type'])) {
    return new HttpError(
      415,
      `send the body as JSON with Content-Type: application/json (got ${req.headers['content-type'] ? `"${req.headers['content-type']}"` : 'none'}); ` +
        'this server has no API key and accepts no other type',
      'invalid_request_error',
      null,
      'unsupported_media_type',
    );
  }
  return null;
}
