// Figures of one level run (and of a level over its runs) from the request outcomes: counts by
// failure type and HTTP status, JSON/schema validity, aggregate and per-request token rates, and
// TTFT / inter-token / end-to-end latency percentiles. Throughput counts every token received
// (goodput only those of successful replies); latencies cover every complete reply, valid or not.
import { completed, FAILURE_TYPES, type FailureType, type RequestOutcome } from './outcome.js';
import { mean, round, summarize, type Summary } from './stats.js';

export interface Validity {
  /** Structured-output requests in the run. */
  requests: number;
  /** Of those, replies that came back complete (a verdict was possible). */
  judged: number;
  jsonValid: number;
  schemaValid: number;
  /** jsonValid / judged, in percent (null when nothing was judged). */
  jsonValidityPct: number | null;
  /** schemaValid / judged, in percent: the reply parsed and satisfied the schema. */
  validityPct: number | null;
}

export interface RequestRecord {
  index: number;
  kind: string;
  ok: boolean;
  failure?: FailureType;
  httpStatus?: number;
  error?: string;
  startMs: number;
  ttftMs: number | null;
  e2eMs: number;
  outputTokens: number;
  tokensFromUsage: boolean;
  promptTokens?: number;
  finishReason?: string;
  meanItlMs: number | null;
  tokPerS: number | null;
}

export interface LevelRunResult {
  concurrency: number;
  run: number;
  requests: number;
  ok: number;
  failed: number;
  failures: Record<FailureType, number>;
  httpStatuses: Record<string, number>;
  finishReasons: Record<string, number>;
  validity: Validity | null;
  wallMs: number;
  deadlineHit: boolean;
  /** Tokens received, failed replies included. */
  outputTokens: number;
  /** Tokens of successful replies. */
  goodTokens: number;
  /** outputTokens / level wall time. */
  outputTokPerS: number;
  /** goodTokens / level wall time. */
  goodputTokPerS: number;
  /** Successful replies / level wall time. */
  requestsPerS: number;
  /** Each complete reply's tokens / its end-to-end time. */
  perRequestTokPerS: Summary;
  ttftMs: Summary;
  itlMs: Summary;
  e2eMs: Summary;
  /** Prompt tokens as the server counted them (usage), where it said. */
  promptTokens: Summary;
  /** The first few distinct failure messages. */
  errors: string[];
  perRequest: RequestRecord[];
}

export interface LevelSummary {
  concurrency: number;
  runs: LevelRunResult[];
  requests: number;
  ok: number;
  failed: number;
  failures: Record<FailureType, number>;
  /** Mean over runs with structured requests. */
  avgValidityPct: number | null;
  avgJsonValidityPct: number | null;
  /** Means of the runs' aggregate rates. */
  outputTokPerS: number;
  goodputTokPerS: number;
  /** Over every request of every run. */
  ttftMs: Summary;
  itlMs: Summary;
  e2eMs: Summary;
  perRequestTokPerS: Summary;
}

function emptyFailures(): Record<FailureType, number> {
  return Object.fromEntries(FAILURE_TYPES.map((f) => [f, 0])) as Record<FailureType, number>;
}

function roundSummary(s: Summary, digits = 1): Summary {
  return { count: s.count, mean: round(s.mean, digits), min: round(s.min, digits), max: round(s.max, digits), p50: round(s.p50, digits), p90: round(s.p90, digits), p99: round(s.p99, digits) };
}

function tokPerS(o: RequestOutcome): number | null {
  return completed(o) && o.e2eMs > 0 && o.outputTokens > 0 ? (o.outputTokens / o.e2eMs) * 1000 : null;
}

