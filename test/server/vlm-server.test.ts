// `rapid serve` on a tiny VLM fixture with the openai client: a data: URI image gives the same greedy
// text as `rapid run --image` (and transformers' tokens), text-only requests on the same server and
// weights still match transformers, and a bad image is a 400 that leaves the server healthy.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { rapidCli, VLM_FIXTURES as vlm, vlmFixtureReady, withDataUris } from '../helpers/vlm-engine.js';

const NAME = 'qwen2_5_vl-f32';
const dir = join(vlm, NAME);

interface Case {
  name: string;
  messages: { role: string; content: string | { type: string; text?: string; image_url?: { url: string } }[] }[];
  images: { file: string }[];
  greedy: number[];
}

describe.skipIf(!vlmFixtureReady(dir))(`rapid serve ${NAME} with images`, () => {
  const ref = JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8')) as { cases: Case[] };
  const byName = (n: string) => ref.cases.find((c) => c.name === n)!;
  let srv: RunningServer;
  let client: OpenAI;
  const decode = (ids: number[]) => srv.model.text.tokenizer.decode(ids, { skipSpecialTokens: true });

  beforeAll(async () => {
    srv = await startServer(dir, { port: 0, precision: 'exact', maxBatchedTokens: 16, servedModelName: 'vlm' });
    client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('a data: URI image gives the same greedy text as rapid run --image, and transformers\' tokens', async () => {
    const c = byName('one_image');
    const r = await client.chat.completions.create({ model: 'vlm', messages: withDataUris(c.messages), max_tokens: 16, temperature: 0 });
    const served = r.choices[0]!.message.content ?? '';
    expect(served).toBe(decode(c.greedy));
    expect(r.usage!.completion_tokens).toBe(16);
    const prompt = (c.messages[0]!.content as { type: string; text?: string }[]).find((p) => p.type === 'text')!.text!;
    const cli = rapidCli(['run', dir, '--image', join(vlm, 'images', c.images[0]!.file), '--prompt', prompt, '--temperature', '0', '--max-tokens', '16', '--precision', 'exact', '--json']);
    expect(cli.status, cli.stderr).toBe(0);
    expect(JSON.parse(cli.stdout).text).toBe(served);
  });

  it('image and text requests in one batch on one copy of the weights each match transformers', async () => {
    const one = byName('one_image');
    const two = byName('two_images');
    const text = byName('text');
    const ask = async (c: Case) => {
      const r = await client.chat.completions.create({ model: 'vlm', messages: withDataUris(c.messages), max_tokens: 16, temperature: 0 });
      return r.choices[0]!.message.content;
    };
    const [a, b, t] = await Promise.all([ask(two), ask(text), ask(one)]);
    expect(a).toBe(decode(two.greedy));
    expect(b).toBe(decode(text.greedy));
    expect(t).toBe(decode(one.greedy));
  });

  it('a corrupt image is a 400 and the server stays healthy', async () => {
    const res = await fetch(`${srv.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }, { type: 'text', text: 'hi' }] }] }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { message: string } };
    expect(body.error.message).toMatch(/messages\[0\]\.content\[0\]: image could not be read/);
    expect((await fetch(`${srv.url}/health`)).status).toBe(200);
  });

  it('image placeholders typed into the text (more image tokens than images) are a 400', async () => {
    const c = byName('one_image');
    const messages = withDataUris(c.messages);
    (messages[0]!.content as { type: string; text?: string }[]).push({ type: 'text', text: ' and <|vision_start|><|image_pad|><|vision_end|>' });
    const res = await fetch(`${srv.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages, max_tokens: 2 }),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/2 image placeholders but 1 image was sent/);
  });
});
