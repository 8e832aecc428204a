// The figures' maths: percentiles (numpy's linear interpolation), summaries, seeded length
// distributions, SSE parsing, level metrics from outcomes, endpoint resolution, chart ticks.
import { describe, expect, it } from 'vitest';
import { percentile, summarize, mean, round } from '../../src/bench/sweep/stats.js';
import { parseLengthDistribution, sampleLength } from '../../src/bench/sweep/length-distribution.js';
import { createRng, mixSeed } from '../../src/bench/sweep/rng.js';
import { SseParser } from '../../src/bench/sweep/sse-parser.js';
import { levelRunResult, levelSummary } from '../../src/bench/sweep/level-metrics.js';
import type { RequestOutcome } from '../../src/bench/sweep/outcome.js';
import { chatCompletionsUrl, modelsUrl } from '../../src/bench/sweep/endpoint.js';
import { niceTicks } from '../../src/bench/sweep/svg-chart.js';
import { generateRequests } from '../../src/bench/sweep/workload.js';
import { resultsTable } from '../../src/bench/sweep/results-table.js';
import { parseConcurrencyList } from '../../src/cli/commands/bench.js';

describe('percentiles and summaries', () => {
  it('interpolates linearly between ranks like numpy', () => {
    const xs = [15, 20, 35, 40, 50];
    expect(percentile(xs, 50)).toBe(35);
    expect(percentile(xs, 0)).toBe(15);
    expect(percentile(xs, 100)).toBe(50);
    expect(percentile(xs, 40)).toBeCloseTo(29); // rank 1.6: 20 + 0.6 * 15
    expect(percentile(xs, 90)).toBeCloseTo(46); // rank 3.6: 40 + 0.6 * 10
    expect(percentile([1, 2, 3, 4], 50)).toBe(2.5);
    expect(percentile([5, 1, 4, 2, 3], 25)).toBe(2); // unsorted input
    expect(percentile([7], 99)).toBe(7);
    expect(percentile([], 50)).toBeNull();
  });

  it('p99 of 1..100 and a summary with min, max and mean', () => {
    const xs = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(percentile(xs, 99)).toBeCloseTo(99.01);
    expect(percentile(xs, 90)).toBeCloseTo(90.1);
    const s = summarize([3, 1, 2, Number.NaN]);
    expect(s).toEqual({ count: 3, mean: 2, min: 1, max: 3, p50: 2, p90: 2.8, p99: 2.98 });
    expect(summarize([])).toEqual({ count: 0, mean: null, min: null, max: null, p50: null, p90: null, p99: null });
    expect(mean([])).toBeNull();
    expect(round(2.345, 2)).toBe(2.35);
    expect(round(null)).toBeNull();
  });
});

describe('seeded workloads', () => {
  it('parses and samples length distributions within their bounds', () => {
    expect(parseLengthDistribution('128')).toEqual({ kind: 'fixed', value: 128 });
    expect(parseLengthDistribution('uniform:4-9')).toEqual({ kind: 'uniform', min: 4, max: 9 });
    expect(parseLengthDistribution('normal:100,20')).toEqual({ kind: 'normal', mean: 100, std: 20 });
    expect(() => parseLengthDistribution('zipf:3')).toThrow(/unknown kind/);
    expect(() => parseLengthDistribution('0')).toThrow(/at least 1/);
    const rng = createRng(42);
    const u = parseLengthDistribution('uniform:4-9');
    const seen = new Set<number>();
    for (let i = 0; i < 500; i++) seen.add(sampleLength(u, rng));
    expect([...seen].sort((a, b) => a - b)).toEqual([4, 5, 6, 7, 8, 9]);
    const n = parseLengthDistribution('normal:100,20');
    const xs = Array.from({ length: 4000 }, () => sampleLength(n, rng));
    expect(Math.abs(mean(xs)! - 100)).toBeLessThan(2);
    expect(Math.min(...xs)).toBeGreaterThanOrEqual(1);
    expect(Math.abs(percentile(xs, 50)! - 100)).toBeLessThan(3);
  });

  it('same seed, level and run give the same requests; others differ', () => {
    const o = { kinds: ['text' as const], promptLength: parseLengthDistribution('uniform:5-20'), outputLength: parseLengthDistribution('uniform:4-64'), maxTokens: 32, seed: 7 };
    const a = generateRequests(o, 6, 4, 1);
    expect(generateRequests(o, 6, 4, 1)).toEqual(a);
    expect(generateRequests(o, 6, 4, 2)).not.toEqual(a);
    expect(generateRequests({ ...o, seed: 8 }, 6, 4, 1)).not.toEqual(a);
    expect(a.every((r) => r.maxTokens >= 4 && r.maxTokens <= 32 && r.promptWords >= 5 && r.promptWords <= 20)).toBe(true);
    expect(mixSeed(1, 2, 3)).not.toBe(mixSeed(1, 3, 2));
  });
});

