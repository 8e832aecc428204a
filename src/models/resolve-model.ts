// The entry point `rapid run` / `rapid serve` use: a spec (path, alias, org/name[@rev]) in, a
// local model directory out, downloading on first use when allowed.
import { unsupportedArchitecture } from './architectures.js';
import type { CatalogEntry } from './catalog.js';
import { ModelError, ModelNotFoundError, PlannedModelError } from './errors.js';
import { missingLocalFiles } from './file-selection.js';
import { hubEnv, type Env } from './hub-env.js';
import { completeCachedSnapshot, pullRepo, type PullEvent } from './pull.js';
import { resolveSpec, type ModelRef } from './resolve-spec.js';

export interface ResolveModelOptions {
  pull: boolean; // download when not in the cache
  onProgress?: (e: PullEvent) => void;
  onWarning?: (message: string) => void; // default: printed on stderr
  allowPlanned?: boolean; // `models pull` / `models info` may touch planned models; run/serve may not
  env?: Env;
  timeoutMs?: number;
  idleTimeoutMs?: number;
  retries?: number;
  retryBaseMs?: number;
}

export interface ResolvedModel {
  dir: string;
  ref: ModelRef;
  entry?: CatalogEntry;
  source: 'local' | 'cache' | 'download';
}

export function plannedMessage(name: string, e: CatalogEntry): string {
  const instead = e.replacement ? ` Use ${e.replacement} now.` : '';
  return `${name} (${e.repo}) is planned, not runnable yet: ${e.reason ?? 'its runtime is not in rapid yet'}.${instead}`;
}

export async function resolveModelDetailed(spec: string, opts: ResolveModelOptions): Promise<ResolvedModel> {
  const env = opts.env ?? process.env;
  const warn = opts.onWarning ?? ((m: string) => process.stderr.write(`warning: ${m}\n`));
  const ref = resolveSpec(spec, env);
  if (ref.kind === 'local') {
    const missing = missingLocalFiles(ref.dir);
    if (missing.length) throw new ModelError(`${ref.dir} is not a model directory rapid can load: it lacks ${missing.join(', ')}`);
    return { dir: ref.dir, ref, entry: ref.entry, source: 'local' };
  }
  if (ref.entry?.status === 'planned' && !opts.allowPlanned) throw new PlannedModelError(plannedMessage(ref.via === 'alias' ? ref.spec : ref.repo, ref.entry));
  for (const w of ref.warnings) warn(w);

  const hub = hubEnv(env);
  const cached = completeCachedSnapshot(hub.cacheDir, ref.repo, ref.revision);
  if (cached) return { dir: cached, ref, entry: ref.entry, source: 'cache' };
  if (!opts.pull && !hub.offline) {
    throw new ModelNotFoundError(`${ref.spec} (${ref.repo}) is not downloaded. Run: rapid models pull ${ref.spec}`);
  }
  const result = await pullRepo(ref.repo, {
    revision: ref.revision,
    // run/serve: stop before the weights when rapid could not run the model anyway.
    onConfig: opts.allowPlanned
      ? undefined
      : (config) => {
          const why = unsupportedArchitecture(config);
          if (why) throw new PlannedModelError(`${ref.repo} cannot be run by rapid: ${why}. Nothing large was downloaded`);
        },
    onProgress: opts.onProgress,
    hub,
    timeoutMs: opts.timeoutMs,
    idleTimeoutMs: opts.idleTimeoutMs,
    retries: opts.retries,
    retryBaseMs: opts.retryBaseMs,
  });
  return { dir: result.dir, ref, entry: ref.entry, source: result.offline ? 'cache' : 'download' };
}

/** Resolves `spec` to a local directory holding config.json, tokenizer.json and the weights. */
export async function resolveModel(spec: string, opts: ResolveModelOptions): Promise<string> {
  return (await resolveModelDetailed(spec, opts)).dir;
}
