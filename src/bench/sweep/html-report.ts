// `--report FILE.html`: one self-contained page (inline CSS and SVG, no script, no network) with
// throughput, latency and validity against concurrency, the results table and per-run details.
import type { BenchReport } from './bench-report.js';
import type { LevelSummary } from './level-metrics.js';
import { FAILURE_TYPES } from './outcome.js';
import { failureText } from './results-table.js';
import { barChart, escapeXml, lineChart } from './svg-chart.js';

const COLORS = { blue: '#2563eb', orange: '#ea580c', green: '#16a34a', purple: '#7c3aed', gray: '#6b7280', red: '#dc2626' };

function fmt(x: number | null | undefined, digits = 1): string {
  return x === null || x === undefined ? '–' : x.toFixed(digits);
}

function charts(levels: LevelSummary[]): string[] {
  const x = levels.map((l) => String(l.concurrency));
  const xTitle = 'concurrent requests';
  const out: string[] = [];
  const runs = Math.max(...levels.map((l) => l.runs.length));
  out.push(
    lineChart({
      id: 'chart-throughput',
      title: 'Output throughput vs concurrency',
      xTitle,
      yTitle: 'output tokens/s',
      xLabels: x,
      series: [
        { name: 'mean of runs', color: COLORS.blue, values: levels.map((l) => l.outputTokPerS) },
        ...(runs > 1
          ? Array.from({ length: runs }, (_, i) => ({ name: `run ${i + 1}`, color: ['#93c5fd', '#a5b4fc', '#c4b5fd', '#bae6fd'][i % 4]!, dashed: true, values: levels.map((l) => l.runs[i]?.outputTokPerS ?? null) }))
          : []),
        { name: 'goodput (valid replies)', color: COLORS.orange, values: levels.map((l) => l.goodputTokPerS) },
        { name: 'per-request tok/s p50', color: COLORS.green, values: levels.map((l) => l.perRequestTokPerS.p50) },
      ],
    }),
  );
  out.push(
    lineChart({
      id: 'chart-ttft',
      title: 'Time to first token vs concurrency',
      xTitle,
      yTitle: 'ms',
      xLabels: x,
      series: [
        { name: 'TTFT p50', color: COLORS.orange, values: levels.map((l) => l.ttftMs.p50) },
        { name: 'TTFT p90', color: COLORS.purple, values: levels.map((l) => l.ttftMs.p90), dashed: true },
        { name: 'TTFT p99', color: COLORS.red, values: levels.map((l) => l.ttftMs.p99) },
      ],
    }),
  );
  out.push(
    lineChart({
      id: 'chart-itl',
      title: 'Inter-token latency vs concurrency',
      xTitle,
      yTitle: 'ms between tokens',
      xLabels: x,
      series: [
        { name: 'ITL p50', color: COLORS.blue, values: levels.map((l) => l.itlMs.p50) },
        { name: 'ITL p90', color: COLORS.purple, values: levels.map((l) => l.itlMs.p90), dashed: true },
        { name: 'ITL p99', color: COLORS.red, values: levels.map((l) => l.itlMs.p99) },
      ],
    }),
  );
  out.push(
    lineChart({
      id: 'chart-e2e',
      title: 'End-to-end request latency vs concurrency',
      xTitle,
      yTitle: 'ms',
      xLabels: x,
      series: [
        { name: 'E2E p50', color: COLORS.green, values: levels.map((l) => l.e2eMs.p50) },
        { name: 'E2E p99', color: COLORS.red, values: levels.map((l) => l.e2eMs.p99) },
      ],
    }),
  );
  const structured = levels.some((l) => l.avgValidityPct !== null);
  out.push(
    barChart({
      id: 'chart-validity',
      title: structured ? 'Validity per concurrency level' : 'Successful requests per concurrency level',
      xTitle,
      yTitle: '%',
      xLabels: x,
      yMax: 100,
      series: [
        { name: 'requests ok %', color: COLORS.gray, values: levels.map((l) => (l.requests ? (100 * l.ok) / l.requests : null)) },
        ...(structured
          ? [
              { name: 'valid JSON %', color: COLORS.blue, values: levels.map((l) => l.avgJsonValidityPct) },
              { name: 'schema-valid %', color: COLORS.green, values: levels.map((l) => l.avgValidityPct) },
            ]
          : []),
      ],
    }),
  );
  return out;
}

function summaryTable(levels: LevelSummary[]): string {
  const runs = Math.max(...levels.map((l) => l.runs.length));
  const head = ['concurrency', ...Array.from({ length: runs }, (_, i) => `run ${i + 1}`), 'avg validity', 'tok/s', 'TTFT p50/p99 ms', 'ITL p50/p99 ms', 'E2E p50/p99 ms'];
  const rows = levels.map((l) => [
    String(l.concurrency),
    ...Array.from({ length: runs }, (_, i) => {
      const r = l.runs[i];
      if (!r) return '';
      return `${r.ok}/${r.requests} ok · ${fmt(r.outputTokPerS)} tok/s${r.validity ? ` · ${fmt(r.validity.validityPct, 0)}% valid` : ''}`;
    }),
    l.avgValidityPct === null ? '–' : `${fmt(l.avgValidityPct)}%`,
    fmt(l.outputTokPerS),
    `${fmt(l.ttftMs.p50, 0)} / ${fmt(l.ttftMs.p99, 0)}`,
    `${fmt(l.itlMs.p50)} / ${fmt(l.itlMs.p99)}`,
    `${fmt(l.e2eMs.p50, 0)} / ${fmt(l.e2eMs.p99, 0)}`,
  ]);
  return table('summary', head, rows);
}

