// Builds what `rapid serve` runs: the model, its engine (in this process or a supervised child) and
// the HTTP server over them. The serve command, benches and doctor's coherence gate all start it here.
import { ENGINE_DEFAULTS } from '../engine/defaults.js';
import type { Engine, EngineLike } from '../engine/engine.js';
import type { HostModel } from '../engine-host/engine-host.js';
import type { RemoteEngine } from '../engine-host/remote-engine.js';
import type { TextModel } from '../engine/text-model.js';
import { createServer, type RapidServer } from '../server/server.js';
import type { SamplingDefaults } from '../server/served-model.js';
import type { KvCacheDtype } from '../native/types.js';
import type { SpeculativeMode } from '../engine/speculative/speculator.js';
import { splitDeviceFlag, useDevice, visibleDeviceFor, type DeviceFlag } from '../native/device-index.js';
import type { ConnectionLimits } from '../server/connection-limits.js';
import type { AccessEntry } from '../server/access-log.js';
import { openEndpoint, type EndpointOptions } from './open-endpoint.js';
import { listenAndServe } from './listen-and-serve.js';

export interface ServeOptions {
  host: string;
  port: number;
  apiKey?: string;
  /** The names clients send; the first is the one responses carry. A string may list several, comma-separated. */
  servedModelName?: string | readonly string[];
  /** Any `model` a request names is served by this model. */
  acceptAnyModelName?: boolean;
  /** Fields OpenAI does not define are a 400 instead of accepted and logged. */
  strictRequests?: boolean;
  maxNumSeqs: number;
  maxBatchedTokens: number;
  maxWaiting: number;
  maxPrefillAttention?: number;
  kvCacheMemory?: number; // bytes
  kvCacheDtype?: KvCacheDtype;
  /** Speculative decoding; default defaultSpeculative(the model's device). */
  speculative?: SpeculativeMode;
  blockSize?: number;
  threads?: number;
  precision: 'exact' | 'fast';
  device?: DeviceFlag; // default: RAPID_DEVICE, else auto
  /** Engine processes on the same model, one per GPU from --device's index (or 0) up; implies engine children. */
  dataParallel?: number;
  stepTimeout: number; // seconds
  prefixCache: boolean;
  maxBodyBytes?: number;
  shutdownGrace: number; // seconds
  /** Seconds /health/ready answers 503 on SIGTERM before the listener closes (load balancers notice first). */
  drainDelay: number;
  logFormat: 'text' | 'json';
  /** One log line per request (text or JSON, as logFormat). */
  accessLog: boolean | ((e: AccessEntry) => void);
  allowRemoteImages: boolean;
  maxImageBytes: number;
  maxImagesPerRequest: number;
  imageFetchTimeout: number; // seconds
  encoderCacheMemory: number; // bytes
  headersTimeout?: number; // seconds
  bodyTimeout?: number; // seconds
  bodyIdleTimeout?: number; // seconds
  keepAliveTimeout?: number; // seconds
  sendStallTimeout?: number; // seconds
  maxConnections?: number;
  corsOrigin?: string[];
  requireJsonContentType?: boolean;
  /** Serve /v1/embeddings with this decoder's pooled hidden states (embedding models always do). */
  embeddings?: boolean;
  /** Sampling defaults below the model's generation_config (e.g. the catalog's recommendation). */
  recommended?: SamplingDefaults;
  /** child: the engine and the addon run in a supervised child process (a native crash fails only
   *  in-flight requests, then it restarts); inline (default): in this process. */
  engineProcess?: EngineProcess;
}

export type EngineProcess = 'child' | 'inline';

/** Inline: the Engine and TextModel themselves; child: their stand-ins in this process. */
export interface RunningServer<E extends EngineLike = Engine, M extends HostModel = TextModel> {
  url: string;
  server: RapidServer;
  engine: E;
  model: M;
  /** Graceful stop: no new requests, in-flight ones finish (or fail after the grace period), model closed. */
  close(graceMs?: number): Promise<void>;
}

/** --served-model-name values (repeated, each maybe comma-separated) -> the names; undefined when none. */
export function modelNames(given: string | readonly string[] | undefined): string[] | undefined {
  if (given === undefined) return undefined;
  const names = [...new Set((typeof given === 'string' ? [given] : given).flatMap((v) => v.split(',')).map((n) => n.trim()).filter((n) => n.length > 0))];
  return names.length > 0 ? names : undefined;
}

/** The serve options in seconds -> the server's limits in ms; unset ones keep their defaults. */
export function connectionLimitsFrom(opts: Partial<ServeOptions>): Partial<ConnectionLimits> {
  const ms = (s: number | undefined) => (s === undefined ? undefined : Math.round(s * 1000));
  const given: Partial<ConnectionLimits> = {
    headersTimeoutMs: ms(opts.headersTimeout),
    bodyTimeoutMs: ms(opts.bodyTimeout),
    bodyIdleTimeoutMs: ms(opts.bodyIdleTimeout),
    keepAliveTimeoutMs: ms(opts.keepAliveTimeout),
    sendStallTimeoutMs: ms(opts.sendStallTimeout),
    maxConnections: opts.maxConnections,
  };
  return Object.fromEntries(Object.entries(given).filter(([, v]) => v !== undefined));
}

