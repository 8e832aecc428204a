// The sweep: for every concurrency level, R runs of N requests each, with per-level deadlines;
// warm-up requests first (not measured). Returns every figure; progress goes to a listener.
import { levelRunResult, levelSummary, type LevelRunResult, type LevelSummary } from './level-metrics.js';
import type { RequestOutcome } from './outcome.js';
import { runLevel, type LevelProgress } from './run-level.js';
import type { SchemaCheck } from './schema-validator.js';
import type { StreamTarget } from './stream-request.js';
import { generateRequests, type WorkloadOptions } from './workload.js';

export interface SweepListener {
  levelStart?(concurrency: number, run: number, requests: number): void;
  progress?(concurrency: number, run: number, p: LevelProgress): void;
  levelDone?(result: LevelRunResult): void;
}

export interface SweepOptions {
  target: StreamTarget;
  workload: WorkloadOptions;
  concurrency: number[];
  requests: number;
  runs: number;
  timeoutMs: number;
  /** Per level run; default: enough for every request to time out once in turn, plus 5 s. */
  levelDeadlineMs?: number;
  temperature: number;
  warmup: number;
  schema?: SchemaCheck;
  listener?: SweepListener;
}

export interface SweepResult {
  startedAt: string;
  wallMs: number;
  levels: LevelSummary[];
}

export function defaultLevelDeadlineMs(requests: number, concurrency: number, timeoutMs: number): number {
  return Math.ceil(requests / Math.max(1, concurrency)) * timeoutMs + 5_000;
}

export function validateSweep(o: Pick<SweepOptions, 'concurrency' | 'requests' | 'runs' | 'timeoutMs' | 'warmup'>): void {
  if (o.concurrency.length === 0 || o.concurrency.some((c) => !Number.isInteger(c) || c < 1)) throw new Error('--concurrency expects positive integers, e.g. 1,2,4,16');
  if (!Number.isInteger(o.requests) || o.requests < 1) throw new Error('--requests must be at least 1');
  if (!Number.isInteger(o.runs) || o.runs < 1) throw new Error('--runs must be at least 1');
  if (!(o.timeoutMs > 0)) throw new Error('--timeout-ms must be positive');
  if (!Number.isInteger(o.warmup) || o.warmup < 0) throw new Error('--warmup must be 0 or more');
}

export async function runSweep(o: SweepOptions): Promise<SweepResult> {
  validateSweep(o);
  const startedAt = new Date().toISOString();
  const t0 = performance.now();
  if (o.warmup > 0) {
    const requests = generateRequests(o.workload, o.warmup, 0, 0);
    await runLevel({ target: o.target, requests, concurrency: 1, timeoutMs: o.timeoutMs, deadlineMs: defaultLevelDeadlineMs(o.warmup, 1, o.timeoutMs), temperature: o.temperature, schema: o.schema });
  }
  const levels: LevelSummary[] = [];
  for (const c of o.concurrency) {
    const runs: LevelRunResult[] = [];
    const outcomes: RequestOutcome[][] = [];
    for (let run = 1; run <= o.runs; run++) {
      const requests = generateRequests(o.workload, o.requests, c, run);
      o.listener?.levelStart?.(c, run, requests.length);
      const r = await runLevel({
        target: o.target,
        requests,
        concurrency: c,
        timeoutMs: o.timeoutMs,
        deadlineMs: o.levelDeadlineMs ?? defaultLevelDeadlineMs(o.requests, c, o.timeoutMs),
        temperature: o.temperature,
        schema: o.schema,
        onProgress: (p) => o.listener?.progress?.(c, run, p),
      });
      const result = levelRunResult(c, run, r.outcomes, r.wallMs, r.deadlineHit);
      runs.push(result);
      outcomes.push(r.outcomes);
      o.listener?.levelDone?.(result);
    }
    levels.push(levelSummary(c, runs, outcomes));
  }
  return { startedAt, wallMs: Math.round(performance.now() - t0), levels };
}
