// `models rm`: deletes a repo's folder from the HF cache (all its revisions and blobs).
import { findAlias } from './catalog.js';
import { ModelError, ModelNotFoundError } from './errors.js';
import { readCachedRepo, removeCachedRepo } from './hf-cache.js';
import { hubCacheDir, type Env } from './hub-env.js';
import { resolveSpec } from './resolve-spec.js';

export interface RemovedModel {
  repo: string;
  dir: string;
  freedBytes: number;
}

function repoOf(spec: string, env: Env): string {
  // A retired alias still names a repo the user may have downloaded earlier: allow removing it.
  const retired = findAlias(spec.split('@')[0]);
  if (retired?.status === 'retired') return retired.repo;
  const ref = resolveSpec(spec, env);
  if (ref.kind === 'local') throw new ModelError(`${spec} is a local directory; rapid only removes models from the Hugging Face cache`);
  return ref.repo;
}

export function removeModel(spec: string, opts: { env?: Env; dryRun?: boolean } = {}): RemovedModel {
  const env = opts.env ?? process.env;
  const cacheDir = hubCacheDir(env);
  const repo = repoOf(spec, env);
  const info = readCachedRepo(cacheDir, repo);
  if (!info) throw new ModelNotFoundError(`${repo} is not downloaded (nothing in ${cacheDir})`);
  const freedBytes = opts.dryRun ? info.sizeBytes : removeCachedRepo(cacheDir, repo);
  return { repo, dir: info.dir, freedBytes };
}
