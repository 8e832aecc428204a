// LangChain JS's OpenAIEmbeddings (unmodified @langchain/openai) against rapid serve on the tiny
// Qwen3-Embedding fixture: embedDocuments / embedQuery with its defaults give transformers' vectors,
// and its dimensions option truncates as OpenAI's text-embedding-3 does.
import { OpenAIEmbeddings } from '@langchain/openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { nativeAvailable } from '../helpers/addon.js';
import { cosine, EMBEDDING_REF, FIXTURES, maxAbsDiff, normalize } from '../helpers/embeddings.js';
import { fixtureServeOptions } from '../helpers/openai-chat.js';

const ref = EMBEDDING_REF.models['qwen3-embedding-f32']!;
const model = 'qwen3-embedding';

function expectParity(got: number[], want: number[]): void {
  expect(got).toHaveLength(want.length);
  expect(cosine(got, want)).toBeGreaterThan(0.9999);
  expect(maxAbsDiff(got, want)).toBeLessThan(2e-4);
}

describe.skipIf(!nativeAvailable())('@langchain/openai OpenAIEmbeddings', () => {
  let srv: RunningServer;
  const embeddings = (fields: ConstructorParameters<typeof OpenAIEmbeddings>[0] = {}) =>
    new OpenAIEmbeddings({ model, apiKey: 'x', maxRetries: 0, configuration: { baseURL: `${srv.url}/v1` }, ...fields });

  beforeAll(async () => {
    srv = await startServer(`${FIXTURES}/models/qwen3-embedding-f32`, fixtureServeOptions(model));
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it("embedDocuments and embedQuery with its defaults give transformers' embeddings", async () => {
    // Its default stripNewLines changes texts with a newline: compare it without that.
    const docs = await embeddings({ stripNewLines: false }).embedDocuments(EMBEDDING_REF.texts);
    docs.forEach((v, i) => expectParity(v, ref.embeddings[i]!));
    const plain = [0, 3, 4]; // texts without a newline: the defaults send them as they are
    const byDefault = await embeddings().embedDocuments(plain.map((i) => EMBEDDING_REF.texts[i]!));
    byDefault.forEach((v, k) => expectParity(v, ref.embeddings[plain[k]!]!));
    expectParity(await embeddings().embedQuery(EMBEDDING_REF.texts[0]!), ref.embeddings[0]!);
  });

  it('dimensions truncates and renormalises', async () => {
    const v = await embeddings({ dimensions: 16 }).embedQuery(EMBEDDING_REF.texts[3]!);
    expectParity(v, normalize(ref.embeddings[3]!.slice(0, 16)));
  });
});