export function levelRunResult(concurrency: number, run: number, outcomes: RequestOutcome[], wallMs: number, deadlineHit: boolean): LevelRunResult {
  const failures = emptyFailures();
  const httpStatuses: Record<string, number> = {};
  const finishReasons: Record<string, number> = {};
  const errors: string[] = [];
  let ok = 0;
  let good = 0;
  let tokens = 0;
  for (const o of outcomes) {
    if (o.httpStatus !== undefined) httpStatuses[o.httpStatus] = (httpStatuses[o.httpStatus] ?? 0) + 1;
    if (o.finishReason) finishReasons[o.finishReason] = (finishReasons[o.finishReason] ?? 0) + 1;
    tokens += o.outputTokens;
    if (o.ok) {
      ok++;
      good += o.outputTokens;
    } else if (o.failure) {
      failures[o.failure]++;
      const msg = `${o.failure}: ${o.error ?? ''}`;
      if (errors.length < 5 && !errors.includes(msg)) errors.push(msg);
    }
  }
  const structured = outcomes.filter((o) => o.kind === 'schema');
  const judged = structured.filter((o) => o.jsonValid !== undefined);
  const jsonValid = judged.filter((o) => o.jsonValid).length;
  const schemaValid = judged.filter((o) => o.schemaValid).length;
  const validity: Validity | null =
    structured.length === 0
      ? null
      : {
          requests: structured.length,
          judged: judged.length,
          jsonValid,
          schemaValid,
          jsonValidityPct: judged.length ? round((100 * jsonValid) / judged.length) : null,
          validityPct: judged.length ? round((100 * schemaValid) / judged.length) : null,
        };
  const wallS = wallMs / 1000;
  return {
    concurrency,
    run,
    requests: outcomes.length,
    ok,
    failed: outcomes.length - ok,
    failures,
    httpStatuses,
    finishReasons,
    validity,
    wallMs: round(wallMs)!,
    deadlineHit,
    outputTokens: tokens,
    goodTokens: good,
    outputTokPerS: wallS > 0 ? round(tokens / wallS, 2)! : 0,
    goodputTokPerS: wallS > 0 ? round(good / wallS, 2)! : 0,
    requestsPerS: wallS > 0 ? round(ok / wallS, 3)! : 0,
    perRequestTokPerS: roundSummary(summarize(outcomes.map(tokPerS).filter((x): x is number => x !== null)), 2),
    ttftMs: roundSummary(summarize(outcomes.filter((o) => completed(o) && o.ttftMs !== undefined).map((o) => o.ttftMs!))),
    itlMs: roundSummary(summarize(outcomes.filter(completed).flatMap((o) => o.itlMs)), 2),
    e2eMs: roundSummary(summarize(outcomes.filter(completed).map((o) => o.e2eMs))),
    promptTokens: roundSummary(summarize(outcomes.filter((o) => o.promptTokens !== undefined).map((o) => o.promptTokens!))),
    errors,
    perRequest: outcomes.map((o) => ({
      index: o.index,
      kind: o.kind,
      ok: o.ok,
      ...(o.failure ? { failure: o.failure } : {}),
      ...(o.httpStatus !== undefined ? { httpStatus: o.httpStatus } : {}),
      ...(o.error ? { error: o.error } : {}),
      startMs: round(o.startMs)!,
      ttftMs: o.ttftMs === undefined ? null : round(o.ttftMs),
      e2eMs: round(o.e2eMs)!,
      outputTokens: o.outputTokens,
      tokensFromUsage: o.tokensFromUsage,
      ...(o.promptTokens !== undefined ? { promptTokens: o.promptTokens } : {}),
      ...(o.finishReason ? { finishReason: o.finishReason } : {}),
      meanItlMs: round(mean(o.itlMs), 2),
      tokPerS: round(tokPerS(o), 2),
    })),
  };
}

/** A level over its runs; latency percentiles pool every run's requests. */
export function levelSummary(concurrency: number, runs: LevelRunResult[], outcomes: RequestOutcome[][]): LevelSummary {
  const failures = emptyFailures();
  for (const r of runs) for (const f of FAILURE_TYPES) failures[f] += r.failures[f];
  const all = outcomes.flat();
  const done = all.filter(completed);
  const validities = runs.map((r) => r.validity?.validityPct).filter((v): v is number => v !== null && v !== undefined);
  const jsonValidities = runs.map((r) => r.validity?.jsonValidityPct).filter((v): v is number => v !== null && v !== undefined);
  return {
    concurrency,
    runs,
    requests: runs.reduce((a, r) => a + r.requests, 0),
    ok: runs.reduce((a, r) => a + r.ok, 0),
    failed: runs.reduce((a, r) => a + r.failed, 0),
    failures,
    avgValidityPct: round(mean(validities)),
    avgJsonValidityPct: round(mean(jsonValidities)),
    outputTokPerS: round(mean(runs.map((r) => r.outputTokPerS)), 2) ?? 0,
    goodputTokPerS: round(mean(runs.map((r) => r.goodputTokPerS)), 2) ?? 0,
    ttftMs: roundSummary(summarize(done.filter((o) => o.ttftMs !== undefined).map((o) => o.ttftMs!))),
    itlMs: roundSummary(summarize(done.flatMap((o) => o.itlMs)), 2),
    e2eMs: roundSummary(summarize(done.map((o) => o.e2eMs))),
    perRequestTokPerS: roundSummary(summarize(all.map(tokPerS).filter((x): x is number => x !== null)), 2),
  };
}
