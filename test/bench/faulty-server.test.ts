// `rapid bench` against a deliberately faulty local server: each fault (HTTP 500, stall, dropped
// connection, empty reply, invalid JSON, schema violation) is reported as its own failure type,
// the vision and mixed workloads send what they should, and every sweep ends within a bound.
import { mkdtempSync, readFileSync, writeFileSync, copyFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runBench, type BenchOptions } from '../../src/bench/sweep/run-bench.js';
import type { BenchReport } from '../../src/bench/sweep/bench-report.js';
import { startFaultyServer, type FaultyServer } from './faulty-server.js';

const root = resolve(import.meta.dirname, '..', '..');
const dir = mkdtempSync(join(tmpdir(), 'rapid-bench-'));
const schemaFile = join(dir, 'schema.json');
writeFileSync(
  schemaFile,
  JSON.stringify({ type: 'object', properties: { name: { type: 'string' }, count: { type: 'integer' } }, required: ['name', 'count'], additionalProperties: false }),
);

function sink(): { stream: Writable; text: () => string } {
  let text = '';
  const stream = new Writable({
    write(chunk, _enc, cb) {
      text += String(chunk);
      cb();
    },
  });
  return { stream, text: () => text };
}

function bench(o: Partial<BenchOptions>) {
  const out = sink();
  const err = sink();
  const opts: BenchOptions = { concurrency: [1], requests: 4, runs: 1, seed: 1, timeoutMs: 5_000, maxTokens: 16, temperature: 0, promptLen: '8', warmup: 0, progress: 'plain', ...o };
  const t0 = performance.now();
  return runBench(opts, { stdout: out.stream, stderr: err.stream, version: 'test' }).then((report) => ({ report, stdout: out.text(), stderr: err.text(), seconds: (performance.now() - t0) / 1000 }));
}

