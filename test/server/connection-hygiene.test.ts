// Connection hygiene over real sockets (node:net) with short limits: slowloris headers, stalled and
// trickled bodies, idle keep-alive sockets are closed within their limits; connections past the
// limit get a 503; a keyless server refuses browsers' cross-site requests but keeps curl working.
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sleep } from '../engine/helpers.js';
import { post, raw, startFakeServer } from './helpers.js';

type Started = Awaited<ReturnType<typeof startFakeServer>>;

/** Bytes received and when the server closed the socket (ms after open), or null if it did not within waitMs. */
interface Outcome {
  data: string;
  closedAfterMs: number | null;
}

function open(url: string): Promise<Socket> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect(Number(port), hostname, () => resolve(s));
    s.once('error', reject);
  });
}

/** Opens a socket, runs `feed` on it, and records what comes back until the server closes it or waitMs pass. */
async function watch(url: string, feed: (s: Socket, stopped: () => boolean) => Promise<void>, waitMs: number): Promise<Outcome> {
  const s = await open(url);
  const t0 = Date.now();
  let data = '';
  let closedAfterMs: number | null = null;
  s.on('data', (c: Buffer) => (data += c.toString('latin1')));
  s.on('error', () => undefined);
  const closed = new Promise<void>((r) => s.once('close', () => ((closedAfterMs = Date.now() - t0), r())));
  void feed(s, () => closedAfterMs !== null).catch(() => undefined);
  await Promise.race([closed, sleep(waitMs)]);
  s.destroy();
  return { data, closedAfterMs };
}

const trickle = (text: string, everyMs: number) => async (s: Socket, stopped: () => boolean) => {
  for (const ch of text) {
    if (stopped()) return;
    s.write(ch);
    await sleep(everyMs);
  }
};

const jsonBody = (data: string) => JSON.parse(data.slice(data.indexOf('\r\n\r\n') + 4)) as { error: { code: string; message: string } };

