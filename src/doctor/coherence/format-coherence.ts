// Human-readable coherence report: per concurrency, the score and per-category scores, then each
// failure with its expected answer, the model's output and why it failed.
import { runPasses, type CoherenceReport } from './run-gate.js';

function pct(x: number): string {
  return `${(x * 100).toFixed(1)}%`;
}

/** One line (newlines escaped), cut at n characters: golden answers are short, runaway outputs are not. */
function clip(s: string, n = 400): string {
  const one = s.replace(/\r/g, '\\r').replace(/\n/g, '\\n');
  return one.length > n ? `${one.slice(0, n - 3)}...` : one;
}

export function formatCoherence(report: CoherenceReport): string {
  const lines = [`coherence gate: ${report.model} (golden set ${report.goldenDir}, precision ${report.precision})`];
  for (const run of report.runs) {
    const cats = Object.entries(run.perCategory)
      .map(([k, v]) => `${k} ${v.passed}/${v.total}`)
      .join(', ');
    const mark = runPasses(run, report.minScore, report.perCategory) ? 'ok  ' : 'FAIL';
    const halluc = report.runs.some((r) => r.hallucinations > 0) || report.perCategory ? `; ${run.hallucinations} naming a shape not in the picture` : '';
    lines.push(`${mark}  concurrency ${String(run.concurrency).padStart(2)}: ${run.passed}/${run.total} = ${pct(run.score)}  (${cats}${halluc})`);
  }
  const first = report.runs[0];
  for (const run of report.runs) {
    const fails = run.results.filter((r) => !r.ok);
    // Later runs list only what differs from the first, so identical runs do not repeat the list.
    const shown = run === first ? fails : run.results.filter((r, i) => r.output !== first!.results[i]!.output);
    if (shown.length === 0) continue;
    lines.push('', run === first ? `failures at concurrency ${run.concurrency}:` : `outputs that differ at concurrency ${run.concurrency} from concurrency ${first!.concurrency}:`);
    for (const r of shown) {
      const expected = typeof r.expected === 'string' ? r.expected : JSON.stringify(r.expected);
      lines.push(`  ${r.id} [${r.category}] ${r.ok ? 'ok' : r.why}`, `      expected ${clip(expected)}`, `      got      ${clip(r.output)}`);
    }
  }
  const scope = report.perCategory ? ' in every category, no shape named that is not in the picture,' : '';
  lines.push('', `${report.ok ? 'passed' : 'FAILED'}: threshold ${pct(report.minScore)}${scope} at every concurrency`);
  return `${lines.join('\n')}\n`;
}
