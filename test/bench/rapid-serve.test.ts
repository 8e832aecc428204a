// `rapid bench` against real rapid servers on fixture checkpoints, over real HTTP: the model
// served in-process by bench itself (text, and a vision fixture with images), a running server
// benched through --url (with structured output), and the CLI binary end to end.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/cli/commands/serve.js';
import type { BenchReport } from '../../src/bench/sweep/bench-report.js';
import { runBench, type BenchOptions } from '../../src/bench/sweep/run-bench.js';
import { nativeAvailable } from '../helpers/addon.js';

const root = resolve(import.meta.dirname, '..', '..');
const fixture = join(root, 'test', 'fixtures', 'models', 'qwen2-q4');
const dir = mkdtempSync(join(tmpdir(), 'rapid-bench-real-'));

function bench(o: Partial<BenchOptions>): Promise<{ report: BenchReport; stdout: string }> {
  let stdout = '';
  const out = new Writable({
    write(c, _e, cb) {
      stdout += String(c);
      cb();
    },
  });
  const opts: BenchOptions = { concurrency: [1, 3], requests: 3, runs: 1, seed: 5, timeoutMs: 30_000, maxTokens: 8, temperature: 0, promptLen: 'uniform:4-24', warmup: 1, progress: 'plain', threads: 2, ...o };
  return runBench(opts, { stdout: out, stderr: new Writable({ write: (_c, _e, cb) => cb() }), version: 'test' }).then((report) => ({ report, stdout }));
}

/** Every request came back, with timed tokens (a tiny random model may end at once: empty content). */
function expectServed(report: BenchReport): void {
  for (const level of report.levels) {
    for (const r of level.runs) {
      expect(r.failed - r.failures.empty_content).toBe(0);
      expect(r.httpStatuses).toEqual({ '200': r.requests });
    }
  }
  const ok = report.levels.flatMap((l) => l.runs.flatMap((r) => r.perRequest.filter((p) => p.ok)));
  expect(ok.length).toBeGreaterThan(0);
  for (const p of ok) {
    expect(p.tokensFromUsage).toBe(true);
    expect(p.outputTokens).toBeGreaterThan(0);
    expect(p.outputTokens).toBeLessThanOrEqual(8);
    expect(p.ttftMs).toBeGreaterThan(0);
    expect(p.ttftMs!).toBeLessThanOrEqual(p.e2eMs);
  }
  expect(report.levels.every((l) => l.outputTokPerS > 0)).toBe(true);
}

describe.skipIf(!nativeAvailable())('rapid bench against rapid serving a fixture model', () => {
  it('serves the model itself on a loopback port and benches it over HTTP', async () => {
    const { report, stdout } = await bench({ model: fixture });
    expect(report.target.inProcessModel).toBe(fixture);
    expect(report.target.endpoint).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1\/chat\/completions$/);
    expect(report.target.model).toBe('qwen2-q4');
    expectServed(report);
    expect(report.levels[1]!.itlMs.count).toBeGreaterThan(0);
    expect(stdout).toMatch(/^ +3 \| 3\/3 /m);
  });

  it('vision: images sent as data: URIs to a vision fixture served in-process', async () => {
    const vlm = join(root, 'test', 'fixtures', 'vlm', 'qwen2_5_vl-q4');
    const images = join(root, 'test', 'fixtures', 'vlm', 'images');
    const { report } = await bench({ model: vlm, images, workload: 'mixed', concurrency: [2], requests: 6 });
    expect(report.settings.workload).toEqual(['text', 'vision']);
    const r = report.levels[0]!.runs[0]!;
    expect(r.perRequest.some((p) => p.kind === 'vision')).toBe(true);
    expect(r.failed - r.failures.empty_content).toBe(0);
    expect(r.httpStatuses).toEqual({ '200': 6 });
  });

  describe('a running server through --url', () => {
    let srv: RunningServer;
    beforeAll(async () => {
      srv = await startServer(fixture, { port: 0, threads: 2, kvCacheMemory: 16 << 20, blockSize: 16, maxNumSeqs: 8, servedModelName: 'fx' });
    });
    afterAll(async () => {
      await srv?.close(1000);
    });

    it('plain text: every request answered and timed', async () => {
      const { report } = await bench({ url: srv.url });
      expect(report.target.model).toBe('fx'); // from GET /v1/models
      expectServed(report);
    });

    it('the sampled workload: temperature 0.8 / top-p 0.95 requests, served; a flag wins over the preset', async () => {
      const { report, stdout } = await bench({ url: srv.url, workload: 'sampled', temperature: undefined, concurrency: [2], requests: 4 });
      expect(report.settings).toMatchObject({ temperature: 0.8, topP: 0.95, workload: ['text'] });
      expect(stdout).toContain('· sampled ·');
      expectServed(report);
      const { report: cold } = await bench({ url: srv.url, workload: 'sampled', temperature: 0.3, concurrency: [1], requests: 1 });
      expect(cold.settings).toMatchObject({ temperature: 0.3, topP: 0.95 });
    });

    it('the long-prompt workload: 1024-word prompts (about a token each) unless --prompt-len says otherwise', async () => {
      const { report } = await bench({ url: srv.url, workload: 'long-prompt', promptLen: undefined, concurrency: [1], requests: 1, maxTokens: 2 });
      expect(report.settings.promptLength).toBe('1024');
      const ok = report.levels[0]!.runs[0]!.perRequest.filter((p) => p.ok);
      expect(ok.length).toBe(1);
      expect(ok[0]!.promptTokens).toBeGreaterThanOrEqual(1024);
    });

    it('structured output: grammar-constrained replies pass the schema', async () => {
      const schemaFile = join(dir, 'schema.json');
      writeFileSync(schemaFile, JSON.stringify({ type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false }));
      const { report } = await bench({ url: `${srv.url}/v1`, schema: schemaFile, maxTokens: 24, concurrency: [2], requests: 4 });
      const r = report.levels[0]!.runs[0]!;
      expect(r.validity!.requests).toBe(4);
      // Cut off by max_tokens is the one way a constrained reply can be invalid JSON.
      const cut = r.perRequest.filter((p) => p.finishReason === 'length').length;
      expect(r.validity!.schemaValid + cut).toBe(4);
      expect(r.failures.schema_violation).toBe(0);
      expect(r.failures.http_error + r.failures.timeout + r.failures.connection_dropped + r.failures.stream_error).toBe(0);
    });
  });

  it('the CLI: `rapid bench MODEL` prints the table and writes --json and --report', async () => {
    const json = join(dir, 'cli.json');
    const html = join(dir, 'cli.html');
    const args = [join(root, 'bin', 'rapid.js'), 'bench', fixture, '-c', '1,2', '-n', '2', '--max-tokens', '4', '--prompt-len', '6', '--threads', '2', '--json', json, '--report', html];
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const code = await new Promise<number | null>((res) => {
      const kill = setTimeout(() => child.kill('SIGKILL'), 50_000);
      child.on('close', (c) => (clearTimeout(kill), res(c)));
    });
    expect(stderr).not.toMatch(/rapid: /);
    expect(code).toBe(0);
    expect(stdout).toMatch(/c=2 run 1\/1: \d\/2 ok/); // not a TTY: plain lines
    expect(stdout).toMatch(/concurrency \| run 1 +\| avg validity \| tok\/s \| TTFT p50\/p99 ms/);
    const report = JSON.parse(readFileSync(json, 'utf8')) as BenchReport;
    expect(report.levels.map((l) => l.concurrency)).toEqual([1, 2]);
    expect(existsSync(html)).toBe(true);
  });
});