describe('connection limits over real sockets', () => {
  let s: Started;
  const limits = { headersTimeoutMs: 400, bodyIdleTimeoutMs: 400, bodyTimeoutMs: 1200, keepAliveTimeoutMs: 400, maxConnections: 6 };
  beforeAll(async () => {
    s = await startFakeServer({ stepMs: 1 }, {}, { limits });
  });
  afterAll(async () => {
    await s.server.close(100);
  });

  it('closes a connection whose headers trickle in byte by byte (slowloris) within the header limit', async () => {
    const headers = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\n' + 'X-Slow: ' + 'a'.repeat(200);
    const o = await watch(s.url, trickle(headers, 20), 5000);
    expect(o.closedAfterMs).not.toBeNull();
    expect(o.closedAfterMs!).toBeLessThan(400 + 1500);
    expect(o.data).toMatch(/^HTTP\/1\.1 408/);
    expect(o.data).toContain('headers_timeout');
  });

  it('closes a connection that never sends anything within the header limit', async () => {
    const o = await watch(s.url, async () => undefined, 5000);
    expect(o.closedAfterMs).not.toBeNull();
    expect(o.closedAfterMs!).toBeLessThan(400 + 1500);
  });

  it('answers 408 and closes when a body stalls mid-way', async () => {
    const body = JSON.stringify({ prompt: 'x'.repeat(200), max_tokens: 2 });
    const o = await watch(
      s.url,
      async (sock) => {
        sock.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 50)}`);
      },
      5000,
    );
    expect(o.closedAfterMs).not.toBeNull();
    expect(o.closedAfterMs!).toBeLessThan(400 + 1500);
    expect(o.data).toMatch(/^HTTP\/1\.1 408/);
    expect(jsonBody(o.data).error.code).toBe('body_timeout');
    expect(jsonBody(o.data).error.message).toMatch(/stalled/);
  });

  it('answers 408 and closes when a body trickles slower than the body limit allows', async () => {
    const body = JSON.stringify({ prompt: 'y'.repeat(400), max_tokens: 2 });
    const head = `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
    // One byte every 100 ms never trips the 400 ms idle limit; the 1.2 s total limit closes it.
    const o = await watch(s.url, async (sock, stopped) => (sock.write(head), trickle(body, 100)(sock, stopped)), 6000);
    expect(o.closedAfterMs).not.toBeNull();
    expect(o.closedAfterMs!).toBeLessThan(1200 + 1500);
    expect(o.data).toMatch(/^HTTP\/1\.1 408/);
    expect(jsonBody(o.data).error.code).toBe('body_timeout');
    expect(jsonBody(o.data).error.message).toMatch(/not complete after 1200 ms \([1-9]\d* bytes received\)/);
  });

  it('closes an idle keep-alive connection after its limit', async () => {
    const o = await watch(s.url, async (sock) => void sock.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n'), 5000);
    expect(o.data).toMatch(/^HTTP\/1\.1 200/);
    expect(o.closedAfterMs).not.toBeNull();
    expect(o.closedAfterMs!).toBeLessThan(400 + 1500);
  });

  it('answers 503 to connections past the limit, and accepts again once they close', async () => {
    const held = await Promise.all(Array.from({ length: limits.maxConnections }, () => open(s.url)));
    try {
      await sleep(50);
      const o = await watch(s.url, async (sock) => void sock.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n'), 3000);
      expect(o.data).toMatch(/^HTTP\/1\.1 503/);
      expect(o.data.toLowerCase()).toContain('connection: close');
      expect(jsonBody(o.data).error.code).toBe('too_many_connections');
      expect(o.closedAfterMs).not.toBeNull();
    } finally {
      held.forEach((h) => h.destroy());
    }
    await sleep(100);
    expect((await raw(s.url, '/health')).status).toBe(200);
  });
});

describe('cross-site requests on a keyless server', () => {
  let s: Started;
  let strict: Started;
  let lenient: Started;
  const chat = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
  beforeAll(async () => {
    s = await startFakeServer({ stepMs: 1 }, {}, { corsOrigins: ['https://app.example'] });
    strict = await startFakeServer({ stepMs: 1 }, {}, { requireJsonContentType: true });
    lenient = await startFakeServer({ stepMs: 1 }, {}, { requireJsonContentType: false });
  });
  afterAll(async () => {
    await s.server.close(100);
    await strict.server.close(100);
    await lenient.server.close(100);
  });

  const send = (url: string, headers: Record<string, string>, body = chat) => raw(url, '/v1/chat/completions', { method: 'POST', headers, body });

  it("refuses a browser's simple cross-site POST (text/plain, form, multipart) with 403 before doing any work", async () => {
    const before = s.engine.stats().requests.submitted;
    for (const ct of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
      const r = await send(s.url, { 'content-type': ct, origin: 'https://evil.example' });
      expect(r.status).toBe(403);
      expect(r.json().error.code).toBe('cross_origin_refused');
      expect(r.json().error.message).toMatch(/--cors-origin.*--api-key|--api-key.*--cors-origin/);
    }
    // Fetch metadata without an Origin (a browser all the same).
    expect((await send(s.url, { 'content-type': 'text/plain', 'sec-fetch-site': 'cross-site' })).status).toBe(403);
    // A foreign Origin with a JSON type never passed a preflight: a DNS-rebound page, refused too.
    expect((await send(s.url, { 'content-type': 'application/json', origin: 'http://evil.example:8000' })).status).toBe(403);
    expect(s.engine.stats().requests.submitted).toBe(before);
  });

  it('accepts JSON without an Origin and any type from an allowed Origin; curl -d without -H gets a 415 by default', async () => {
    expect((await send(s.url, { 'content-type': 'application/json' })).status).toBe(200);
    expect((await send(s.url, { 'content-type': 'application/json; charset=utf-8', 'sec-fetch-site': 'same-origin' })).status).toBe(200);
    expect((await send(s.url, { 'content-type': 'text/plain', origin: 'https://app.example' })).status).toBe(200);
    const form = await send(s.url, { 'content-type': 'application/x-www-form-urlencoded' });
    expect(form.status).toBe(415);
    expect(form.json().error.message).toMatch(/Content-Type: application\/json/);
    expect((await send(s.url, { 'content-type': 'text/plain' })).status).toBe(415);
    // GETs carry no body to act on and are readable cross-origin only through CORS.
    expect((await raw(s.url, '/v1/models', { headers: { origin: 'https://evil.example' } })).status).toBe(200);
  });

  it('requires a JSON content type (the default), with a 415 that says what to send', async () => {
    const r = await send(strict.url, { 'content-type': 'application/x-www-form-urlencoded' });
    expect(r.status).toBe(415);
    expect(r.json().error.code).toBe('unsupported_media_type');
    expect(r.json().error.message).toMatch(/Content-Type: application\/json/);
    expect((await send(strict.url, {})).status).toBe(415);
    expect((await send(strict.url, { 'content-type': 'application/json' })).status).toBe(200);
    expect((await send(strict.url, { 'content-type': 'application/vnd.rapid+json' })).status).toBe(200);
  });

  it('--no-require-json-content-type accepts curl -d (no browser marks) but still refuses a foreign Origin', async () => {
    expect((await send(lenient.url, { 'content-type': 'application/x-www-form-urlencoded' })).status).toBe(200);
    expect((await send(lenient.url, {})).status).toBe(200);
    expect((await send(lenient.url, { 'content-type': 'text/plain', origin: 'https://evil.example' })).status).toBe(403);
    expect((await send(lenient.url, { 'content-type': 'text/plain', 'sec-fetch-site': 'cross-site' })).status).toBe(403);
  });

  it('with an API key, the key is the guard: any origin and content type with the key, 401 without', async () => {
    const keyed = await startFakeServer({ stepMs: 1 }, {}, { apiKey: 'sekret', requireJsonContentType: true });
    try {
      expect((await send(keyed.url, { 'content-type': 'text/plain', origin: 'https://evil.example' })).status).toBe(401);
      expect((await send(keyed.url, { 'content-type': 'text/plain', origin: 'https://evil.example', authorization: 'Bearer sekret' })).status).toBe(200);
      expect((await post(keyed.url, '/v1/chat/completions', JSON.parse(chat), { authorization: 'Bearer sekret' })).status).toBe(200);
    } finally {
      await keyed.server.close(100);
    }
  });
});

describe('a client that stops reading', () => {
  it('has its socket closed once its queued output has not moved for the send-stall limit', { timeout: 60_000 }, async () => {
    // A long stream (about 10 MB of SSE) fills the loopback buffers of a client that reads nothing.
    const s = await startFakeServer({ contextLength: 40_000, blockSize: 64, numBlocks: 700 }, {}, { limits: { sendStallTimeoutMs: 500 } });
    try {
      const body = JSON.stringify({ prompt: 'go', max_tokens: 39_000, stream: true, logprobs: 5 });
      const sock = await open(s.url);
      const t0 = Date.now();
      sock.pause();
      sock.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
      sock.on('error', () => undefined);
      // A paused client never sees its close: watch the server's side of the connection instead.
      const serverSockets = () => new Promise<number>((r) => s.server.http.getConnections((_, n) => r(n)));
      await sleep(200);
      expect(await serverSockets()).toBe(1);
      let closedAt: number | null = null;
      while (closedAt === null && Date.now() - t0 < 40_000) {
        await sleep(100);
        if ((await serverSockets()) === 0) closedAt = Date.now() - t0;
      }
      sock.destroy();
      expect(closedAt).not.toBeNull();
      const st = (await raw(s.url, '/v1/status')).json();
      expect(st.running).toBe(0);
    } finally {
      await s.server.close(100);
    }
  });
});
