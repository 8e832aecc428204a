// Hostile request lines and malformed HTTP over raw sockets: each gets a JSON 4xx and the server
// keeps serving (an unparseable URL used to throw inside the request listener and kill the process).
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { raw, startFakeServer } from './helpers.js';

type Started = Awaited<ReturnType<typeof startFakeServer>>;

function exchange(url: string, bytes: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const c = connect(Number(port), hostname, () => c.write(bytes));
    let d = '';
    c.on('data', (b: Buffer) => (d += b.toString('latin1')));
    c.on('close', () => resolve(d));
    c.on('error', () => undefined);
    setTimeout(() => c.destroy(), 3000).unref();
  });
}

const statusOf = (reply: string) => Number(/^HTTP\/1\.1 (\d{3})/.exec(reply)?.[1] ?? 0);
const codeOf = (reply: string) => (JSON.parse(reply.slice(reply.indexOf('\r\n\r\n') + 4)) as { error: { code: string } }).error.code;

describe('hostile HTTP', () => {
  let s: Started;
  beforeAll(async () => {
    s = await startFakeServer({ stepMs: 1 });
  });
  afterAll(async () => {
    await s.server.close(100);
  });

  it.each([
    ['GET //[ HTTP/1.1', 400, 'invalid_url'],
    ['GET http://[::1 HTTP/1.1', 400, 'invalid_url'],
    ['GET /v1/models/%E0%A4%A HTTP/1.1', 400, 'invalid_url'],
    ['GET * HTTP/1.1', 404, 'not_found'],
    ['PUT /v1/chat/completions HTTP/1.1', 405, 'method_not_allowed'],
    ['BREW /v1/chat/completions HTTP/1.1', 400, 'bad_http_request'],
  ])('%s -> %i %s', async (line, status, code) => {
    const reply = await exchange(s.url, `${line}\r\nHost: x\r\nConnection: close\r\n\r\n`);
    expect(statusOf(reply)).toBe(status);
    expect(codeOf(reply)).toBe(code);
    expect((await raw(s.url, '/health')).status).toBe(200);
  });

  it('answers the request in front of garbage, CONNECT and upgrades, instead of dropping the socket', async () => {
    // Content-Length short by 5: the rest parses as a broken second request behind the first.
    const body = JSON.stringify({ prompt: 'hello', max_tokens: 2 });
    const short = await exchange(s.url, `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length - 5}\r\n\r\n${body}`);
    expect(statusOf(short)).toBe(400);
    expect(codeOf(short)).toBe('invalid_json');
    // A GET with a body and no Content-Length: the body is the garbage.
    const get = await exchange(s.url, `GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n${body}`);
    expect(statusOf(get)).toBe(404);
    const connectReply = await exchange(s.url, 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n');
    expect(statusOf(connectReply)).toBe(405);
    const upgrade = await exchange(s.url, 'GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n');
    expect(statusOf(upgrade)).toBe(405);
    expect((await raw(s.url, '/health')).status).toBe(200);
  });

  it('closes a stream socket when its client asked for Connection: close', async () => {
    const body = JSON.stringify({ prompt: 'hello', max_tokens: 3, stream: true });
    const t0 = Date.now();
    const reply = await exchange(s.url, `POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    expect(statusOf(reply)).toBe(200);
    expect(reply).toContain('data: [DONE]');
    // Not held for the keep-alive timeout (5 s): closed as soon as the stream ends.
    expect(Date.now() - t0).toBeLessThan(2500);
  });

  it('serves 30 requests on one keep-alive socket without piling up listeners', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    try {
      const requests = Array.from({ length: 30 }, () => 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n').join('');
      const reply = await exchange(s.url, requests + 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
      expect(reply.match(/HTTP\/1\.1 200/g)?.length).toBe(31);
      await new Promise((r) => setImmediate(r));
      expect(warnings).not.toContain('MaxListenersExceededWarning');
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('answers malformed HTTP with a JSON 400 and closes', async () => {
    for (const bytes of ['GARBAGE\r\n\r\n', 'GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n', 'GET / HTTP/1.1\r\nBad Header\r\n\r\n']) {
      const reply = await exchange(s.url, bytes);
      expect(statusOf(reply)).toBe(400);
      expect(codeOf(reply)).toBe('bad_http_request');
    }
    const big = await exchange(s.url, `GET / HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    expect(statusOf(big)).toBe(431);
    expect((await raw(s.url, '/health')).status).toBe(200);
  });
});
