// Long prompts on the real runtime: rapid serve on a fixture checkpoint (native addon, real engine and
// scheduler, real HTTP) takes an ~8,000-token prompt while two requests decode. Chunked prefill keeps those
// decodes flowing: they produce tokens between the long prompt's arrival and its first token, and short
// requests sent meanwhile get their first token before it.
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { runLongPromptMix } from '../../src/bench/sweep/long-prompt-mix.js';
import { nativeAvailable } from '../helpers/addon.js';

const fixture = join(resolve(import.meta.dirname, '..', '..'), 'test', 'fixtures', 'models', 'qwen2-q4');

describe.skipIf(!nativeAvailable())('a long prompt next to running decodes (fixture model)', () => {
  let srv: RunningServer;
  beforeAll(async () => {
    // 256-token chunks: the ~8k-token prefill takes ~32 steps, each with the running decodes in it.
    srv = await startServer(fixture, { port: 0, threads: 2, kvCacheMemory: 64 << 20, blockSize: 16, maxNumSeqs: 8, maxBatchedTokens: 256 });
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('decodes keep producing tokens while an 8k-token prompt prefills', { timeout: 240_000 }, async () => {
    const r = await runLongPromptMix({ target: { endpoint: `${srv.url}/v1/chat/completions` }, longWords: 2_100, timeoutMs: 200_000, seed: 3 });
    expect(r.failures, JSON.stringify(r)).toEqual([]);
    expect(r.longPromptTokens).toBeGreaterThanOrEqual(8_000);
    // 2,100 words are ~8,200 tokens to the fixture's tokenizer. The running requests' tokens between the long
    // prompt's send and its first token: one per step at most.
    expect(r.runningItlMs.count).toBeGreaterThanOrEqual(16);
    expect(r.shortTtftMs.count).toBe(5);
    expect(r.shortTtftMs.max!).toBeLessThan(r.longTtftMs!);
  });
});