describe('stream parsing and metrics', () => {
  it('parses SSE split at any byte, with CRLF, comments and multi-line data', () => {
    const text = ': keep-alive\r\n\r\ndata: {"a":1}\r\n\r\ndata: line1\ndata: line2\n\nevent: x\ndata: [DONE]\n\n';
    for (let cut = 0; cut < text.length; cut++) {
      const p = new SseParser();
      const got = [...p.push(text.slice(0, cut)), ...p.push(text.slice(cut)), ...p.end()];
      expect(got).toEqual(['{"a":1}', 'line1\nline2', '[DONE]']);
    }
    const p = new SseParser();
    expect([...p.push('data: tail'), ...p.end()]).toEqual(['tail']);
  });

  it('computes a level run from outcomes', () => {
    const o = (x: Partial<RequestOutcome>): RequestOutcome => ({ index: 0, kind: 'schema', ok: true, startMs: 0, itlMs: [], e2eMs: 1000, outputTokens: 10, tokensFromUsage: true, content: '{}', ...x });
    const outcomes = [
      o({ ttftMs: 100, itlMs: [10, 20], jsonValid: true, schemaValid: true, httpStatus: 200, finishReason: 'stop' }),
      o({ ttftMs: 300, itlMs: [30], e2eMs: 500, outputTokens: 20, jsonValid: true, schemaValid: true, httpStatus: 200 }),
      o({ ok: false, failure: 'schema_violation', jsonValid: true, schemaValid: false, error: 'bad', httpStatus: 200, outputTokens: 5, ttftMs: 200, itlMs: [40] }),
      o({ ok: false, failure: 'http_error', httpStatus: 503, error: 'HTTP 503', outputTokens: 0 }),
      o({ kind: 'text', ok: false, failure: 'timeout', outputTokens: 3 }),
    ];
    const r = levelRunResult(4, 1, outcomes, 2000, false);
    expect(r).toMatchObject({ requests: 5, ok: 2, failed: 3, outputTokens: 38, goodTokens: 30, outputTokPerS: 19, goodputTokPerS: 15, requestsPerS: 1 });
    expect(r.failures).toMatchObject({ schema_violation: 1, http_error: 1, timeout: 1, invalid_json: 0 });
    expect(r.httpStatuses).toEqual({ '200': 3, '503': 1 });
    expect(r.validity).toEqual({ requests: 4, judged: 3, jsonValid: 3, schemaValid: 2, jsonValidityPct: 100, validityPct: 66.7 });
    // Latency covers every complete reply, the schema violation included; not the timeout or the 503.
    expect(r.ttftMs).toMatchObject({ count: 3, p50: 200, min: 100, max: 300 });
    expect(r.itlMs).toMatchObject({ count: 4, p50: 25, mean: 25 });
    expect(r.perRequestTokPerS).toMatchObject({ count: 3, min: 5, max: 40 });
    expect(r.e2eMs).toMatchObject({ count: 3, p50: 1000 });
    const s = levelSummary(4, [r, { ...r, run: 2, outputTokPerS: 25, validity: { ...r.validity!, validityPct: 33.3 } }], [outcomes, outcomes]);
    expect(s).toMatchObject({ requests: 10, ok: 4, outputTokPerS: 22, goodputTokPerS: 15, avgValidityPct: 50 });
    expect(s.failures.timeout).toBe(2);
    expect(s.ttftMs.count).toBe(6);
    const table = resultsTable([s]);
    expect(table.split('\n')[0]).toMatch(/^concurrency \| run 1 +\| run 2 +\| avg validity \| tok\/s \| TTFT p50\/p99 ms \| ITL p50\/p99 ms$/);
    expect(table.split('\n')[2]).toMatch(/^ {10}4 \| 2\/5 19.0 t\/s 67% +\| 2\/5 25.0 t\/s 33% +\| 50.0% +\| 22.0 +\| 200\/300 +\| 25.0\/40.0$/);
        expect(table).toContain('c=4 run 1: 1 http_error (503), 1 timeout, 1 schema_violation');
  });
});

describe('flags and helpers', () => {
  it('resolves the chat endpoint from a root, /v1 or the endpoint itself', () => {
    expect(chatCompletionsUrl('http://h:8000')).toBe('http://h:8000/v1/chat/completions');
    expect(chatCompletionsUrl('http://h:8000/v1/')).toBe('http://h:8000/v1/chat/completions');
    expect(chatCompletionsUrl('https://h/api/v1/chat/completions')).toBe('https://h/api/v1/chat/completions');
    expect(modelsUrl('http://h/v1/chat/completions')).toBe('http://h/v1/models');
    expect(() => chatCompletionsUrl('ftp://h')).toThrow(/http/);
    expect(parseConcurrencyList('1, 2,4,16')).toEqual([1, 2, 4, 16]);
    expect(() => parseConcurrencyList('1,0')).toThrow(/positive integers/);
    expect(() => parseConcurrencyList('two')).toThrow(/positive integers/);
  });

  it('chooses round chart ticks', () => {
    expect(niceTicks(100, 5)).toEqual([0, 20, 40, 60, 80, 100]);
    expect(niceTicks(118.3, 5)).toEqual([0, 50, 100, 150]);
    expect(niceTicks(0.37, 5)).toEqual([0, 0.1, 0.2, 0.3, 0.4]);
    expect(niceTicks(0)).toEqual([0, 1]);
  });
});
