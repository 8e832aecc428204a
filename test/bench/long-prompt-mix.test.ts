// `rapid bench --long-prompt` over real HTTP against the fake engine, whose steps take time in
// proportion to their tokens: the short requests' first tokens come within a few steps of arriving,
// long before the long prompt's prefill ends, and the running requests keep decoding meanwhile.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runLongPromptMix } from '../../src/bench/sweep/long-prompt-mix.js';
import { startFakeServer } from '../server/helpers.js';

describe('rapid bench --long-prompt (fake engine)', () => {
  let srv: Awaited<ReturnType<typeof startFakeServer>>;
  beforeAll(async () => {
    srv = await startFakeServer({ contextLength: 32_768, numBlocks: 8_192, blockSize: 16, stepMs: 1, msPerToken: 0.1 }, { maxBatchedTokens: 256, maxNumSeqs: 16 });
  });
  afterAll(async () => {
    await srv?.server.close(500);
  });

  it('reports short TTFT far below the long prefill, and running ITL', { timeout: 60_000 }, async () => {
    // ~2,500 words: ~16,000 byte tokens, 63 steps of 256 tokens (~26 ms each).
    const r = await runLongPromptMix({ target: { endpoint: `${srv.url}/v1/chat/completions`, model: 'fake-model' }, longWords: 2_500, timeoutMs: 30_000, seed: 1 });
    console.log(JSON.stringify({ long: r.longTtftMs, short: r.shortTtftMs.p99, itl: r.runningItlMs.p99 }));
    expect(r.failures).toEqual([]);
    expect(r.longPromptTokens).toBeGreaterThan(10_000);
    expect(r.shortTtftMs.count).toBe(5);
    expect(r.shortTtftMs.max!).toBeLessThan(r.longTtftMs! / 3);
    expect(r.runningItlMs.count).toBeGreaterThan(10);
  });
});
