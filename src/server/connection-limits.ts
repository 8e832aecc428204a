// Connection hygiene for the HTTP server: the one place for header, body and keep-alive timeouts
// and the connection limit, and the code that applies them to a node:http server.
import type { Server, ServerOptions as HttpServerOptions } from 'node:http';
import type { Socket } from 'node:net';

export interface ConnectionLimits {
  /** Time from connection (or the previous response) until the request headers are complete. */
  headersTimeoutMs: number;
  /** Longest silence while a request body arrives. */
  bodyIdleTimeoutMs: number;
  /** Longest time to receive a whole body once its headers are in. */
  bodyTimeoutMs: number;
  /** How long an idle keep-alive socket is kept between requests. */
  keepAliveTimeoutMs: number;
  /** Open connections at most; past it a new connection's request gets 503 and the socket is closed. */
  maxConnections: number;
  /** Longest time a response may sit unsent because its client stopped reading (slow-read attack). */
  sendStallTimeoutMs: number;
}

export const CONNECTION_DEFAULTS: Readonly<ConnectionLimits> = {
  headersTimeoutMs: 10_000,
  bodyIdleTimeoutMs: 30_000,
  bodyTimeoutMs: 60_000,
  keepAliveTimeoutMs: 5_000,
  maxConnections: 1024,
  sendStallTimeoutMs: 60_000,
};

/** Bytes the kernel took (bytesWritten counts what is still queued in node too). */
const sent = (s: Socket) => s.bytesWritten - s.writableLength;

/** Sockets past the limit waiting for their 503, at most; beyond, new ones are dropped at once. */
const REJECT_BACKLOG = 64;

export function resolveConnectionLimits(given: Partial<ConnectionLimits> = {}): ConnectionLimits {
  const limits = { ...CONNECTION_DEFAULTS, ...given };
  for (const [name, value] of Object.entries(limits)) {
    if (!Number.isFinite(value) || value <= 0) throw new RangeError(`${name} must be a positive number, got ${value}`);
  }
  return limits;
}

/**
 * Options for http.createServer. Node checks header and request deadlines on a timer (30 s by
 * default, which is how stalled sockets lived 70 s and more), so the check runs at a tenth of the
 * header limit. requestTimeout is a backstop for bodies nobody reads (node drains them after an
 * early answer); bodies being read hit the body limits in readBody first, with a JSON 408.
 */
export function httpServerOptions(l: ConnectionLimits): HttpServerOptions {
  return {
    headersTimeout: l.headersTimeoutMs,
    requestTimeout: l.headersTimeoutMs + l.bodyTimeoutMs + 1_000,
    connectionsCheckingInterval: Math.max(10, Math.min(1_000, Math.floor(l.headersTimeoutMs / 10))),
    keepAliveTimeout: l.keepAliveTimeoutMs,
  };
}

