// The fuzz suite (CI size): a seeded, bounded storm of hostile requests against a real server on
// the qwen2-q4 fixture through the native addon, real xgrammar: no 5xx (but "busy" 503s), none
// unanswered, and afterwards /health, a json_schema request and a forced tool call still work.
// Long runs: `npm run bench:fuzz -- --requests 5000 --seed 7` (src/bench/fuzz.ts).
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import { formatReport, runFuzz } from '../../src/bench/fuzz/fuzz-run.js';
import { nativeAvailable } from '../helpers/addon.js';
import { loadFixture } from '../helpers/fixtures.js';
import { shortContextCopy, type ShortContextCopy } from '../../src/bench/fuzz/short-context-copy.js';

const SEED = Number(process.env.RAPID_FUZZ_SEED ?? 1);
const REQUESTS = Number(process.env.RAPID_FUZZ_REQUESTS ?? 2000);
const MAX_BODY = 256 * 1024;

describe.skipIf(!nativeAvailable())('fuzz: hostile requests against a real server', () => {
  let srv: RunningServer;
  let model: ShortContextCopy;
  beforeAll(async () => {
    // A 2048-token context: a request that deletes max_tokens or asks for 1e10 ends in seconds.
    model = shortContextCopy(loadFixture('qwen2-q4').dir, 2048);
    srv = await startServer(model.dir, {
      port: 0,
      threads: 2,
      kvCacheMemory: 32 << 20,
      maxNumSeqs: 16,
      servedModelName: 'fuzz',
      maxBodyBytes: MAX_BODY,
      // Short limits so truncated bodies and slow sockets resolve quickly.
      headersTimeout: 1,
      bodyIdleTimeout: 1,
      bodyTimeout: 5,
    });
  });
  afterAll(async () => {
    await srv?.close(2000);
    model?.remove();
  });

  it('takes its connection limits from the serve options (a silent socket closes within --headers-timeout 1)', async () => {
    const { hostname, port } = new URL(srv.url);
    const t0 = Date.now();
    const closedAfter = await new Promise<number>((resolve) => {
      const sock = connect(Number(port), hostname);
      sock.resume(); // read the 408 and the FIN: a paused socket never sees the close
      sock.on('close', () => resolve(Date.now() - t0));
      sock.on('error', () => undefined);
      setTimeout(() => sock.destroy(), 10_000).unref();
    });
    expect(closedAfter).toBeLessThan(1000 + 1500);
  });

  it(`seed ${SEED}, ${REQUESTS} requests at concurrency 8: no 5xx, none unanswered, grammar working after`, { timeout: 110_000 }, async () => {
    const report = await runFuzz({ url: srv.url, model: 'fuzz', seed: SEED, requests: REQUESTS, concurrency: 8, boundMs: 45_000, maxBodyBytes: MAX_BODY, hugeBytes: 32 * 1024 });
    process.stdout.write(`${formatReport(report)}\n`);
    expect(report.failures.map((f) => `#${f.index} ${f.kind}: ${f.why}`)).toEqual([]);
    expect(report.after).toEqual({ health: null, json_schema: null, tool_call: null });
    // The run exercised both sides: answers of each class, not a wall of one error.
    expect(report.byStatus['200'] ?? 0).toBeGreaterThan(REQUESTS / 20);
    expect(report.byStatus['400'] ?? 0).toBeGreaterThan(REQUESTS / 4);
  });
});
