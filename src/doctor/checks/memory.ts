// Memory: total and available RAM (and a cgroup limit, in containers), and the largest catalog
// model that fits with room for the KV cache and the runtime.
import { readFileSync } from 'node:fs';
import { freemem, totalmem } from 'node:os';
import { loadCatalog } from '../../models/catalog.js';
import { formatBytes } from '../../models/format-bytes.js';
import type { CheckResult } from '../types.js';

/** The cgroup v2 memory limit minus current usage, if a limit is set. */
export function cgroupMemoryHeadroom(): { limit: number; available: number } | undefined {
  try {
    const max = readFileSync('/sys/fs/cgroup/memory.max', 'utf8').trim();
    if (max === 'max') return undefined;
    const limit = Number(max);
    const used = Number(readFileSync('/sys/fs/cgroup/memory.current', 'utf8').trim());
    return Number.isFinite(limit) ? { limit, available: Math.max(0, limit - (Number.isFinite(used) ? used : 0)) } : undefined;
  } catch {
    return undefined;
  }
}

/** Memory a model needs to run: weights (memory-mapped) plus ~15% and 0.5 GB for KV cache and runtime. */
export function memoryNeeded(weightBytes: number): number {
  return weightBytes * 1.15 + 0.5e9;
}

export function checkMemory(total = totalmem(), available = freemem(), cgroup = cgroupMemoryHeadroom()): CheckResult {
  const usable = cgroup ? Math.min(available, cgroup.available) : available;
  const fits = loadCatalog()
    .filter((m) => m.status === 'supported' && memoryNeeded(m.sizeBytes) <= usable)
    .sort((a, b) => b.sizeBytes - a.sizeBytes);
  const largest = fits[0];
  const desc = `${formatBytes(total)} total, ${formatBytes(usable)} available${cgroup ? ` (container limit ${formatBytes(cgroup.limit)})` : ''}`;
  const base = { id: 'memory', title: 'Memory', details: { totalBytes: total, availableBytes: usable, cgroupLimitBytes: cgroup?.limit ?? null, largestFitting: largest?.alias ?? null, maxModelBytes: Math.max(0, Math.floor((usable - 0.5e9) / 1.15)) } };
  if (!largest) {
    return { ...base, status: 'warn', finding: `${desc}: not enough for even the smallest catalog model`, fix: 'close other programs or give the machine/container more memory (the smallest model needs ~1 GB)' };
  }
  return { ...base, status: 'ok', finding: `${desc}: fits models up to ~${formatBytes(base.details.maxModelBytes)} of weights, e.g. ${largest.alias} (${formatBytes(largest.sizeBytes)})` };
}
