// The HTML report in a real browser: headless Chromium (Debian's chromium package) renders it with
// no network; the screenshot is not blank and shows the chart colours, and the DOM holds the charts.
// Skips when no Chromium is installed.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import type { BenchReport } from '../../src/bench/sweep/bench-report.js';
import { htmlReport } from '../../src/bench/sweep/html-report.js';
import { levelRunResult, levelSummary } from '../../src/bench/sweep/level-metrics.js';
import type { RequestOutcome } from '../../src/bench/sweep/outcome.js';

function findChromium(): string | null {
  for (const bin of ['chromium', 'chromium-browser', 'google-chrome']) {
    const r = spawnSync(bin, ['--version'], { encoding: 'utf8', timeout: 20_000 });
    if (r.status === 0) return bin;
  }
  return null;
}
const chromium = findChromium();

/** A sweep's worth of outcomes: latency grows with concurrency, a few schema replies fail. */
function syntheticReport(): BenchReport {
  const levels = [1, 2, 4, 8, 16].map((c) => {
    const runs = [1, 2, 3].map((run) => {
      const outcomes: RequestOutcome[] = Array.from({ length: 12 }, (_, i) => {
        const bad = (i + run + c) % 11 === 0;
        return {
          index: i,
          kind: 'schema',
          ok: !bad,
          ...(bad ? { failure: 'schema_violation' as const, error: 'must have required property count' } : {}),
          startMs: i * 10,
          ttftMs: 80 * Math.sqrt(c) + i * 3 + run,
          itlMs: Array.from({ length: 20 }, (_, k) => 12 + c * 1.5 + ((k * 7 + i) % 5)),
          e2eMs: 400 + 60 * c + i * 5,
          outputTokens: 21,
          tokensFromUsage: true,
          finishReason: 'stop',
          content: '{}',
          jsonValid: true,
          schemaValid: !bad,
        };
      });
      return { result: levelRunResult(c, run, outcomes, 2000 + 150 * c / Math.log2(c + 1), false), outcomes };
    });
    return levelSummary(c, runs.map((r) => r.result), runs.map((r) => r.outcomes));
  });
  return {
    tool: 'rapid bench',
    version: 'test',
    startedAt: '2026-01-01T00:00:00.000Z',
    wallMs: 60_000,
    target: { endpoint: 'http://127.0.0.1:9/v1/chat/completions', model: 'synthetic', inProcessModel: null },
    settings: { concurrency: [1, 2, 4, 8, 16], requests: 12, runs: 3, seed: 0, timeoutMs: 120_000, levelDeadlineMs: null, maxTokens: 32, temperature: 0, warmup: 1, promptLength: '128', outputLength: '32', workload: ['schema'], schemaFile: 'schema.json', imagesDir: null, images: 0 },
    levels,
  };
}

describe.skipIf(!chromium)('the HTML report in headless Chromium', () => {
  it('renders charts that show, with no network', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rapid-bench-report-'));
    const page = join(dir, 'report.html');
    writeFileSync(page, htmlReport(syntheticReport()));
    const url = pathToFileURL(page).href;
    const common = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-extensions', '--no-first-run', `--user-data-dir=${join(dir, 'profile')}`];

    const dom = spawnSync(chromium!, [...common, '--dump-dom', url], { encoding: 'utf8', timeout: 60_000 });
    expect(dom.status).toBe(0);
    const html = dom.stdout;
    for (const id of ['chart-throughput', 'chart-ttft', 'chart-itl', 'chart-e2e', 'chart-validity']) expect(html).toContain(`id="${id}"`);
    expect(html.match(/<path class="series"/g)!.length).toBeGreaterThanOrEqual(10);
    expect(html.match(/<rect class="bar"/g)!.length).toBe(15); // ok %, JSON %, schema % for 5 levels
    expect(html).toContain('<table id="summary">');

    const png = join(dir, 'shot.png');
    const shot = spawnSync(chromium!, [...common, `--screenshot=${png}`, '--window-size=1200,1600', '--hide-scrollbars', url], { encoding: 'utf8', timeout: 60_000 });
    expect(shot.status).toBe(0);
    const { data, info } = await sharp(readFileSync(png)).removeAlpha().raw().toBuffer({ resolveWithObject: true });
    expect([info.width, info.height]).toEqual([1200, 1600]);
    let nonBackground = 0;
    let blue = 0; // the throughput line and JSON bars, #2563eb
    for (let i = 0; i < data.length; i += 3) {
      const [r, g, b] = [data[i]!, data[i + 1]!, data[i + 2]!];
      if (Math.abs(r - 246) + Math.abs(g - 248) + Math.abs(b - 250) > 30 && r + g + b < 720) nonBackground++;
      if (Math.abs(r - 37) < 30 && Math.abs(g - 99) < 30 && Math.abs(b - 235) < 30) blue++;
    }
    const pixels = info.width * info.height;
    expect(nonBackground / pixels).toBeGreaterThan(0.02);
    expect(blue).toBeGreaterThan(500);
  });
});
