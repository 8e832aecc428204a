// Images over HTTP with the official openai client: content parts with data: URIs (and http(s) when
// allowed), decoded by sharp, through the engine's encoder path on the FakeModel's vision tower;
// bad images, images for a text-only model, too many images and disabled remote URLs get a 400 that
// says what to fix, without touching other requests.
import { createServer as createHttpServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { createServer, type RapidServer } from '../../src/server/server.js';
import type { ServedVision } from '../../src/server/served-model.js';
import { makeEngine } from '../engine/helpers.js';
import { MODEL_ID, post, startFakeServer } from './helpers.js';
import { dataUri, fakeVision, png, visionByteModel } from './vision-helpers.js';

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

async function startVisionServer(vision: ServedVision, fake = {}) {
  const { engine, model } = makeEngine({ contextLength: 512, numBlocks: 256, vision: { mrope: true }, ...fake }, { maxBatchedTokens: 16 });
  const served = visionByteModel(engine.contextLength, vision);
  const server: RapidServer = createServer({ engine, model: served });
  const { url } = await server.listen(0, '127.0.0.1');
  closers.push(() => server.close(1000));
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 20_000 });
  return { engine, model, served, url, client };
}

type Part = OpenAI.Chat.Completions.ChatCompletionContentPart;
const img = (url: string, detail?: 'auto' | 'low' | 'high'): Part => ({ type: 'image_url', image_url: detail ? { url, detail } : { url } });
const text = (t: string): Part => ({ type: 'text', text: t });
const fixture = (name: string) => readFileSync(new URL(`../fixtures/vlm/images/${name}`, import.meta.url));

/** What the fake must answer for these parts: the oracle over the same loaded images. */
async function expected(s: Awaited<ReturnType<typeof startVisionServer>>, parts: Part[], n: number): Promise<string> {
  const loaded = [];
  const content = [];
  for (const p of parts) {
    if (p.type === 'image_url') {
      loaded.push(await s.served.vision!.loadImage(p.image_url.url, p.image_url.detail ?? 'auto'));
      content.push({ type: 'image' });
    } else if (p.type === 'text') content.push({ type: 'text', text: p.text });
  }
  const { promptIds, multimodal } = await s.served.vision!.encodeChat([{ role: 'user', content }], loaded);
  return String.fromCharCode(...s.model.greedyMultimodal(promptIds, multimodal, n));
}

async function ask(s: Awaited<ReturnType<typeof startVisionServer>>, parts: Part[], n = 12, stream = false): Promise<string> {
  if (!stream) {
    const r = await s.client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: parts }], max_tokens: n, temperature: 0 });
    return r.choices[0]!.message.content ?? '';
  }
  const st = await s.client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: parts }], max_tokens: n, temperature: 0, stream: true });
  let out = '';
  for await (const c of st) out += c.choices[0]?.delta.content ?? '';
  return out;
}

