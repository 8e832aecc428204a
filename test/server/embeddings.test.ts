// POST /v1/embeddings over real HTTP with the unmodified openai SDK: the tiny Qwen3-Embedding fixture
// gives transformers' embeddings (base64 as the SDK asks by default, and float), batch and token-id
// input, Matryoshka dimensions, 400s naming the field; a generative model serves it only with
// --embeddings (pooled hidden states, batched with chat requests), else a 404 saying how.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { EMBEDDING_LIMITS } from '../../src/server/embeddings-request.js';
import { nativeAvailable } from '../helpers/addon.js';
import { cosine, EMBEDDING_REF, FIXTURES, maxAbsDiff, normalize } from '../helpers/embeddings.js';
import { fixtureServeOptions, servedClient } from '../helpers/openai-chat.js';
import { post } from './helpers.js';

const TEXTS = EMBEDDING_REF.texts;

function expectParity(got: number[], want: number[]): void {
  expect(got).toHaveLength(want.length);
  expect(cosine(got, want)).toBeGreaterThan(0.9999);
  expect(maxAbsDiff(got, want)).toBeLessThan(2e-4);
}

describe.skipIf(!nativeAvailable())('an embedding model (qwen3-embedding-f32)', () => {
  const ref = EMBEDDING_REF.models['qwen3-embedding-f32']!;
  const model = 'qwen3-embedding';
  let srv: RunningServer;
  let client: OpenAI;
  beforeAll(async () => {
    srv = await startServer(`${FIXTURES}/models/qwen3-embedding-f32`, fixtureServeOptions(model));
    client = servedClient(srv.url);
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it("the SDK's default (base64) decodes to transformers' embeddings, in input order, with usage", async () => {
    const r = await client.embeddings.create({ model, input: TEXTS });
    expect(r.object).toBe('list');
    expect(r.model).toBe(model);
    expect(r.data.map((d) => d.index)).toEqual(TEXTS.map((_, i) => i));
    r.data.forEach((d, i) => {
      expect(d.object).toBe('embedding');
      expectParity(d.embedding, ref.embeddings[i]!);
    });
    const tokens = ref.ids.reduce((n, ids) => n + ids.length, 0);
    expect(r.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens });
  });

  it('encoding_format float gives the same vectors as base64, bit for bit (float32)', async () => {
    const [f, b] = await Promise.all([
      client.embeddings.create({ model, input: TEXTS[1]!, encoding_format: 'float' }),
      client.embeddings.create({ model, input: TEXTS[1]! }),
    ]);
    expect(f.data).toHaveLength(1);
    expectParity(f.data[0]!.embedding, ref.embeddings[1]!);
    expect(Array.from(Float32Array.from(f.data[0]!.embedding))).toEqual(b.data[0]!.embedding);
    // The wire format is OpenAI's: little-endian float32 in base64.
    const raw = await post(srv.url, '/v1/embeddings', { model, input: TEXTS[1], encoding_format: 'base64' });
    const bytes = Buffer.from(raw.json().data[0].embedding as string, 'base64');
    expect(bytes.length).toBe(4 * 128);
    expect(bytes.readFloatLE(0)).toBe(f.data[0]!.embedding[0]);
  });

  it('token-id input (one list, or a list of lists) equals the text it encodes', async () => {
    const fromText = await client.embeddings.create({ model, input: TEXTS, encoding_format: 'float' });
    const one = await client.embeddings.create({ model, input: ref.ids[2]!, encoding_format: 'float' });
    expect(one.data[0]!.embedding).toEqual(fromText.data[2]!.embedding);
    const many = await client.embeddings.create({ model, input: ref.ids, encoding_format: 'float' });
    many.data.forEach((d, i) => expect(d.embedding).toEqual(fromText.data[i]!.embedding));
  });

  it('an embedding does not depend on the requests beside it', async () => {
    const alone = await client.embeddings.create({ model, input: TEXTS[0]!, encoding_format: 'float' });
    const crowd = await Promise.all(Array.from({ length: 8 }, (_, k) => client.embeddings.create({ model, input: [TEXTS[k % TEXTS.length]!, TEXTS[0]!], encoding_format: 'float' })));
    for (const r of crowd) expect(r.data[1]!.embedding).toEqual(alone.data[0]!.embedding);
  });

  it('dimensions truncates, then renormalises (Matryoshka)', async () => {
    const r = await client.embeddings.create({ model, input: TEXTS[0]!, dimensions: 32, encoding_format: 'float' });
    const v = r.data[0]!.embedding;
    expect(v).toHaveLength(32);
    expectParity(v, normalize(ref.embeddings[0]!.slice(0, 32)));
    expect(cosine(v, v)).toBeCloseTo(1, 6);
    const full = await client.embeddings.create({ model, input: TEXTS[0]!, dimensions: 128 });
    expectParity(full.data[0]!.embedding, ref.embeddings[0]!);
  });

  it('every generating route gets a 400 that says it is an embedding model', async () => {
    for (const [path, body] of [
      ['/v1/chat/completions', { model, messages: [{ role: 'user', content: 'hi' }] }],
      ['/v1/completions', { model, prompt: 'hi' }],
      ['/v1/responses', { model, input: 'hi' }],
      ['/v1/messages', { model, max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }],
    ] as const) {
      const r = await post(srv.url, path, body);
      expect(r.status).toBe(400);
      expect(r.json().error.message).toMatch(/embedding model/);
      expect(r.json().error.message).toContain('/v1/embeddings');
    }
  });

  const BAD: [Record<string, unknown>, string, RegExp][] = [
    [{ model }, 'input', /input is required/],
    [{ model, input: [] }, 'input', /must not be empty/],
    [{ model, input: '' }, 'input', /empty string/],
    [{ model, input: ['a', ''] }, 'input[1]', /empty string/],
    [{ model, input: ['a', 3] }, 'input[1]', /string or a list of token ids/],
    [{ model, input: [[1, 2], []] }, 'input[1]', /must not be empty/],
    [{ model, input: [[1, 2], [5, 99999]] }, 'input[1][1]', /not a token id/],
    [{ model, input: [1.5] }, 'input[0]', /not a token id/],
    [{ model, input: { text: 'a' } }, 'input', /must be a string/],
    [{ model, input: 'a', encoding_format: 'hex' }, 'encoding_format', /float.*base64/],
    [{ model, input: 'a', dimensions: 0 }, 'dimensions', /\[1, 128\]/],
    [{ model, input: 'a', dimensions: 129 }, 'dimensions', /\[1, 128\]/],
    [{ model, input: 'a', dimensions: 'x' }, 'dimensions', /integer/],
    [{ model, input: 'a', user: 5 }, 'user', /string/],
    [{ model, input: [[1, 2], Array.from({ length: 600 }, () => 7)] }, 'input[1]', /context is 512 tokens/],
    [{ model, input: ['a', [1, 2]] }, 'input', /mixes strings and token lists/],
    [{ model, input: Array.from({ length: EMBEDDING_LIMITS.maxInputs + 1 }, () => 'a') }, 'input', /at most 2048/],
  ];
  it.each(BAD.map(([body, param, message]) => ({ body, param, message })))('bad input: a 400 naming $param, saying $message', async ({ body, param, message }) => {
    const r = await post(srv.url, '/v1/embeddings', body);
    expect(r.status).toBe(400);
    expect(r.json().error.param).toBe(param);
    expect(r.json().error.message).toMatch(message);
  });

  it('an unknown model name is a 404; the server stays healthy after every refusal', async () => {
    const r = await post(srv.url, '/v1/embeddings', { model: 'gpt-4o', input: 'a' });
    expect(r.status).toBe(404);
    const ok = await client.embeddings.create({ model, input: TEXTS[4]!, encoding_format: 'float' });
    expectParity(ok.data[0]!.embedding, ref.embeddings[4]!);
    expect(srv.engine.stats().kv.usedBlocks).toBe(0); // prefill-only requests keep no KV
  });
});

describe.skipIf(!nativeAvailable())('a generative decoder (qwen3-f32)', () => {
  const ref = EMBEDDING_REF.models['qwen3-f32']!;
  const model = 'qwen3';

  it('without --embeddings, /v1/embeddings is a 404 that says how to turn it on', async () => {
    const srv = await startServer(`${FIXTURES}/models/qwen3-f32`, fixtureServeOptions(model));
    try {
      const r = await post(srv.url, '/v1/embeddings', { model, input: 'a' });
      expect(r.status).toBe(404);
      expect(r.json().error.message).toContain('--embeddings');
    } finally {
      await srv.close(1000);
    }
  });

  describe('with --embeddings', () => {
    let srv: RunningServer;
    let client: OpenAI;
    beforeAll(async () => {
      srv = await startServer(`${FIXTURES}/models/qwen3-f32`, fixtureServeOptions(model, { embeddings: true }));
      client = servedClient(srv.url);
    });
    afterAll(async () => {
      await srv?.close(1000);
    });

    it("pooled hidden states equal transformers' last-token pooling, batched with chat requests", async () => {
      const chat = (n: number) => client.chat.completions.create({ model, messages: [{ role: 'user', content: `count to ${n}` }], max_tokens: 8, temperature: 0 });
      const soloChat = await chat(3);
      const [e, c] = await Promise.all([client.embeddings.create({ model, input: TEXTS }), chat(3), chat(4)]);
      e.data.forEach((d, i) => expectParity(d.embedding, ref.embeddings[i]!));
      expect(c.choices[0]!.message.content).toBe(soloChat.choices[0]!.message.content);
    });

    it('dimensions is a 400: a decoder is not Matryoshka-trained', async () => {
      const r = await post(srv.url, '/v1/embeddings', { model, input: 'a', dimensions: 16 });
      expect(r.status).toBe(400);
      expect(r.json().error.param).toBe('dimensions');
    });
  });
});