/** The engine's options from serve options (one model's config entry included): defaults filled in. */
export function engineOptionsFrom(opts: Partial<ServeOptions>) {
  return {
    maxNumSeqs: opts.maxNumSeqs ?? ENGINE_DEFAULTS.maxNumSeqs,
    maxBatchedTokens: opts.maxBatchedTokens ?? ENGINE_DEFAULTS.maxBatchedTokens,
    maxWaiting: opts.maxWaiting ?? ENGINE_DEFAULTS.maxWaiting,
    maxPrefillAttention: opts.maxPrefillAttention,
    stepTimeoutMs: (opts.stepTimeout ?? ENGINE_DEFAULTS.stepTimeoutS) * 1000,
    enablePrefixCache: opts.prefixCache ?? true,
    encoderCacheBytes: opts.encoderCacheMemory,
    ...(opts.speculative !== undefined ? { speculative: opts.speculative } : {}),
  };
}

/** What the model loads with, from serve options (one model's config entry included): the single-model
 *  server and every model of a pool open through this. */
export function endpointOptionsFrom(opts: Partial<ServeOptions>): EndpointOptions {
  const dataParallel = opts.dataParallel ?? 1;
  // cuda:N narrows what the engine sees to GPU N; data parallel gives engine i GPU N+i instead.
  const flag = opts.device !== undefined ? splitDeviceFlag(opts.device) : null;
  const base = flag?.index ?? 0;
  return {
    load: { threads: opts.threads, precision: opts.precision ?? 'fast', kvCacheBytes: opts.kvCacheMemory, kvCacheDtype: opts.kvCacheDtype, blockSize: opts.blockSize, device: dataParallel > 1 ? flag?.kind : useDevice(opts.device) },
    engine: engineOptionsFrom(opts),
    engineProcess: opts.engineProcess,
    ...(dataParallel > 1 ? { dataParallel: { engines: dataParallel, envOf: (i: number): Record<string, string> => (flag?.kind === 'cpu' ? {} : { CUDA_VISIBLE_DEVICES: visibleDeviceFor(base + i) }) } } : {}),
    names: modelNames(opts.servedModelName),
    acceptAnyName: opts.acceptAnyModelName ?? false,
    embeddings: opts.embeddings,
    recommended: opts.recommended,
    images: {
      allowRemote: opts.allowRemoteImages ?? false,
      maxImageBytes: opts.maxImageBytes,
      maxImagesPerRequest: opts.maxImagesPerRequest,
      fetchTimeoutMs: opts.imageFetchTimeout !== undefined ? opts.imageFetchTimeout * 1000 : undefined,
    },
  };
}

/** Bytes a request body may have by default: images come inline as base64 (4/3 of the file), so a
 *  vision model needs room for a few of them. */
export function defaultMaxBodyBytes(vision: boolean): number {
  return vision ? 64 * 1024 * 1024 : 8 * 1024 * 1024;
}

/** Serve options whose engine runs in this process: startServer gives the Engine and TextModel themselves. */
export type InlineServeOptions = Partial<ServeOptions> & { engineProcess?: 'inline' };

/**
 * Loads the model, starts the engine and the HTTP server; used by the command and by tests. The model
 * opens as each model of a pool does (openEndpoint), pinned: loaded before listening, never swapped.
 */
export function startServer(dir: string, opts?: InlineServeOptions, log?: (line: string) => void): Promise<RunningServer>;
export function startServer(dir: string, opts: Partial<ServeOptions> & { engineProcess: 'child' }, log?: (line: string) => void): Promise<RunningServer<RemoteEngine, HostModel>>;
export function startServer(dir: string, opts?: Partial<ServeOptions>, log?: (line: string) => void): Promise<RunningServer<EngineLike, HostModel>>;
export async function startServer(dir: string, opts: Partial<ServeOptions> = {}, log: (line: string) => void = () => undefined): Promise<RunningServer<EngineLike, HostModel>> {
  const opened = await openEndpoint(dir, endpointOptionsFrom(opts), log);
  const { model, endpoint } = opened;
  const server = createServer({
    ...endpoint,
    apiKey: opts.apiKey,
    maxBodyBytes: opts.maxBodyBytes ?? defaultMaxBodyBytes(model.vision !== null),
    limits: connectionLimitsFrom(opts),
    corsOrigins: opts.corsOrigin,
    requireJsonContentType: opts.requireJsonContentType,
    strictRequests: opts.strictRequests,
    log,
    accessLog: typeof opts.accessLog === 'function' ? opts.accessLog : undefined,
  });
  // The server's shutdown drains and stops the engine; what is left (the model, prompt workers) goes after.
  const listening = await listenAndServe(server, opts, () => opened.close(0));
  return {
    url: listening.url,
    server,
    engine: endpoint.engine,
    model,
    close: (graceMs = (opts.shutdownGrace ?? 30) * 1000) => listening.close(graceMs),
  };
}
