// CORS and X-Request-Id over real HTTP: preflights on every route answered before auth, the
// Access-Control-* headers on successes, errors (thrown anywhere, down to the connection limit and
// unparseable URLs) and SSE streams, disallowed origins, and the defaults with and without a key.
import { connect } from 'node:net';
import { Command } from 'commander';
import { registerServe } from '../../src/cli/commands/serve.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sleep } from '../engine/helpers.js';
import { normalizeOrigin, parseCorsOrigin, resolveCorsPolicy } from '../../src/server/cors.js';
import { MODEL_ID, post, raw, startFakeServer } from './helpers.js';

type Started = Awaited<ReturnType<typeof startFakeServer>>;

const APP = 'https://app.example';
const EVIL = 'https://evil.example';
const chat = { messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 };

const ROUTES: [string, string][] = [
  ['/health', 'GET'],
  ['/health/ready', 'GET'],
  ['/v1/models', 'GET'],
  [`/v1/models/${MODEL_ID}`, 'GET'],
  ['/v1/status', 'GET'],
  ['/metrics', 'GET'],
  ['/v1/chat/completions', 'POST'],
  ['/v1/completions', 'POST'],
];

const preflight = (url: string, path: string, origin: string, method = 'POST', headers: Record<string, string> = {}) =>
  raw(url, path, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': method, ...headers } });

/** Sends raw bytes and returns the whole answer (status line, headers, body) once the server closes or waitMs pass. */
function rawHttp(url: string, text: string, waitMs = 2_000): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    let data = '';
    const s = connect(Number(port), hostname, () => s.write(text));
    s.on('data', (c: Buffer) => (data += c.toString('latin1')));
    s.on('error', () => undefined);
    const done = () => (s.destroy(), resolve(data));
    s.once('close', done);
    setTimeout(done, waitMs);
  });
}

/** A header of a raw answer, lower-cased name; undefined when absent. */
function rawHeader(answer: string, name: string): string | undefined {
  const head = answer.slice(0, answer.indexOf('\r\n\r\n'));
  const line = head.split('\r\n').find((l) => l.toLowerCase().startsWith(`${name}:`));
  return line?.slice(name.length + 1).trim();
}

function expectAllowed(h: Headers, origin = APP) {
  expect(h.get('access-control-allow-origin')).toBe(origin);
  expect(h.get('access-control-expose-headers')).toMatch(/x-request-id/);
  expect(h.get('access-control-expose-headers')).toMatch(/retry-after/);
  expect(h.get('access-control-allow-credentials')).toBeNull();
  if (origin !== '*') expect(h.get('vary')).toMatch(/Origin/);
}

describe('the policy from --cors-origin', () => {
  it('normalizes origins as browsers send them and rejects what is not one', () => {
    expect(normalizeOrigin('HTTPS://App.Example:443/')).toBe('https://app.example');
    expect(normalizeOrigin('http://localhost:5173')).toBe('http://localhost:5173');
    expect(normalizeOrigin('chrome-extension://abcdef')).toBe('chrome-extension://abcdef');
    for (const bad of ['app.example', 'https://app.example/path', 'null', '', 'https://user@app.example', 'http://a b']) {
      expect(normalizeOrigin(bad)).toBeNull();
    }
    expect(() => parseCorsOrigin('app.example')).toThrow(/--cors-origin "app.example" is not an origin/);
    expect(parseCorsOrigin(' * ')).toBe('*');
  });

  it('defaults to no origin without a key and any origin with one; * allows any', () => {
    expect(resolveCorsPolicy(undefined, false)).toEqual({ any: false, origins: new Set() });
    expect(resolveCorsPolicy([], true)).toEqual({ any: true, origins: new Set() });
    expect(resolveCorsPolicy([APP], true)).toEqual({ any: false, origins: new Set([APP]) });
    expect(resolveCorsPolicy([APP, '*'], false).any).toBe(true);
  });

  it('rapid serve refuses a --cors-origin that is not an origin before loading anything', async () => {
    const program = new Command('rapid').exitOverride().configureOutput({ writeErr: () => undefined, writeOut: () => undefined });
    registerServe(program);
    await expect(program.parseAsync(['node', 'rapid', 'serve', '/nonexistent', '--cors-origin', 'app.example'])).rejects.toThrow(/"app.example" is not an origin/);
  });
});

