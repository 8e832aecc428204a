// Human-readable doctor output: one line per check (status, title, finding), the fix indented
// under anything that is not ok, and a summary line.
import type { DoctorReport } from './types.js';

const MARK = { ok: 'ok  ', warn: 'WARN', fail: 'FAIL' } as const;
const COLOR = { ok: '\x1b[32m', warn: '\x1b[33m', fail: '\x1b[31m' } as const;

export function formatReport(report: DoctorReport, color = false): string {
  const w = Math.max(...report.checks.map((c) => c.title.length));
  const lines = [`rapid ${report.rapidVersion} doctor`];
  for (const c of report.checks) {
    const mark = color ? `${COLOR[c.status]}${MARK[c.status]}\x1b[0m` : MARK[c.status];
    lines.push(`${mark}  ${c.title.padEnd(w)}  ${c.finding}`);
    if (c.status !== 'ok' && c.fix) lines.push(`${' '.repeat(6 + w + 2)}fix: ${c.fix}`);
  }
  const s = report.summary;
  lines.push('', `${s.ok} ok, ${s.warn} warning${s.warn === 1 ? '' : 's'}, ${s.fail} failed`);
  return `${lines.join('\n')}\n`;
}
