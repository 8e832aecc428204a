// `rapid serve A B C` / --models-config: several models behind one HTTP server, each loaded on its
// first request, evicted least recently used to stay within --max-loaded-bytes, swapped while serving.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { freemem } from 'node:os';
import { join } from 'node:path';
import { createServer, type RapidServer, type ServerSettings } from '../server/server.js';
import { ModelPool, type PoolEntryConfig, type PoolModel } from '../server/model-pool.js';
import { resolveModelDetailed } from '../models/resolve-model.js';
import { validateCheckpoint } from '../models/validate-checkpoint.js';
import { openEndpoint, type EndpointOptions } from './open-endpoint.js';
import { listenAndServe, type ListenOptions } from './listen-and-serve.js';
import { defaultMaxBodyBytes } from './start-server.js';

/** One configured model, its spec already resolved to a directory. */
export interface PoolModelSpec {
  spec: string;
  dir: string;
  /** Served names, id first. */
  names: string[];
  pin: boolean;
  /** Everything it loads with (the command's options, then the model's own). */
  options: EndpointOptions;
}

export interface PoolServerOptions extends Omit<ServerSettings, 'log'>, ListenOptions {
  /** Bytes all loaded models may hold together (weights + KV, host and GPU); none: no limit. */
  maxLoadedBytes?: number;
  /** How long a request waits for its model to load (and for room to load it). */
  loadTimeoutMs: number;
  /** How long in-flight requests get when their engine is unloaded or swapped out. */
  drainTimeoutMs: number;
  acceptAnyName?: boolean;
  /** Load these (ids) at startup instead of on their first request; pinned models always are. */
  preload?: readonly string[];
}

export interface RunningPoolServer {
  url: string;
  server: RapidServer;
  pool: ModelPool;
  close(graceMs?: number): Promise<void>;
}

/** Mirrors the native host default (native/src/addon/runtime.cpp): a quarter of available memory, at most 2 GiB. */
function hostDefaultKvBytes(): number {
  return Math.min(Math.floor(freemem() / 4), 2 * 1024 ** 3);
}

/** Bytes of the checkpoint's weight files (the runtime maps them whole). */
export function weightFileBytes(dir: string): number {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.safetensors'))
    .reduce((sum, f) => sum + statSync(join(dir, f)).size, 0);
}

function hasVisionTower(dir: string): boolean {
  try {
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    return config.vision_config !== undefined;
  } catch {
    return false;
  }
}

export async function startPoolServer(models: readonly PoolModelSpec[], opts: PoolServerOptions, log: (line: string) => void = () => undefined): Promise<RunningPoolServer> {
  // Under a budget every model gets an explicit KV budget, so its estimate is what it allocates.
  const withKv = (o: EndpointOptions): EndpointOptions => (opts.maxLoadedBytes === undefined || o.load.kvCacheBytes !== undefined ? o : { ...o, load: { ...o.load, kvCacheBytes: hostDefaultKvBytes() } });
  const byId = new Map(models.map((m) => [m.names[0]!, { ...m, options: withKv(m.options) }]));
  const dirOf = async (entry: PoolEntryConfig, spec: string) => {
    const m = byId.get(entry.id)!;
    if (spec === m.spec) return m.dir;
    // A swap to another checkpoint: it must be on disk already (no download behind an HTTP request).
    return (await resolveModelDetailed(spec, { pull: false })).dir;
  };
  const pool = new ModelPool(
    models.map((m) => ({ id: m.names[0]!, names: m.names, spec: m.spec, pin: m.pin })),
    {
      async estimate(entry, spec) {
        const m = byId.get(entry.id)!;
        const dir = await dirOf(entry, spec);
        // Headers only: a corrupt checkpoint fails here, so a swap to one is the request's error (400), not a 500.
        validateCheckpoint(dir);
        return weightFileBytes(dir) + (m.options.load.kvCacheBytes ?? 0);
      },
      async load(entry, spec): Promise<PoolModel> {
        const m = byId.get(entry.id)!;
        return openEndpoint(await dirOf(entry, spec), { ...m.options, names: m.names, acceptAnyName: opts.acceptAnyName }, (line) => log(`[${entry.id}] ${line}`));
      },
    },
    { maxLoadedBytes: opts.maxLoadedBytes, loadTimeoutMs: opts.loadTimeoutMs, drainTimeoutMs: opts.drainTimeoutMs, acceptAnyName: opts.acceptAnyName, log },
  );
  const anyVision = models.some((m) => existsSync(m.dir) && hasVisionTower(m.dir));
  const server = createServer({
    ...opts,
    models: pool,
    maxBodyBytes: opts.maxBodyBytes ?? defaultMaxBodyBytes(anyVision),
    log,
  });
  const preload = models.filter((m) => m.pin || opts.preload?.includes(m.names[0]!)).map((m) => m.names[0]!);
  try {
    for (const id of preload) await pool.preload(id);
  } catch (err) {
    await pool.shutdown(0);
    throw err;
  }
  // The server's shutdown drains the pool; releasing it again (a failed listen) stops what is loaded.
  const listening = await listenAndServe(server, opts, () => pool.shutdown(0));
  return { url: listening.url, server, pool, close: (graceMs = 30_000) => listening.close(graceMs) };
}
