// `rapid serve A B C` and `rapid serve --models-config FILE`: resolves every model up front (so a
// bad spec fails at startup), then serves them from one pool that loads each on its first request.
import { basename, resolve } from 'node:path';
import { resolveModelDetailed } from '../models/resolve-model.js';
import { createProgressPrinter } from '../models/progress-printer.js';
import { formatBytes } from '../models/format-bytes.js';
import { startPoolServer, type PoolModelSpec, type RunningPoolServer } from '../app/pool-server.js';
import { readModelsConfig, type ModelConfigEntry } from './models-config.js';
import { checkPrecision } from './options.js';
import { connectionLimitsFrom, endpointOptionsFrom, type ServeOptions } from '../app/start-server.js';

export interface PoolServeOptions extends Partial<ServeOptions> {
  /** Bytes all loaded models may hold together; none: no eviction. */
  maxLoadedBytes?: number;
  /** Seconds a request waits for its model to load. */
  modelLoadTimeout?: number;
}

/** The models of the command line and the config, resolved (pulled when `pull`), with their names. */
export async function poolModels(entries: readonly ModelConfigEntry[], opts: Partial<ServeOptions>, pull: boolean): Promise<PoolModelSpec[]> {
  const out: PoolModelSpec[] = [];
  for (const e of entries) {
    const r = await resolveModelDetailed(e.spec, { pull, onProgress: pull ? createProgressPrinter(process.stderr) : undefined });
    const names = e.aliases ?? [r.source === 'local' ? basename(resolve(r.dir)) : e.spec];
    const merged = { ...opts, ...e.options, recommended: r.entry?.sampling };
    checkPrecision(merged.precision ?? 'fast');
    out.push({ spec: e.spec, dir: r.dir, names, pin: e.pin, options: endpointOptionsFrom(merged) });
  }
  return out;
}

/** Starts the pool server; used by the command and by tests. */
export function startServePool(models: readonly PoolModelSpec[], opts: PoolServeOptions, log: (line: string) => void = () => undefined): Promise<RunningPoolServer> {
  const limits = connectionLimitsFrom(opts);

  return startPoolServer(
    models,
    {
      host: opts.host,
      port: opts.port,
      drainDelay: opts.drainDelay,
      apiKey: opts.apiKey,
      maxBodyBytes: opts.maxBodyBytes,
      limits,
      corsOrigins: opts.corsOrigin,
      requireJsonContentType: opts.requireJsonContentType,
      strictRequests: opts.strictRequests,
      maxLoadedBytes: opts.maxLoadedBytes,
      loadTimeoutMs: (opts.modelLoadTimeout ?? 300) * 1000,
      drainTimeoutMs: (opts.shutdownGrace ?? 30) * 1000,
      acceptAnyName: opts.acceptAnyModelName,
    },
    log,
  );
}

/** The command's multi-model path: every model of `specs` and of --models-config. */
export async function servePool(specs: readonly string[], opts: PoolServeOptions & { modelsConfig?: string }, parseSize: (s: string) => number): Promise<void> {
  const log = (line: string) => process.stderr.write(`[rapid] ${line}\n`);
  if (opts.servedModelName !== undefined) throw new Error('--served-model-name names one model; with several, give each its names with "aliases" in --models-config');
  // The pool budgets each model as one engine: several engine processes per model would break its byte counts.
  if ((opts.dataParallel ?? 1) > 1) throw new Error('--data-parallel runs one model on several GPUs; it cannot be combined with several models (rapid serve A B, --models-config, --max-loaded-bytes)');
  const entries: ModelConfigEntry[] = [...specs.map((spec) => ({ spec, pin: false, options: {} })), ...(opts.modelsConfig ? readModelsConfig(opts.modelsConfig, parseSize) : [])];
  const models = await poolModels(entries, opts, true);
  const running = await startServePool(models, { ...opts, apiKey: opts.apiKey ?? process.env.RAPID_API_KEY }, log);
  const budget = opts.maxLoadedBytes !== undefined ? `, at most ${formatBytes(opts.maxLoadedBytes)} loaded` : '';
  log(`serving ${models.length} models on ${running.url}/v1${budget}, each loaded on its first request: ${models.map((m) => `${m.names.join('|')}${m.pin ? ' (pinned)' : ''}`).join(', ')}`);
  const grace = opts.shutdownGrace ?? 30;
  let signals = 0;
  const stop = (sig: string) => {
    if (++signals > 1) {
      log(`${sig} again: exiting now`);
      process.exit(130);
    }
    log(`${sig}: no longer accepting requests; finishing in-flight ones (up to ${grace}s)`);
    running.close(grace * 1000).then(
      () => process.exit(0),
      (err: unknown) => {
        log(`shutdown failed: ${(err as Error).message}`);
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}
