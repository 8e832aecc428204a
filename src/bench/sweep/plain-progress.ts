// Progress as plain lines (stdout is not a terminal): one line when a level run starts, one when
// it ends, with its headline figures and failures.
import type { LevelRunResult } from './level-metrics.js';
import { failureText } from './results-table.js';
import type { SweepListener } from './sweep.js';

function ms(x: number | null): string {
  return x === null ? '-' : `${Math.round(x)} ms`;
}

export function levelLine(r: LevelRunResult, runs: number): string {
  const v = r.validity ? `, validity ${r.validity.validityPct ?? '-'}%` : '';
  const f = r.failed > 0 ? ` [${failureText(r)}]` : '';
  return (
    `c=${r.concurrency} run ${r.run}/${runs}: ${r.ok}/${r.requests} ok, ${r.outputTokPerS.toFixed(1)} tok/s, ` +
    `TTFT p50 ${ms(r.ttftMs.p50)} p99 ${ms(r.ttftMs.p99)}, ITL p50 ${ms(r.itlMs.p50)}${v} (${(r.wallMs / 1000).toFixed(1)} s)${f}`
  );
}

export function plainProgress(write: (line: string) => void, runs: number): SweepListener & { close(): void } {
  return {
    levelStart: (c, run, n) => write(`c=${c} run ${run}/${runs}: ${n} requests...`),
    levelDone: (r) => write(levelLine(r, runs)),
    close: () => undefined,
  };
}
