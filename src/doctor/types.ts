// The shape of a doctor report: one result per check, each with a status, a one-line finding and
// (when not ok) a one-line fix. `details` carries the machine-readable facts behind the finding.
export type CheckStatus = 'ok' | 'warn' | 'fail';

export interface CheckResult {
  id: string; // stable key for --json consumers, e.g. "native"
  title: string; // e.g. "Native binary"
  status: CheckStatus;
  finding: string;
  fix?: string;
  details?: Record<string, unknown>;
}

export interface DoctorReport {
  rapidVersion: string;
  checks: CheckResult[];
  summary: { ok: number; warn: number; fail: number };
  ok: boolean; // no check failed
}
