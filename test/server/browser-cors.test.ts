// A real browser on another origin calling rapid with fetch: headless Chromium (Debian's package,
// driven by playwright-core, which downloads nothing) loads a page from a second node:http server
// and calls `rapid serve` on a fixture model (qwen2-q4) the way a web app would. CORS is enforced by the browser itself here:
// a missing or wrong header fails the fetch. Skipped when no Chromium is installed.
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { fixtureServeOptions } from '../helpers/openai-chat.js';

const MODEL_ID = 'qwen2-q4';
const MODEL_DIR = `${FIXTURE_ROOT}/qwen2-q4`;

const CANDIDATES = [process.env.RAPID_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'];
const executablePath = CANDIDATES.find((p): p is string => typeof p === 'string' && p !== '' && existsSync(p));

/** What a page's fetch came to, as plain data (page.evaluate returns JSON). */
interface FetchOutcome {
  status?: number;
  body?: string;
  requestId?: string | null;
  error?: string;
}

/** Runs fetch(url, init) inside the page; a network or CORS failure comes back as its error's name and message. */
function pageFetch(page: Page, url: string, init: { method?: string; headers?: Record<string, string>; body?: string }): Promise<FetchOutcome> {
  return page.evaluate(
    async ({ url, init }) => {
      try {
        const r = await fetch(url, init);
        return { status: r.status, body: await r.text(), requestId: r.headers.get('x-request-id') };
      } catch (e) {
        return { error: `${(e as Error).name}: ${(e as Error).message}` };
      }
    },
    { url, init },
  );
}

describe.skipIf(executablePath === undefined)('a headless Chromium page on another origin', () => {
  let pages: Server;
  let pagePort = 0;
  let open: RunningServer;
  let keyed: RunningServer;
  let browser: Browser;
  let page: Page;
  const chatBody = (extra: object = {}) => JSON.stringify({ model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, ...extra });
  const json = { 'content-type': 'application/json' };

  beforeAll(async () => {
    // One page server, two origins: http://localhost:P is allowed, http://127.0.0.1:P is not.
    pages = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end('<!doctype html><meta charset="utf-8"><title>rapid from a page</title>');
    });
    await new Promise<void>((r) => pages.listen(0, '127.0.0.1', r));
    pagePort = (pages.address() as AddressInfo).port;
    open = await startServer(MODEL_DIR, fixtureServeOptions(MODEL_ID, { corsOrigin: [`http://localhost:${pagePort}`] }));
    keyed = await startServer(MODEL_DIR, fixtureServeOptions(MODEL_ID, { apiKey: 'page-key' }));
    browser = await chromium.launch({ executablePath, headless: true, timeout: 20_000 });
    page = await browser.newPage();
    await page.goto(`http://localhost:${pagePort}/`);
  }, 30_000);

  afterAll(async () => {
    await browser?.close();
    await open?.close(1_000);
    await keyed?.close(1_000);
    await new Promise((r) => pages?.close(r));
  });

  it('gets a chat completion and reads its X-Request-Id', async () => {
    const r = await pageFetch(page, `${open.url}/v1/chat/completions`, { method: 'POST', headers: { ...json, 'x-request-id': 'page-1' }, body: chatBody() });
    expect(r.error).toBeUndefined();
    expect(r.status).toBe(200);
    const completion = JSON.parse(r.body!);
    expect(completion.object).toBe('chat.completion');
    expect(typeof completion.choices[0].message.content).toBe('string');
    expect(r.requestId).toBe('page-1');
  });

  it('reads a streamed completion through response.body', async () => {
    const out = await page.evaluate(
      async ({ url, body }) => {
        const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
        const reader = r.body!.pipeThrough(new TextDecoderStream()).getReader();
        let text = '';
        for (let c = await reader.read(); !c.done; c = await reader.read()) text += c.value;
        const events = text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
        const chunks = events.filter((e) => e !== '[DONE]').map((e) => JSON.parse(e) as { object: string; choices: { delta: { content?: string }; finish_reason: string | null }[] });
        return {
          type: r.headers.get('content-type'),
          done: events.at(-1) === '[DONE]',
          objects: [...new Set(chunks.map((c) => c.object))],
          content: chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''),
          finish: chunks.at(-1)?.choices[0]?.finish_reason,
        };
      },
      { url: `${open.url}/v1/chat/completions`, body: chatBody({ stream: true }) },
    );
    expect(out.type).toMatch(/text\/event-stream/);
    expect(out.done).toBe(true);
    expect(out.objects).toEqual(['chat.completion.chunk']);
    expect(out.content.length).toBeGreaterThan(0);
    expect(out.finish).toBe('length');
  });

  it('calls a keyed server with Authorization (a preflight first) and reads its 401 without the key', async () => {
    const ok = await pageFetch(page, `${keyed.url}/v1/chat/completions`, { method: 'POST', headers: { ...json, authorization: 'Bearer page-key' }, body: chatBody() });
    expect(ok.error).toBeUndefined();
    expect(ok.status).toBe(200);
    expect(keyed.server.metrics.render([{ stats: keyed.engine.stats(), modelId: MODEL_ID }])).toMatch(/status="204"/); // the preflight was answered
    const denied = await pageFetch(page, `${keyed.url}/v1/models`, { headers: { authorization: 'Bearer wrong' } });
    expect(denied.status).toBe(401);
    expect(JSON.parse(denied.body!).error.code).toBe('invalid_api_key');
  });

  it('reads an error body: a 400 naming the field', async () => {
    const r = await pageFetch(page, `${open.url}/v1/chat/completions`, { method: 'POST', headers: json, body: JSON.stringify({ model: MODEL_ID, messages: 'hello' }) });
    expect(r.status).toBe(400);
    expect(JSON.parse(r.body!).error.param).toBe('messages');
  });

  it('is blocked by the browser from an origin not on --cors-origin', async () => {
    const other = await browser.newPage();
    try {
      await other.goto(`http://127.0.0.1:${pagePort}/`);
      const before = open.engine.stats().requests.submitted;
      const post = await pageFetch(other, `${open.url}/v1/chat/completions`, { method: 'POST', headers: json, body: chatBody() });
      expect(post.error).toMatch(/^TypeError/);
      const get = await pageFetch(other, `${open.url}/v1/models`, {});
      expect(get.error).toMatch(/^TypeError/);
      expect(open.engine.stats().requests.submitted).toBe(before);
    } finally {
      await other.close();
    }
  });
});
