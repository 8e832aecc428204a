// Cache integrity: interrupted downloads (.incomplete blobs), snapshot links whose blob is gone,
// and refs that name a missing snapshot.
import { existsSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { formatBytes } from '../../models/format-bytes.js';
import { listCachedRepos, repoFolderName } from '../../models/hf-cache.js';
import type { CheckResult } from '../types.js';

function downloadingNow(cacheDir: string, repo: string, blob: string): boolean {
  const lock = join(cacheDir, '.locks', repoFolderName(repo), `${basename(blob, '.incomplete')}.rapid-lock`);
  if (!existsSync(lock)) return false;
  try {
    process.kill(Number(readFileSync(lock, 'utf8')), 0);
    return true;
  } catch {
    return false;
  }
}

export function checkCacheIntegrity(cacheDir: string): CheckResult {
  const base = { id: 'cache', title: 'Cache integrity' };
  let repos;
  try {
    repos = listCachedRepos(cacheDir);
  } catch (err) {
    return { ...base, status: 'warn', finding: `cannot read ${cacheDir}: ${(err as Error).message}`, fix: 'check the permissions of the cache directory' };
  }
  const problems: { repo: string; kind: string; detail: string }[] = [];
  let incompleteBytes = 0;
  for (const r of repos) {
    for (const inc of r.incomplete) {
      if (downloadingNow(cacheDir, r.repo, inc.path)) continue;
      incompleteBytes += inc.sizeBytes;
      problems.push({ repo: r.repo, kind: 'incomplete', detail: `${inc.path} (${formatBytes(inc.sizeBytes)})` });
    }
    for (const s of r.snapshots) {
      for (const f of s.files) if (f.dangling) problems.push({ repo: r.repo, kind: 'dangling-link', detail: `${s.dir}/${f.path}` });
    }
    for (const ref of r.danglingRefs) problems.push({ repo: r.repo, kind: 'dangling-ref', detail: `${r.dir}/refs/${ref}` });
  }
  const details = { cacheDir, repos: repos.length, problems };
  if (!problems.length) return { ...base, status: 'ok', finding: `${repos.length} model${repos.length === 1 ? '' : 's'} checked: no interrupted downloads or broken links`, details };
  const count = (k: string) => problems.filter((p) => p.kind === k).length;
  const parts = [
    count('incomplete') && `${count('incomplete')} interrupted download${count('incomplete') > 1 ? 's' : ''} (${formatBytes(incompleteBytes)})`,
    count('dangling-link') && `${count('dangling-link')} snapshot link${count('dangling-link') > 1 ? 's' : ''} to missing blobs`,
    count('dangling-ref') && `${count('dangling-ref')} ref${count('dangling-ref') > 1 ? 's' : ''} to missing snapshots`,
  ].filter(Boolean);
  const affected = [...new Set(problems.map((p) => p.repo))];
  return {
    ...base,
    status: 'warn',
    finding: `${parts.join(', ')} in ${affected.join(', ')}`,
    fix: `\`rapid models pull ${affected[0]}\` resumes and repairs it; \`rapid models rm ${affected[0]}\` discards it`,
    details,
  };
}
