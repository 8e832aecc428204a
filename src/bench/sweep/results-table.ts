// The final table: one row per concurrency level, one cell per run (ok/requests, tok/s and, with
// structured output, validity), then averages and latency percentiles; failures listed below it.
import type { LevelRunResult, LevelSummary } from './level-metrics.js';
import { FAILURE_TYPES } from './outcome.js';

function fmt(x: number | null | undefined, digits = 1): string {
  return x === null || x === undefined ? '-' : x.toFixed(digits);
}

export function runCell(r: LevelRunResult): string {
  const v = r.validity?.validityPct;
  return `${r.ok}/${r.requests} ${fmt(r.outputTokPerS)} t/s${r.validity ? ` ${fmt(v, 0)}%` : ''}`;
}

export function failureText(r: LevelRunResult): string {
  const parts = FAILURE_TYPES.filter((f) => r.failures[f] > 0).map((f) => {
    if (f !== 'http_error') return `${r.failures[f]} ${f}`;
    const statuses = Object.keys(r.httpStatuses).filter((s) => !s.startsWith('2'));
    return `${r.failures[f]} ${f}${statuses.length ? ` (${statuses.join(', ')})` : ''}`;
  });
  return parts.join(', ');
}

function renderRows(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) => r.map((c, i) => (i === 0 ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join(' | ').trimEnd();
  return [line(rows[0]!), widths.map((w) => '-'.repeat(w)).join('-|-'), ...rows.slice(1).map(line)].join('\n');
}

export function resultsTable(levels: LevelSummary[]): string {
  const runs = Math.max(1, ...levels.map((l) => l.runs.length));
  const header = ['concurrency', ...Array.from({ length: runs }, (_, i) => `run ${i + 1}`), 'avg validity', 'tok/s', 'TTFT p50/p99 ms', 'ITL p50/p99 ms'];
  const rows = levels.map((l) => [
    String(l.concurrency),
    ...Array.from({ length: runs }, (_, i) => (l.runs[i] ? runCell(l.runs[i]!) : '')),
    l.avgValidityPct === null ? '-' : `${fmt(l.avgValidityPct)}%`,
    fmt(l.outputTokPerS),
    `${fmt(l.ttftMs.p50, 0)}/${fmt(l.ttftMs.p99, 0)}`,
    `${fmt(l.itlMs.p50)}/${fmt(l.itlMs.p99)}`,
  ]);
  const failures = levels.flatMap((l) => l.runs.filter((r) => r.failed > 0).map((r) => `  c=${r.concurrency} run ${r.run}: ${failureText(r)}${r.errors[0] ? ` — ${r.errors[0]}` : ''}`));
  return [renderRows([header, ...rows]), ...(failures.length ? ['failures:', ...failures] : [])].join('\n');
}