/** The raw response for clientError: node's default has no body and is skipped on reused sockets. */
function rawJsonResponse(status: number, reason: string, code: string, message: string): string {
  const body = JSON.stringify({ error: { message, type: 'invalid_request_error', param: null, code } });
  return `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
}

/**
 * Counts connections and marks those past the limit (the request handler answers them 503 through
 * isOverLimit), answers malformed requests and header timeouts with a JSON error, and tracks which
 * sockets have a response in flight so such an answer never lands in the middle of one.
 */
export class ConnectionGuard {
  private open = 0;
  private rejecting = 0;
  private readonly overLimit = new WeakSet<Socket>();
  /** Responses in flight per socket (pipelined requests can overlap). */
  private readonly busy = new WeakMap<Socket, number>();
  /** Sockets to close once their responses are out (garbage arrived behind a request). */
  private readonly closeWhenIdle = new WeakSet<Socket>();
  /** Sockets with a response in flight -> when their output last moved (or had nothing queued). */
  private readonly sending = new Map<Socket, { at: number; bytes: number }>();
  private stallTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly http: Server,
    readonly limits: ConnectionLimits,
  ) {
    http.keepAliveTimeout = limits.keepAliveTimeoutMs;
    http.prependListener('connection', (socket: Socket) => this.onConnection(socket));
    http.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => this.onClientError(err, socket));
    // Without listeners node drops CONNECT and Upgrade sockets with no answer.
    const refuse = (_req: unknown, socket: Socket) => this.answerAndClose(socket, rawJsonResponse(405, 'Method Not Allowed', 'method_not_allowed', 'CONNECT and protocol upgrades are not supported'));
    http.on('connect', refuse);
    http.on('upgrade', refuse);
  }

  get connections(): number {
    return this.open;
  }

  isOverLimit(socket: Socket): boolean {
    return this.overLimit.has(socket);
  }

  /** Marks a socket as writing a response until `done` fires. */
  responding(socket: Socket, done: (cb: () => void) => void): void {
    this.busy.set(socket, (this.busy.get(socket) ?? 0) + 1);
    this.watchSends(socket);
    done(() => {
      const left = (this.busy.get(socket) ?? 1) - 1;
      this.busy.set(socket, left);
      if (left === 0) this.sending.delete(socket);
      if (left === 0 && this.closeWhenIdle.has(socket)) socket.destroySoon();
    });
  }

  /** Stops the stall check (server closing). */
  stop(): void {
    clearInterval(this.stallTimer);
    this.stallTimer = undefined;
  }

  /**
   * A client that stops reading leaves output queued in node (once the kernel buffers are full) and
   * its socket held forever: nothing times out while a response is in flight. One timer checks
   * every responding socket and closes those whose queued output has not moved for the limit.
   */
  private watchSends(socket: Socket): void {
    this.sending.set(socket, { at: performance.now(), bytes: sent(socket) });
    if (this.stallTimer) return;
    const every = Math.max(10, Math.min(1_000, Math.floor(this.limits.sendStallTimeoutMs / 4)));
    this.stallTimer = setInterval(() => {
      const now = performance.now();
      for (const [s, last] of this.sending) {
        if (s.writableLength === 0 || sent(s) !== last.bytes) this.sending.set(s, { at: now, bytes: sent(s) });
        else if (now - last.at >= this.limits.sendStallTimeoutMs) {
          this.sending.delete(s);
          s.destroy();
        }
      }
      if (this.sending.size === 0) this.stop();
    }, every);
    this.stallTimer.unref();
  }

  private onConnection(socket: Socket): void {
    socket.once('close', () => this.sending.delete(socket));
    if (this.open < this.limits.maxConnections) {
      this.open++;
      socket.once('close', () => this.open--);
      return;
    }
    if (this.rejecting >= REJECT_BACKLOG) {
      socket.destroy();
      return;
    }
    this.rejecting++;
    this.overLimit.add(socket);
    socket.once('close', () => this.rejecting--);
  }

  private onClientError(err: NodeJS.ErrnoException, socket: Socket): void {
    if (!socket.writable || err.code === 'ECONNRESET') {
      socket.destroy();
      return;
    }
    if ((this.busy.get(socket) ?? 0) > 0) {
      // Let the answer in flight finish; the bytes after it are not a request worth answering.
      this.closeWhenIdle.add(socket);
      return;
    }
    const timeout = err.code === 'ERR_HTTP_REQUEST_TIMEOUT';
    const response = timeout
      ? rawJsonResponse(
          408,
          'Request Timeout',
          'headers_timeout',
          `the request did not arrive in time: headers are allowed ${this.limits.headersTimeoutMs} ms, a body ${this.limits.bodyTimeoutMs} ms more`,
        )
      : err.code === 'HPE_HEADER_OVERFLOW'
        ? rawJsonResponse(431, 'Request Header Fields Too Large', 'headers_too_large', 'the request headers are too large')
        : rawJsonResponse(400, 'Bad Request', 'bad_http_request', `the request is not valid HTTP/1.1 (${err.code ?? err.message})`);
    this.answerAndClose(socket, response);
  }

  private answerAndClose(socket: Socket, response: string): void {
    socket.end(response);
    // Do not wait on a client that never reads: the answer is best-effort.
    setTimeout(() => socket.destroy(), 1_000).unref();
  }
}
