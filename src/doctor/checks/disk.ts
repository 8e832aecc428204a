// Disk: free space and writability where models are downloaded (the HF hub cache).
import { accessSync, constants, existsSync, statfsSync } from 'node:fs';
import { dirname } from 'node:path';
import { formatBytes } from '../../models/format-bytes.js';
import { listCachedRepos } from '../../models/hf-cache.js';
import type { CheckResult } from '../types.js';

function nearestExisting(path: string): string {
  let p = path;
  while (!existsSync(p) && dirname(p) !== p) p = dirname(p);
  return p;
}

export function checkDisk(cacheDir: string): CheckResult {
  const at = nearestExisting(cacheDir);
  const base = { id: 'disk', title: 'Disk (model cache)' };
  let free: number;
  try {
    const s = statfsSync(at);
    free = s.bavail * s.bsize;
  } catch (err) {
    return { ...base, status: 'warn', finding: `cannot read free space at ${at}: ${(err as Error).message}`, details: { cacheDir } };
  }
  let writable = true;
  try {
    accessSync(at, constants.W_OK);
  } catch {
    writable = false;
  }
  let used = 0;
  let models = 0;
  try {
    const repos = listCachedRepos(cacheDir);
    models = repos.length;
    used = repos.reduce((a, r) => a + r.sizeBytes, 0);
  } catch {
    // unreadable cache: the integrity check reports it
  }
  const details = { cacheDir, freeBytes: free, usedBytes: used, models, writable };
  const desc = `${cacheDir}: ${formatBytes(free)} free; ${models} model${models === 1 ? '' : 's'} using ${formatBytes(used)}`;
  if (!writable) return { ...base, status: 'fail', finding: `${desc}; not writable`, fix: 'set HF_HUB_CACHE (or HF_HOME) to a writable directory', details };
  if (free < 2e9) return { ...base, status: 'warn', finding: `${desc}; a 7-8B 4-bit model needs ~4.5 GB`, fix: 'free space (`rapid models rm MODEL`) or set HF_HUB_CACHE to a bigger disk', details };
  return { ...base, status: 'ok', finding: desc, details };
}
