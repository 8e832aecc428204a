// `rapid serve` on the tiny Mistral 3 4-bit fixture with the openai client: image requests (data: URIs, one and two
// images of different sizes, Pixtral row breaks) and a text request sent together to one server, one copy of the
// weights, each give transformers' greedy text.
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { loadNative } from '../../src/native/binding.js';

const vlm = resolve(import.meta.dirname, '..', 'fixtures', 'vlm');
const dir = join(vlm, 'mistral3-q4');

function ready(): boolean {
  if (!existsSync(join(dir, 'model.safetensors'))) return false;
  try {
    const m = loadNative().addon.loadModel(dir, { threads: 1, kvCacheBytes: 1 << 20 });
    const ok = m.info().vision?.family === 'mistral3';
    m.close();
    return ok;
  } catch {
    return false;
  }
}

interface Case {
  name: string;
  messages: { role: string; content: { type: string; text?: string; image_url?: { url: string } }[] }[];
  greedy: number[];
}

describe.skipIf(!ready())('rapid serve mistral3-q4 with images and text together', () => {
  const ref = JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8')) as { cases: Case[] };
  let srv: RunningServer;
  let client: OpenAI;

  const withDataUris = (c: Case): OpenAI.Chat.Completions.ChatCompletionMessageParam[] =>
    c.messages.map((m) => ({
      role: m.role,
      content: m.content.map((p) =>
        p.type === 'image_url'
          ? { type: 'image_url', image_url: { url: `data:image/png;base64,${readFileSync(join(vlm, 'images', p.image_url!.url)).toString('base64')}` } }
          : { type: 'text', text: p.text ?? '' },
      ),
    })) as OpenAI.Chat.Completions.ChatCompletionMessageParam[];

  beforeAll(async () => {
    srv = await startServer(dir, { port: 0, precision: 'exact', maxBatchedTokens: 32, servedModelName: 'mistral3' });
    client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('two-image, one-image and text requests in flight at once each give transformers\' greedy text', async () => {
    const decode = (ids: number[]) => srv.model.text.tokenizer.decode(ids, { skipSpecialTokens: true });
    const replies = await Promise.all(
      ref.cases.map((c) => client.chat.completions.create({ model: 'mistral3', messages: withDataUris(c), max_tokens: 16, temperature: 0 })),
    );
    replies.forEach((r, i) => {
      const c = ref.cases[i]!;
      expect(r.choices[0]!.message.content ?? '', c.name).toBe(decode(c.greedy));
      expect(r.usage!.completion_tokens, c.name).toBe(16);
    });
  });
});