function table(id: string, head: string[], rows: string[][]): string {
  return (
    `<table id="${id}"><thead><tr>${head.map((h) => `<th>${escapeXml(h)}</th>`).join('')}</tr></thead>` +
    `<tbody>${rows.map((r) => `<tr>${r.map((c) => `<td>${escapeXml(c)}</td>`).join('')}</tr>`).join('')}</tbody></table>`
  );
}

function runsTable(levels: LevelSummary[]): string {
  const head = ['c', 'run', 'ok', 'failed', ...FAILURE_TYPES, 'tok/s', 'goodput tok/s', 'req/s', 'per-req tok/s p50', 'TTFT p50/p90/p99', 'ITL p50/p90/p99', 'E2E p50/p90/p99', 'prompt tokens mean', 'wall s'];
  const rows = levels.flatMap((l) =>
    l.runs.map((r) => [
      String(r.concurrency),
      String(r.run),
      String(r.ok),
      String(r.failed),
      ...FAILURE_TYPES.map((f) => String(r.failures[f])),
      fmt(r.outputTokPerS),
      fmt(r.goodputTokPerS),
      fmt(r.requestsPerS, 2),
      fmt(r.perRequestTokPerS.p50),
      `${fmt(r.ttftMs.p50, 0)}/${fmt(r.ttftMs.p90, 0)}/${fmt(r.ttftMs.p99, 0)}`,
      `${fmt(r.itlMs.p50)}/${fmt(r.itlMs.p90)}/${fmt(r.itlMs.p99)}`,
      `${fmt(r.e2eMs.p50, 0)}/${fmt(r.e2eMs.p90, 0)}/${fmt(r.e2eMs.p99, 0)}`,
      fmt(r.promptTokens.mean, 0),
      fmt(r.wallMs / 1000, 1),
    ]),
  );
  return table('runs', head, rows);
}

function failuresList(levels: LevelSummary[]): string {
  const items = levels.flatMap((l) =>
    l.runs.filter((r) => r.failed > 0).map((r) => `<li><b>c=${r.concurrency} run ${r.run}</b>: ${escapeXml(failureText(r))}<ul>${r.errors.map((e) => `<li><code>${escapeXml(e)}</code></li>`).join('')}</ul></li>`),
  );
  return items.length ? `<ul id="failures">${items.join('')}</ul>` : '<p id="failures">No failed requests.</p>';
}

const CSS = `
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1160px;color:#1f2328;background:#f6f8fa;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px}
.meta{color:#57606a;margin:0 0 16px}.meta code{background:#eaeef2;padding:1px 4px;border-radius:4px}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:16px}
.chart{background:#fff;border:1px solid #d0d7de;border-radius:8px;max-width:100%;height:auto}
.chart-title{font-size:15px;font-weight:600;fill:#1f2328}.tick{font-size:11px;fill:#57606a}
.axis-title{font-size:12px;fill:#424a53}.legend{font-size:12px;fill:#1f2328}.bar-label{font-size:10px;fill:#424a53}
table{border-collapse:collapse;background:#fff;width:100%;font-size:13px}
th,td{border:1px solid #d0d7de;padding:5px 8px;text-align:right;white-space:nowrap}th{background:#eaeef2}
td:first-child,th:first-child{text-align:center}.scroll{overflow-x:auto}
#summary td,#summary th{white-space:normal}
`;

export function htmlReport(r: BenchReport): string {
  const s = r.settings;
  const target = r.target.inProcessModel ? `${r.target.inProcessModel} (served in-process at ${r.target.endpoint})` : r.target.endpoint;
  const meta = [
    `target <code>${escapeXml(target)}</code>`,
    `model <code>${escapeXml(r.target.model ?? '(server default)')}</code>`,
    `workload <code>${escapeXml(s.workload.join(' + '))}</code>`,
    `${s.requests} requests × ${s.runs} runs per level`,
    `prompt words <code>${escapeXml(s.promptLength)}</code>`,
    `output tokens <code>${escapeXml(s.outputLength)}</code> (max ${s.maxTokens})`,
    `temperature ${s.temperature}`,
    `seed ${s.seed}`,
    `timeout ${s.timeoutMs} ms`,
    `started ${escapeXml(r.startedAt)}, took ${(r.wallMs / 1000).toFixed(1)} s`,
  ].join(' · ');
  // The data travels with the page (inert JSON, not a script that runs).
  const data = JSON.stringify(r).replace(/</g, '\\u003c');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>rapid bench — ${escapeXml(r.target.model ?? r.target.endpoint)}</title><style>${CSS}</style></head>
<body>
<h1>rapid bench</h1>
<p class="meta">${meta}</p>
<h2>Results</h2>
<div class="scroll">${summaryTable(r.levels)}</div>
<h2>Charts</h2>
<div class="charts">${charts(r.levels).join('\n')}</div>
<h2>Every run</h2>
<div class="scroll">${runsTable(r.levels)}</div>
<h2>Failures</h2>
${failuresList(r.levels)}
<script type="application/json" id="bench-data">${data}</script>
</body></html>
`;
}
