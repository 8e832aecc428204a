// `rapid bench --long-prompt WORDS`: does one huge prompt hold back everyone else? A few requests
// are decoding when a long prompt arrives; shortly after, short requests arrive. Measured: the short
// requests' time to first token, and the running requests' inter-token gaps while the long prompt
// prefills (from its send to its first token), p50/p99/max. Same seed, same requests on any server.
import { parseLengthDistribution } from './length-distribution.js';
import { summarize, type Summary } from './stats.js';
import { streamRequest, type StreamTarget } from './stream-request.js';
import { generateRequests, type BenchRequest } from './workload.js';
import type { RequestOutcome } from './outcome.js';

export interface LongPromptMixOptions {
  target: StreamTarget;
  /** Words of filler in the long prompt. */
  longWords: number;
  /** Short requests sent while it prefills (default 5), and requests already decoding (default 2). */
  shorts?: number;
  running?: number;
  /** max_tokens of the short requests (default 16); running ones decode until the long prompt is in. */
  shortTokens?: number;
  /** Words of the short and running prompts (default 32). */
  shortWords?: number;
  /** How long after the long prompt the short ones are sent, ms (default 200). */
  shortDelayMs?: number;
  timeoutMs: number;
  seed: number;
}

export interface LongPromptMixResult {
  longPromptTokens: number | null;
  longTtftMs: number | null;
  shortTtftMs: Summary;
  /** Gaps between tokens of the running requests that ended while the long prompt prefilled. */
  runningItlMs: Summary;
  failures: string[];
}

/** Absolute times (ms after `origin`) of an outcome's token-bearing chunks. */
function tokenTimes(o: RequestOutcome): number[] {
  if (o.ttftMs === undefined) return [];
  const times = [o.startMs + o.ttftMs];
  for (const gap of o.itlMs) times.push(times[times.length - 1]! + gap);
  return times;
}

function requests(o: LongPromptMixOptions, words: number, tokens: number, count: number, salt: number): BenchRequest[] {
  const len = parseLengthDistribution(String(words));
  return generateRequests({ kinds: ['text'], promptLength: len, outputLength: parseLengthDistribution(String(tokens)), maxTokens: tokens, seed: o.seed }, count, salt, 1);
}

export async function runLongPromptMix(o: LongPromptMixOptions): Promise<LongPromptMixResult> {
  const shortWords = o.shortWords ?? 32;
  const shortTokens = o.shortTokens ?? 16;
  const [long] = requests(o, o.longWords, 4, 1, 1);
  const shorts = requests(o, shortWords, shortTokens, o.shorts ?? 5, 2);
  const running = requests(o, shortWords, 100_000, o.running ?? 2, 3);
  const origin = performance.now();
  const ac = new AbortController();
  const opts = { timeoutMs: o.timeoutMs, temperature: 0, levelStart: origin, deadline: ac.signal };
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  // The running requests decode until the long prompt's first token, then are cut (deadline).
  let started = 0;
  const runningDone = running.map((r) => streamRequest(o.target, r, { ...opts, onToken: () => void started++ }));
  while (started < running.length * 4 && performance.now() - origin < o.timeoutMs) await sleep(10);
  const longSentMs = performance.now() - origin;
  const longDone = streamRequest(o.target, long!, { ...opts, deadline: undefined });
  await sleep(o.shortDelayMs ?? 200);
  const shortOutcomes = await Promise.all(shorts.map((r) => streamRequest(o.target, r, { ...opts, deadline: undefined })));
  const longOutcome = await longDone;
  ac.abort();
  const runningOutcomes = await Promise.all(runningDone);

  const longFirstMs = longOutcome.ttftMs !== undefined ? longOutcome.startMs + longOutcome.ttftMs : Infinity;
  const gaps: number[] = [];
  for (const r of runningOutcomes) {
    const t = tokenTimes(r);
    for (let i = 1; i < t.length; i++) if (t[i]! > longSentMs && t[i]! <= longFirstMs) gaps.push(t[i]! - t[i - 1]!);
  }
  const failures = [longOutcome, ...shortOutcomes].filter((x) => !x.ok).map((x) => `${x.failure}: ${x.error ?? ''}`);
  return {
    longPromptTokens: longOutcome.promptTokens ?? null,
    longTtftMs: longOutcome.ttftMs ?? null,
    shortTtftMs: summarize(shortOutcomes.filter((x) => x.ok).map((x) => x.ttftMs!)),
    runningItlMs: summarize(gaps),
    failures,
  };
}

/** The result as a few lines of text. */
export function longPromptMixTable(r: LongPromptMixResult): string {
  const f = (x: number | null) => (x === null ? '-' : x.toFixed(1));
  const row = (name: string, s: Summary) => `${name.padEnd(34)} ${String(s.count).padStart(5)} ${f(s.p50).padStart(9)} ${f(s.p99).padStart(9)} ${f(s.max).padStart(9)}`;
  return [
    `long prompt: ${r.longPromptTokens ?? '?'} tokens, first token after ${f(r.longTtftMs)} ms`,
    `${''.padEnd(34)} ${'n'.padStart(5)} ${'p50 ms'.padStart(9)} ${'p99 ms'.padStart(9)} ${'max ms'.padStart(9)}`,
    row('TTFT of short requests', r.shortTtftMs),
    row('ITL of running requests (prefill)', r.runningItlMs),
    ...(r.failures.length > 0 ? [`failures: ${r.failures.join('; ')}`] : []),
  ].join('\n');
}
