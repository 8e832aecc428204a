// One downloader per blob: two rapid processes pulling the same model would otherwise append to
// the same .incomplete file. The lock is a file holding the owner's pid; a dead owner's is taken over.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ModelError } from './errors.js';
import { repoFolderName } from './hf-cache.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Takes the lock for blob `etag` of `repo`; returns the release function. */
export function acquireDownloadLock(cacheDir: string, repo: string, etag: string): () => void {
  const dir = join(cacheDir, '.locks', repoFolderName(repo));
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `${etag}.rapid-lock`);
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(path, String(process.pid), { flag: 'wx' });
      return () => rmSync(path, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const owner = Number(readFileSync(path, 'utf8').trim());
      if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && alive(owner)) {
        throw new ModelError(`another rapid process (pid ${owner}) is downloading this file of ${repo}; wait for it to finish`);
      }
      rmSync(path, { force: true }); // stale: its owner died
    }
  }
  throw new ModelError(`could not lock ${path}`);
}
