// `rapid serve` on the tiny Mistral 3 4-bit fixture with the openai client: image requests (data: URIs, one and two
// images of different sizes, Pixtral row breaks) and a text request sent together to one server, one copy of the
// weights, each give transformers' greedy text.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { VLM_FIXTURES as vlm, vlmFixtureReady, withDataUris } from '../helpers/vlm-engine.js';

const dir = join(vlm, 'mistral3-q4');

interface Case {
  name: string;
  messages: { role: string; content: { type: string; text?: string; image_url?: { url: string } }[] }[];
  greedy: number[];
}

describe.skipIf(!vlmFixtureReady(dir, 'mistral3'))('rapid serve mistral3-q4 with images and text together', () => {
  const ref = JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8')) as { cases: Case[] };
  let srv: RunningServer;
  let client: OpenAI;

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
      ref.cases.map((c) => client.chat.completions.create({ model: 'mistral3', messages: withDataUris(c.messages), max_tokens: 16, temperature: 0 })),
    );
    replies.forEach((r, i) => {
      const c = ref.cases[i]!;
      expect(r.choices[0]!.message.content ?? '', c.name).toBe(decode(c.greedy));
      expect(r.usage!.completion_tokens, c.name).toBe(16);
    });
  });
});
