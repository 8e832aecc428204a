// X-Request-Id: the client's id echoed on the response (so a log line on either side can be
// matched), or a fresh one. Only a short run of visible ASCII is echoed: anything else could split
// a log line or smuggle text into it, so it is replaced rather than cut.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/** Longest client id echoed. */
export const MAX_REQUEST_ID_LENGTH = 128;

const VISIBLE_ASCII = new RegExp(`^[\\x21-\\x7e]{1,${MAX_REQUEST_ID_LENGTH}}$`);

/** The request's id: its X-Request-Id when that is 1-128 visible ASCII characters, else a new UUID. */
export function requestIdOf(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && VISIBLE_ASCII.test(given) ? given : randomUUID();
}