describe('CORS on a keyless server with --cors-origin', () => {
  let s: Started;
  let tight: Started;
  beforeAll(async () => {
    s = await startFakeServer({ stepMs: 1 }, {}, { corsOrigins: [`${APP}/`, 'http://localhost:5173'], maxBodyBytes: 4096 });
    tight = await startFakeServer({ stepMs: 1 }, {}, { corsOrigins: [APP], limits: { bodyIdleTimeoutMs: 300, maxConnections: 1 } });
  });
  afterAll(async () => {
    await s.server.close(100);
    await tight.server.close(100);
  });

  it.each(ROUTES)('answers a preflight for %s (%s) with 204 and what it asked for', async (path, method) => {
    const r = await preflight(s.url, path, APP, method, { 'access-control-request-headers': 'Content-Type, Authorization, X-Stainless-OS, OpenAI-Organization, x-request-id' });
    expect(r.status).toBe(204);
    expect(r.text).toBe('');
    expectAllowed(r.headers);
    expect(r.headers.get('access-control-allow-methods')).toBe(`${method}, OPTIONS`);
    expect(r.headers.get('access-control-allow-headers')).toBe('content-type, authorization, x-stainless-os, openai-organization, x-request-id');
    expect(r.headers.get('access-control-max-age')).toBe('7200');
    expect(r.headers.get('vary')).toMatch(/Access-Control-Request-Headers/);
  });

  it('allows the SDK headers when a preflight names none, grants private-network access, and 404s an unknown route', async () => {
    const r = await preflight(s.url, '/v1/chat/completions', 'http://localhost:5173', 'POST', { 'access-control-request-private-network': 'true' });
    expect(r.status).toBe(204);
    expectAllowed(r.headers, 'http://localhost:5173');
    expect(r.headers.get('access-control-allow-headers')).toMatch(/authorization.*content-type.*x-api-key.*anthropic-version/);
    expect(r.headers.get('access-control-allow-private-network')).toBe('true');
    // A header list that is not plain names is not echoed.
    const odd = await preflight(s.url, '/v1/completions', APP, 'POST', { 'access-control-request-headers': 'a b, (c)' });
    expect(odd.headers.get('access-control-allow-headers')).toMatch(/^authorization, content-type/);
    const missing = await preflight(s.url, '/v1/nothing', APP);
    expect(missing.status).toBe(404);
    expectAllowed(missing.headers);
  });

  it('refuses a preflight from another origin with a 403 naming the flag, without Allow-Origin', async () => {
    const r = await preflight(s.url, '/v1/chat/completions', EVIL);
    expect(r.status).toBe(403);
    expect(r.json().error.code).toBe('cors_origin_not_allowed');
    expect(r.json().error.message).toContain(`--cors-origin ${EVIL}`);
    expect(r.headers.get('access-control-allow-origin')).toBeNull();
    // A plain OPTIONS (no preflight, curl -X OPTIONS) just lists the methods.
    const plain = await raw(s.url, '/v1/chat/completions', { method: 'OPTIONS' });
    expect(plain.status).toBe(204);
    expect(plain.headers.get('allow')).toBe('POST, OPTIONS');
  });

  it('puts the headers on a completion, on a streamed one, and never on another origin', async () => {
    const ok = await post(s.url, '/v1/chat/completions', chat, { origin: APP });
    expect(ok.status).toBe(200);
    expectAllowed(ok.headers);
    const res = await fetch(`${s.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', origin: APP }, body: JSON.stringify({ ...chat, stream: true }) });
    expect(res.headers.get('content-type')).toMatch(/text\/event-stream/);
    expectAllowed(res.headers);
    expect(await res.text()).toMatch(/data: \[DONE\]/);
    const models = await raw(s.url, '/v1/models', { headers: { origin: EVIL } });
    expect(models.status).toBe(200);
    expect(models.headers.get('access-control-allow-origin')).toBeNull();
    expect(models.headers.get('vary')).toBe('Origin');
  });

  it('puts them on errors: 400, 403 cross-site, 404, 405, 413', async () => {
    const bad = await post(s.url, '/v1/chat/completions', '{"messages":', { origin: APP });
    expect(bad.status).toBe(400);
    expectAllowed(bad.headers);
    expect(bad.json().error.code).toBe('invalid_json');
    const field = await post(s.url, '/v1/chat/completions', { messages: 'nope' }, { origin: APP });
    expect(field.status).toBe(400);
    expectAllowed(field.headers);
    const notFound = await raw(s.url, '/v1/nothing', { headers: { origin: APP } });
    expect(notFound.status).toBe(404);
    expectAllowed(notFound.headers);
    const wrongMethod = await raw(s.url, '/v1/chat/completions', { headers: { origin: APP } });
    expect(wrongMethod.status).toBe(405);
    expectAllowed(wrongMethod.headers);
    const big = await post(s.url, '/v1/chat/completions', { ...chat, pad: 'x'.repeat(8000) }, { origin: APP });
    expect(big.status).toBe(413);
    expectAllowed(big.headers);
  });

  it('puts them on a 408 stalled body, a 503 past the connection limit and a 400 for an unparseable URL', async () => {
    const stalled = await rawHttp(tight.url, `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\norigin: ${APP}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"mess`);
    expect(stalled).toMatch(/^HTTP\/1\.1 408/);
    expect(rawHeader(stalled, 'access-control-allow-origin')).toBe(APP);
    expect(rawHeader(stalled, 'x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    await sleep(50); // its connection's close is counted
    const url = await rawHttp(tight.url, `GET //[ HTTP/1.1\r\nhost: x\r\norigin: ${APP}\r\nconnection: close\r\n\r\n`);
    expect(url).toMatch(/^HTTP\/1\.1 400/);
    expect(rawHeader(url, 'access-control-allow-origin')).toBe(APP);
    // One connection held open: the next one is past the limit.
    const { hostname, port } = new URL(tight.url);
    const held = connect(Number(port), hostname);
    await new Promise((r) => held.once('connect', r));
    await sleep(50);
    try {
      const over = await rawHttp(tight.url, `GET /v1/models HTTP/1.1\r\nhost: x\r\norigin: ${APP}\r\nx-request-id: busy-1\r\n\r\n`);
      expect(over).toMatch(/^HTTP\/1\.1 503/);
      expect(rawHeader(over, 'access-control-allow-origin')).toBe(APP);
      expect(rawHeader(over, 'access-control-expose-headers')).toMatch(/retry-after/);
      expect(rawHeader(over, 'x-request-id')).toBe('busy-1');
    } finally {
      held.destroy();
    }
  });
});

describe('CORS defaults', () => {
  it('a keyless server without --cors-origin sends no CORS headers and refuses every preflight', async () => {
    const s = await startFakeServer({ stepMs: 1 }, {}, {});
    try {
      const r = await preflight(s.url, '/v1/chat/completions', APP);
      expect(r.status).toBe(403);
      expect(r.json().error.message).toMatch(/without --api-key allows no web page/);
      expect(r.headers.get('access-control-allow-origin')).toBeNull();
      const models = await raw(s.url, '/v1/models', { headers: { origin: APP } });
      expect(models.headers.get('access-control-allow-origin')).toBeNull();
      expect(models.headers.get('access-control-expose-headers')).toBeNull();
      expect(models.headers.get('vary')).toBeNull();
      expect((await post(s.url, '/v1/chat/completions', chat, { origin: APP })).status).toBe(403);
    } finally {
      await s.server.close(100);
    }
  });

  it('with --api-key any origin may call: the preflight skips the key, errors and answers carry *', async () => {
    const s = await startFakeServer({ stepMs: 1 }, {}, { apiKey: 'sekret' });
    try {
      const r = await preflight(s.url, '/v1/chat/completions', EVIL, 'POST', { 'access-control-request-headers': 'authorization, content-type' });
      expect(r.status).toBe(204);
      expectAllowed(r.headers, '*');
      expect(r.headers.get('access-control-allow-headers')).toBe('authorization, content-type');
      const denied = await post(s.url, '/v1/chat/completions', chat, { origin: EVIL });
      expect(denied.status).toBe(401);
      expectAllowed(denied.headers, '*');
      expect(denied.headers.get('access-control-expose-headers')).toMatch(/www-authenticate/);
      const ok = await post(s.url, '/v1/chat/completions', chat, { origin: EVIL, authorization: 'Bearer sekret' });
      expect(ok.status).toBe(200);
      expectAllowed(ok.headers, '*');
      expect(ok.headers.get('vary')).toBeNull();
    } finally {
      await s.server.close(100);
    }
  });

  it('with --api-key and --cors-origin only those origins may call', async () => {
    const s = await startFakeServer({ stepMs: 1 }, {}, { apiKey: 'sekret', corsOrigins: [APP] });
    try {
      expect((await preflight(s.url, '/v1/models', APP, 'GET')).status).toBe(204);
      expect((await preflight(s.url, '/v1/models', EVIL, 'GET')).status).toBe(403);
      const other = await raw(s.url, '/v1/models', { headers: { origin: EVIL, authorization: 'Bearer sekret' } });
      expect(other.status).toBe(200);
      expect(other.headers.get('access-control-allow-origin')).toBeNull();
    } finally {
      await s.server.close(100);
    }
  });
});

describe('X-Request-Id', () => {
  let s: Started;
  beforeAll(async () => {
    s = await startFakeServer({ stepMs: 1 }, {}, { apiKey: 'sekret' });
  });
  afterAll(async () => {
    await s.server.close(100);
  });
  const auth = { authorization: 'Bearer sekret' };

  it("echoes the client's id on answers, errors and streams", async () => {
    expect((await raw(s.url, '/health', { headers: { 'x-request-id': 'abc-123' } })).headers.get('x-request-id')).toBe('abc-123');
    expect((await post(s.url, '/v1/chat/completions', chat, { 'x-request-id': 'r:1' })).headers.get('x-request-id')).toBe('r:1'); // 401
    expect((await raw(s.url, '/nope', { headers: { ...auth, 'x-request-id': 'r:2' } })).headers.get('x-request-id')).toBe('r:2');
    const res = await fetch(`${s.url}/v1/chat/completions`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json', 'x-request-id': 'stream-9' }, body: JSON.stringify({ ...chat, stream: true }) });
    expect(res.headers.get('x-request-id')).toBe('stream-9');
    await res.text();
  });

  it('generates one when absent, too long or not visible ASCII, and the SDK sees it', async () => {
    const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
    const a = (await raw(s.url, '/health')).headers.get('x-request-id');
    const b = (await raw(s.url, '/health')).headers.get('x-request-id');
    expect(a).toMatch(uuid);
    expect(b).toMatch(uuid);
    expect(a).not.toBe(b);
    expect((await raw(s.url, '/health', { headers: { 'x-request-id': 'x'.repeat(129) } })).headers.get('x-request-id')).toMatch(uuid);
    expect((await raw(s.url, '/health', { headers: { 'x-request-id': 'x'.repeat(128) } })).headers.get('x-request-id')).toBe('x'.repeat(128));
    expect((await raw(s.url, '/health', { headers: { 'x-request-id': 'a b' } })).headers.get('x-request-id')).toMatch(uuid);
    const completion = await s.client.chat.completions.create({ model: MODEL_ID, max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] }, { headers: { 'x-request-id': 'sdk-7' } });
    expect(completion._request_id).toBe('sdk-7');
  });
});
