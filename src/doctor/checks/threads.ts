// Threads: how many CPUs this process may use (affinity and cgroup quota) versus the addon's pool.
import { readFileSync } from 'node:fs';
import { availableParallelism, cpus } from 'node:os';
import type { NativeSystemInfo } from '../../native/types.js';
import type { CheckResult } from '../types.js';

/** CPUs allowed by a cgroup v2 quota ("max 100000" = unlimited), if any. */
export function cgroupCpuLimit(): number | undefined {
  try {
    const [quota, period] = readFileSync('/sys/fs/cgroup/cpu.max', 'utf8').trim().split(/\s+/);
    if (quota === 'max') return undefined;
    const n = Number(quota) / Number(period);
    return Number.isFinite(n) && n > 0 ? n : undefined;
  } catch {
    return undefined;
  }
}

export function checkThreads(sys: NativeSystemInfo | undefined): CheckResult {
  const logical = cpus().length;
  const usable = availableParallelism();
  const quota = cgroupCpuLimit();
  const effective = Math.max(1, Math.min(usable, quota !== undefined ? Math.floor(quota) || 1 : usable));
  const pool = sys?.threads;
  const base = { id: 'threads', title: 'Threads', details: { logicalCpus: logical, available: usable, cgroupQuota: quota ?? null, pool: pool ?? null, effective } };
  const limits = [usable < logical ? `affinity allows ${usable}` : '', quota !== undefined ? `cgroup quota ${quota.toFixed(1)} CPUs` : ''].filter(Boolean).join(', ');
  const desc = `${logical} logical CPUs${limits ? ` (${limits})` : ''}${pool !== undefined ? `; the addon's pool uses ${pool} thread${pool > 1 ? 's' : ''}` : ''}`;
  if (pool !== undefined && pool > effective) {
    return { ...base, status: 'warn', finding: `${desc}: more threads than CPUs this process may use, which slows every step`, fix: `pass --threads ${effective}` };
  }
  if (effective === 1) return { ...base, status: 'warn', finding: `${desc}: a single CPU makes generation slow`, fix: 'give the process (container, VM) more CPUs' };
  return { ...base, status: 'ok', finding: desc };
}
