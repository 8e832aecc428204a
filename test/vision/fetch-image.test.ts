import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { InvalidRequestError } from '../../src/errors/request-errors.js';
import { fetchImageBytes, type FetchImageOptions } from '../../src/vision/fetch-image.js';
import { blockedAddressKind } from '../../src/vision/ip-policy.js';
import { ForwardProxy } from '../helpers/forward-proxy.js';

async function refused(url: string, options: FetchImageOptions, pattern: RegExp): Promise<void> {
  const err = await fetchImageBytes(url, options).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(InvalidRequestError);
  expect((err as Error).message).toMatch(pattern);
}

describe('data: URIs', () => {
  const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 1, 2, 3, 4]);
  it('decodes base64 (and base64url)', async () => {
    expect(Buffer.from(await fetchImageBytes(`data:image/png;base64,${png.toString('base64')}`))).toEqual(png);
    expect(Buffer.from(await fetchImageBytes(`data:;base64,${png.toString('base64url')}`))).toEqual(png);
  });
  it('refuses malformed, non-base64, non-image and oversized payloads', async () => {
    await refused('data:image/png;base64', {}, /no comma/);
    await refused('data:image/png,abc', {}, /base64 encoded/);
    await refused('data:text/html;base64,PGI+', {}, /media type text\/html/);
    await refused('data:image/png;base64,@@@@', {}, /not valid base64/);
    await refused('data:image/png;base64,', {}, /empty/);
    await refused(`data:image/png;base64,${Buffer.alloc(300).toString('base64')}`, { maxBytes: 200 }, /larger than the 200 bytes limit/);
  });
});

describe('scheme and remote policy', () => {
  it('never reads file paths or other schemes', async () => {
    await refused('/etc/passwd', { allowRemote: true }, /file paths are not accepted/);
    await refused('file:///etc/passwd', { allowRemote: true }, /file: URLs are not accepted/);
    await refused('ftp://example.com/a.png', { allowRemote: true }, /ftp: URLs are not accepted/);
  });
  it('refuses http(s) unless remote images are allowed', async () => {
    await refused('https://example.com/a.png', {}, /remote image URLs are disabled/);
  });
  it('refuses private, loopback, link-local and other non-public IP literals before connecting', async () => {
    const urls = [
      'http://127.0.0.1/a.png',
      'http://2130706433/a.png', // 127.0.0.1 in decimal
      'http://10.1.2.3/a.png',
      'http://172.16.0.1/a.png',
      'http://192.168.1.1/a.png',
      'http://169.254.169.254/latest/meta-data',
      'http://100.64.0.1/',
      'http://0.0.0.0/',
      'http://224.0.0.1/',
      'http://[::1]/',
      'http://[::]/',
      'http://[::ffff:127.0.0.1]/',
      'http://[::ffff:a9fe:a9fe]/',
      'http://[fe80::1]/',
      'http://[fd00::1]/',
      'http://[ff02::1]/',
      'http://[64:ff9b::a00:1]/',
    ];
    for (const u of urls) await refused(u, { allowRemote: true }, /only public addresses/);
    await refused('http://user:pw@example.com/a.png', { allowRemote: true }, /credentials/);
  });
});

describe('ip policy', () => {
  it('classifies addresses', () => {
    expect(blockedAddressKind('8.8.8.8')).toBeNull();
    expect(blockedAddressKind('2606:4700:4700::1111')).toBeNull();
    expect(blockedAddressKind('::ffff:8.8.8.8')).toBeNull();
    expect(blockedAddressKind('127.0.0.1')).toBe('loopback');
    expect(blockedAddressKind('127.0.0.1', { allowLoopback: true })).toBeNull();
    expect(blockedAddressKind('::1', { allowLoopback: true })).toBeNull();
    expect(blockedAddressKind('10.0.0.1', { allowLoopback: true })).toBe('private');
    expect(blockedAddressKind('::ffff:10.0.0.1')).toBe('private');
    expect(blockedAddressKind('::ffff:7f00:1')).toBe('loopback');
    expect(blockedAddressKind('fe80::1%eth0')).toBe('link-local');
    expect(blockedAddressKind('2001:db8::1')).toBe('documentation');
    expect(blockedAddressKind('255.255.255.255')).toBe('reserved/broadcast');
  });
});