describe('rapid bench against a faulty server', () => {
  let srv: FaultyServer;
  beforeAll(async () => {
    srv = await startFaultyServer();
  });
  afterAll(async () => {
    await srv.close();
  });

  it('reports every failure type once per run and finishes in bounded time', async () => {
    const jsonFile = join(dir, 'cycle.json');
    const htmlFile = join(dir, 'cycle.html');
    // 7 requests per run: the server gives the n-th request the n-th fault of its cycle.
    const { report, stdout, seconds } = await bench({
      url: `${srv.url}/cycle/v1`,
      schema: schemaFile,
      concurrency: [1, 3],
      requests: 7,
      runs: 2,
      timeoutMs: 800,
      json: jsonFile,
      report: htmlFile,
    });
    expect(report.levels.map((l) => l.concurrency)).toEqual([1, 3]);
    for (const level of report.levels) {
      expect(level.runs).toHaveLength(2);
      for (const r of level.runs) {
        expect(r.requests).toBe(7);
        expect(r.ok).toBe(1);
        expect(r.failures).toEqual({
          http_error: 1,
          timeout: 1,
          connection_dropped: 1,
          stream_error: 0,
          empty_content: 1,
          invalid_json: 1,
          schema_violation: 1,
          not_started: 0,
        });
        expect(r.httpStatuses['500']).toBe(1);
        // Verdicts exist for the 4 complete replies: ok and violate parse; only ok satisfies the schema.
        expect(r.validity).toMatchObject({ requests: 7, judged: 4, jsonValid: 2, schemaValid: 1, jsonValidityPct: 50, validityPct: 25 });
        expect(r.perRequest.find((p) => p.failure === 'timeout')!.error).toMatch(/800 ms/);
        expect(r.perRequest.find((p) => p.failure === 'http_error')!.error).toMatch(/HTTP 500: internal failure/);
        // The successful reply: 4 tokens reported by usage, timed per chunk.
        const ok = r.perRequest.find((p) => p.ok)!;
        expect(ok).toMatchObject({ outputTokens: 4, tokensFromUsage: true, finishReason: 'stop' });
        expect(ok.ttftMs).not.toBeNull();
        // Latency covers the complete replies: ok, badjson and violate have 4 timed chunks each.
        expect(r.ttftMs.count).toBe(3);
        expect(r.itlMs.count).toBe(9);
        expect(r.outputTokens).toBe(14); // + 2 chunks of the dropped stream
        expect(r.goodTokens).toBe(4);
        expect(r.promptTokens).toMatchObject({ count: 4, mean: 5 }); // usage of the 4 complete replies
      }
      expect(level.avgValidityPct).toBe(25);
      expect(level.failures.timeout).toBe(2);
    }
    // Two levels x two runs, each bounded by one 0.8 s timeout at a time: far below this.
    expect(seconds).toBeLessThan(20);
    expect(srv.received.every((r) => r.path === '/cycle/v1/chat/completions')).toBe(true);

    const written = JSON.parse(readFileSync(jsonFile, 'utf8')) as BenchReport;
    expect(written.levels[1]!.runs[0]!.failures.schema_violation).toBe(1);
    expect(written.target).toMatchObject({ endpoint: `${srv.url}/cycle/v1/chat/completions`, model: 'faulty-model', inProcessModel: null });
    expect(written.settings).toMatchObject({ requests: 7, runs: 2, workload: ['schema'], seed: 1 });
    // Non-TTY output: plain lines per run, then the table with its failure notes.
    expect(stdout).toMatch(/c=3 run 2\/2: 1\/7 ok/);
    expect(stdout).toMatch(/concurrency \| run 1 +\| run 2 +\| avg validity \| tok\/s \| TTFT p50\/p99 ms/);
    expect(stdout).toMatch(/1 http_error \(500\)/);
    const html = readFileSync(htmlFile, 'utf8');
    expect(html).toContain('id="chart-throughput"');
    expect(html).toContain('id="chart-validity"');
    expect(html).not.toMatch(/<script(?![^>]*application\/json)/);
  });

  it('sends the schema as response_format, streams with usage, and passes the api key', async () => {
    const before = srv.received.length;
    await bench({ url: `${srv.url}/ok/v1`, schema: schemaFile, apiKey: 'sekret', model: undefined, modelName: 'chosen', requests: 2 });
    const got = srv.received.slice(before);
    expect(got).toHaveLength(2);
    for (const r of got) {
      expect(r.headers.authorization).toBe('Bearer sekret');
      expect(r.body).toMatchObject({ model: 'chosen', stream: true, stream_options: { include_usage: true }, max_tokens: 16, temperature: 0 });
      expect(r.body.response_format).toMatchObject({ type: 'json_schema', json_schema: { schema: { required: ['name', 'count'] } } });
    }
  });

  it('a server that never answers: requests time out and the level deadline leaves the rest unsent', async () => {
    const { report, seconds } = await bench({ url: `${srv.url}/stall-headers/v1`, requests: 4, concurrency: [2], timeoutMs: 10_000, levelTimeoutMs: 600 });
    const r = report.levels[0]!.runs[0]!;
    expect(r.deadlineHit).toBe(true);
    expect(r.failures.timeout).toBe(2);
    expect(r.failures.not_started).toBe(2);
    expect(r.perRequest.filter((p) => p.failure === 'timeout').every((p) => /level deadline/.test(p.error!))).toBe(true);
    expect(seconds).toBeLessThan(8);
  });

  it('a refused connection is a failure, not a hang', async () => {
    const closed = await startFaultyServer();
    const url = closed.url;
    await closed.close();
    const { report } = await bench({ url, modelName: 'm', requests: 2 });
    expect(report.levels[0]!.failures.connection_dropped).toBe(2);
    expect(report.levels[0]!.runs[0]!.errors[0]).toMatch(/ECONNREFUSED/);
  });

  it('measures TTFT and inter-token gaps per chunk', async () => {
    const slow = await startFaultyServer({ firstTokenMs: 120, tokenGapMs: 30, tokens: 5 });
    try {
      const { report } = await bench({ url: `${slow.url}/ok`, requests: 2, concurrency: [2] });
      const l = report.levels[0]!;
      expect(l.ok).toBe(2);
      expect(l.ttftMs.p50!).toBeGreaterThanOrEqual(115);
      expect(l.itlMs.count).toBe(8);
      // Gaps of 30 ms: a loaded machine delivers a chunk late and the next one early, so only half is asserted.
      expect(l.itlMs.min!).toBeGreaterThanOrEqual(15);
      expect(l.runs[0]!.outputTokens).toBe(10);
      expect(l.outputTokPerS).toBeGreaterThan(0);
    } finally {
      await slow.close();
    }
  });

  it('a server that ignores stream:true still counts, without per-token timings', async () => {
    const { report } = await bench({ url: `${srv.url}/json-once/v1`, schema: schemaFile, requests: 2 });
    const r = report.levels[0]!.runs[0]!;
    expect(r.ok).toBe(2);
    expect(r.outputTokens).toBe(8);
    expect(r.validity?.validityPct).toBe(100);
  });

  it('vision and mixed workloads send images as data: URI image_url parts', async () => {
    const images = join(dir, 'images');
    mkdirSync(images, { recursive: true });
    copyFileSync(join(root, 'test/fixtures/vlm/images/tiny_rgba_48x40.png'), join(images, 'a.png'));
    copyFileSync(join(root, 'test/fixtures/vlm/images/square_130x130.png'), join(images, 'b.png'));
    writeFileSync(join(images, 'notes.txt'), 'not an image');
    const before = srv.received.length;
    const { report } = await bench({ url: `${srv.url}/ok/v1`, images, schema: schemaFile, workload: 'mixed', requests: 24, concurrency: [4] });
    expect(report.settings.workload).toEqual(['text', 'schema', 'vision']);
    expect(report.settings.images).toBe(2);
    expect(report.levels[0]!.ok).toBe(24);
    const got = srv.received.slice(before);
    const vision = got.filter((r) => JSON.stringify(r.body.messages).includes('image_url'));
    const schema = got.filter((r) => r.body.response_format !== undefined);
    expect(vision.length).toBeGreaterThan(0);
    expect(schema.length).toBeGreaterThan(0);
    expect(vision.length + schema.length).toBeLessThan(24); // the rest are plain text
    for (const r of vision) {
      const parts = (r.body.messages as { content: { type: string; image_url?: { url: string } }[] }[])[0]!.content;
      const img = parts.find((p) => p.type === 'image_url')!;
      expect(img.image_url!.url).toMatch(/^data:image\/png;base64,[A-Za-z0-9+/]+=*$/);
      expect(parts.some((p) => p.type === 'text')).toBe(true);
    }
    // Same seed, same requests: the workload is reproducible across servers.
    const again = srv.received.length;
    await bench({ url: `${srv.url}/ok/v1`, images, schema: schemaFile, workload: 'mixed', requests: 24, concurrency: [4] });
    const sorted = (rs: typeof got) => rs.map((r) => JSON.stringify(r.body)).sort();
    expect(sorted(srv.received.slice(again))).toEqual(sorted(got));
  });

  it('the live (ink) view draws progress on a terminal and leaves the table after it', async () => {
    let text = '';
    const tty = Object.assign(
      new Writable({
        write(chunk, _enc, cb) {
          text += String(chunk);
          cb();
        },
      }),
      { isTTY: true, columns: 160, rows: 50 },
    );
    const report = await runBench(
      { url: `${srv.url}/ok/v1`, concurrency: [1, 2], requests: 3, runs: 1, seed: 1, timeoutMs: 5_000, maxTokens: 8, temperature: 0, promptLen: '4', warmup: 0 },
      { stdout: tty, stderr: new Writable({ write: (_c, _e, cb) => cb() }), version: 'test' },
    );
    expect(report.levels.map((l) => l.ok)).toEqual([3, 3]);
    expect(text).toContain('rapid bench → faulty-model');
    expect(text).toMatch(/✓ c=2 run 1\/1: 3\/3 ok/);
    expect(text).toMatch(/concurrency \| run 1 +\| avg validity/);
  });

  it('rejects bad flag combinations before sending anything', async () => {
    await expect(bench({ url: srv.url, model: 'x' })).rejects.toThrow(/not both/);
    await expect(bench({})).rejects.toThrow(/--url/);
    await expect(bench({ url: srv.url, workload: 'mixed' })).rejects.toThrow(/--workload mixed needs/);
    await expect(bench({ url: srv.url, images: join(dir, 'nowhere') })).rejects.toThrow(/--images/);
    await expect(bench({ url: srv.url, promptLen: 'uniform:9-3' })).rejects.toThrow(/below MIN/);
    await expect(bench({ url: srv.url, concurrency: [0] })).rejects.toThrow(/--concurrency/);
  });
});