describe('server: image content parts', () => {
  it('answers a data: URI image with the output its image and positions determine', async () => {
    const s = await startVisionServer(fakeVision());
    const parts = [text('what is in '), img(dataUri(fixture('wide_90x60.png'))), text(' ?')];
    const got = await ask(s, parts);
    expect(got).toBe(await expected(s, parts, 12));
    expect(s.model.encodeCalls.length).toBe(1);
    // Another image of the same size gives another answer (the embeddings reach the model).
    const other = [text('what is in '), img(dataUri(await png(90, 60, 5))), text(' ?')];
    const got2 = await ask(s, other, 12, true);
    expect(got2).toBe(await expected(s, other, 12));
    expect(got2).not.toBe(got);
    const metrics = await (await fetch(`${s.url}/metrics`)).text();
    expect(metrics).toMatch(/^rapid_image_encodes_total\{model="fake-model"\} 2$/m);
  });

  it('concurrent image and text requests each get their solo answer; a resent image is not re-encoded', async () => {
    const s = await startVisionServer(fakeVision({ maxImages: 4 }));
    const a = [img(dataUri(fixture('big_200x150.png'))), text(' describe')];
    const b = [text('compare '), img(dataUri(fixture('tall_64x100.png'))), text(' with '), img(dataUri(fixture('square_130x130.png')))];
    const t = [text('no image here, just words')];
    const want = [await expected(s, a, 16), await expected(s, b, 16), await expected(s, t, 16)];
    const got = await Promise.all([ask(s, a, 16, true), ask(s, b, 16), ask(s, t, 16, true)]);
    expect(got).toEqual(want);
    const encodes = s.model.encodeCalls.length;
    expect(encodes).toBe(3);
    expect(await ask(s, a, 16)).toBe(want[0]); // the same image again: encoder cache (or prefix cache)
    expect(s.model.encodeCalls.length).toBe(encodes);
  });

  it('detail: low gives a smaller image (fewer tokens); a bad detail is a 400', async () => {
    const s = await startVisionServer(fakeVision());
    const uri = dataUri(fixture('big_200x150.png'));
    const low = await s.client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: [img(uri, 'low')] }], max_tokens: 2, temperature: 0 });
    const high = await s.client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: [img(uri, 'high')] }], max_tokens: 2, temperature: 0 });
    expect(low.usage!.prompt_tokens).toBeLessThan(high.usage!.prompt_tokens);
    const r = await post(s.url, '/v1/chat/completions', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: uri, detail: 'ultra' } }] }] });
    expect(r.status).toBe(400);
    expect(r.json().error.message).toMatch(/detail must be "auto", "low" or "high"/);
  });

  it('bad images are 400s that say what to fix, and do not disturb a concurrent request', async () => {
    const s = await startVisionServer(fakeVision({ maxPixels: 300 * 300 }));
    const good = [text('fine: '), img(dataUri(fixture('wide_90x60.png')))];
    const want = await expected(s, good, 24);
    const inFlight = ask(s, good, 24, true);
    const cases: [string, RegExp][] = [
      ['data:image/png;base64,' + Buffer.from('this is not a png at all').toString('base64'), /image could not be read/],
      [dataUri(Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>'), 'image/svg+xml'), /unsupported image format svg|not a supported image/],
      [dataUri((await png(100, 100, 1)).subarray(0, 120)), /could not be (read|decoded)/],
      [dataUri(await png(400, 400, 1)), /too large: 400x400/],
      ['data:image/png;base64,', /empty/],
      ['file:///etc/passwd', /file: URLs are not accepted/],
      ['/etc/passwd', /file paths are not accepted/],
      ['https://example.com/cat.png', /image URLs are turned off on this server.*--allow-remote-images/],
    ];
    for (const [url, msg] of cases) {
      const r = await post(s.url, '/v1/chat/completions', { messages: [{ role: 'user', content: [{ type: 'text', text: 'x' }, { type: 'image_url', image_url: { url } }] }] });
      expect(r.status, url.slice(0, 40)).toBe(400);
      expect(r.json().error.message, url.slice(0, 40)).toMatch(msg);
      expect(r.json().error.param).toMatch(/^messages\[0\]\.content\[1\]/);
    }
    expect(await inFlight).toBe(want);
    expect(s.engine.stats().requests.error).toBe(0);
  });

  it('more images than allowed per request is a 400 before anything is decoded', async () => {
    const s = await startVisionServer(fakeVision({ maxImages: 2 }));
    const uri = dataUri(fixture('wide_90x60.png'));
    const r = await post(s.url, '/v1/chat/completions', { messages: [{ role: 'user', content: [1, 2, 3].map(() => ({ type: 'image_url', image_url: { url: uri } })) }] });
    expect(r.status).toBe(400);
    expect(r.json().error.message).toMatch(/3 images; the server accepts at most 2/);
    expect(s.model.encodeCalls.length).toBe(0);
  });

  it('a text-only model refuses images with a 400', async () => {
    const { url, client } = await startFakeServer();
    closers.push(async () => undefined);
    const r = await post(url, '/v1/chat/completions', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUri(fixture('wide_90x60.png')) } }] }] });
    expect(r.status).toBe(400);
    expect(r.json().error.message).toMatch(/does not accept images/);
    // And text still works.
    const ok = await client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, temperature: 0 });
    expect(ok.choices[0]!.message.content!.length).toBeGreaterThan(0);
  });

  it('http(s) image URLs work only when remote images are allowed', async () => {
    const body = fixture('square_130x130.png');
    const origin: Server = createHttpServer((_, res) => {
      res.writeHead(200, { 'content-type': 'image/png' });
      res.end(body);
    });
    await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
    closers.push(() => new Promise((r) => origin.close(() => r())));
    const imageUrl = `http://127.0.0.1:${(origin.address() as AddressInfo).port}/img.png`;

    const off = await startVisionServer(fakeVision({ allowRemote: false }));
    const r = await post(off.url, '/v1/chat/completions', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: imageUrl } }] }] });
    expect(r.status).toBe(400);
    expect(r.json().error.code).toBe('remote_images_disabled');

    const on = await startVisionServer(fakeVision({ allowRemote: true }));
    const parts = [img(imageUrl), text(' what?')];
    const got = await ask(on, parts);
    expect(got).toBe(await ask(on, [img(dataUri(body)), text(' what?')])); // same pixels, same answer
    expect(on.model.encodeCalls.length).toBe(1); // and the same content hash
  });

  it('an encoder failure fails that request (500 with a clear message); others are unaffected', async () => {
    const s = await startVisionServer(fakeVision(), { vision: { mrope: true, failOn: (i: { grid: number[] }) => i.grid[1] === 8 && i.grid[2] === 8 } });
    const ok = [text('fine: '), img(dataUri(fixture('wide_90x60.png')))];
    const want = await expected(s, ok, 12);
    const bad = post(s.url, '/v1/chat/completions', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUri(await png(256, 256, 9)) } }] }] });
    const [rb, got] = await Promise.all([bad, ask(s, ok)]);
    expect(rb.status).toBe(500);
    expect(rb.json().error.code).toBe('encoder_failed');
    expect(rb.json().error.message).toMatch(/image encoder failed/);
    expect(got).toBe(want);
    expect(s.engine.health().ok).toBe(true);
  });
});