describe('http fetch against a local server', () => {
  let server: Server;
  let base: string;
  const body = Buffer.from('not really a png, but bytes');
  let hits = 0;

  beforeAll(async () => {
    server = createServer((req, res) => {
      hits++;
      const url = req.url ?? '/';
      if (url === '/img') {
        res.writeHead(200, { 'content-type': 'image/png' });
        res.end(body);
      } else if (url.startsWith('/hop/')) {
        const n = Number(url.slice(5));
        res.writeHead(302, { location: n > 0 ? `/hop/${n - 1}` : '/img' });
        res.end();
      } else if (url === '/to-private') {
        res.writeHead(302, { location: 'http://10.0.0.1/img' });
        res.end();
      } else if (url === '/to-file') {
        res.writeHead(301, { location: 'file:///etc/passwd' });
        res.end();
      } else if (url === '/big') {
        res.writeHead(200, { 'content-type': 'image/png' });
        res.end(Buffer.alloc(5000));
      } else if (url === '/big-chunked') {
        res.writeHead(200, { 'content-type': 'image/png' }); // no content-length: the stream is counted
        res.write(Buffer.alloc(3000));
        res.end(Buffer.alloc(3000));
      } else if (url === '/slow') {
        // Never answers: the fetch must give up at its timeout.
      } else {
        res.writeHead(404);
        res.end();
      }
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });

  const ok: FetchImageOptions = { allowRemote: true, allowLoopback: true };

  it('refuses loopback by default, without connecting', async () => {
    const before = hits;
    await refused(`${base}/img`, { allowRemote: true }, /127\.0\.0\.1, a loopback address/);
    await refused(`${base.replace('127.0.0.1', 'localhost')}/img`, { allowRemote: true }, /loopback address/);
    expect(hits).toBe(before);
  });
  it('fetches with the test-only loopback permission, by IP and by name', async () => {
    expect(Buffer.from(await fetchImageBytes(`${base}/img`, ok))).toEqual(body);
    const named = `${base.replace('127.0.0.1', 'localhost')}/img`;
    expect(Buffer.from(await fetchImageBytes(named, ok))).toEqual(body);
  });
  it('follows redirects up to the limit, re-checking every hop', async () => {
    expect(Buffer.from(await fetchImageBytes(`${base}/hop/2`, { ...ok, maxRedirects: 3 }))).toEqual(body);
    await refused(`${base}/hop/5`, { ...ok, maxRedirects: 3 }, /redirected more than 3 times/);
    await refused(`${base}/to-private`, ok, /10\.0\.0\.1, a private address/);
    await refused(`${base}/to-file`, ok, /scheme file: is not allowed/);
  });
  it('enforces the byte limit by Content-Length and while streaming', async () => {
    await refused(`${base}/big`, { ...ok, maxBytes: 1000 }, /larger than the 1000 bytes limit/);
    await refused(`${base}/big-chunked`, { ...ok, maxBytes: 4000 }, /larger than the 4000 bytes limit/);
  });
  it('never goes through HTTP(S)_PROXY: the address check needs a direct connection', async () => {
    const proxy = new ForwardProxy();
    await proxy.start();
    const saved = { http: process.env.HTTP_PROXY, https: process.env.HTTPS_PROXY };
    Object.assign(process.env, { HTTP_PROXY: proxy.url, HTTPS_PROXY: proxy.url });
    try {
      expect(Buffer.from(await fetchImageBytes(`${base}/img`, ok))).toEqual(body);
      expect(proxy.seen).toEqual([]);
    } finally {
      for (const [k, v] of [['HTTP_PROXY', saved.http], ['HTTPS_PROXY', saved.https]] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
      await proxy.stop();
    }
  });
  it('reports HTTP errors and times out', async () => {
    await refused(`${base}/missing`, ok, /HTTP 404/);
    await refused(`${base}/slow`, { ...ok, timeoutMs: 300 }, /timed out after 300 ms/);
  });
});
