// `rapid serve MODEL`: the continuous-batching engine behind the OpenAI-compatible HTTP server.
import { parseSpeculativeMode, type SpeculativeMode } from '../../engine/speculative/speculator.js';
import { ENGINE_DEFAULTS } from '../../engine/defaults.js';
import { basename, resolve } from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import type { Engine, EngineLike } from '../../engine/engine.js';
import { createTextEngine } from '../../engine/text-engine.js';
import { grammarServiceFor, type GrammarProvider } from '../../engine/grammar/grammar-service.js';
import { startEngineHost, type HostModel } from '../../engine-host/engine-host.js';
import type { RemoteEngine } from '../../engine-host/remote-engine.js';
import { openTextModel, type TextModel } from '../../engine/text-model.js';
import { createServer, type RapidServer } from '../../server/server.js';
import { servedModelFrom, type SamplingDefaults } from '../../server/served-model.js';
import { servedEmbeddingsFrom } from '../../server/served-embeddings.js';
import { IMAGE_DEFAULTS, servedVisionFrom } from '../../server/served-vision.js';
import { PromptEncoderPool } from '../../server/prompt-encoder-pool.js';
import { parseCorsOrigin } from '../../server/cors.js';
import { resolveModelDetailed } from '../../models/resolve-model.js';
import { createProgressPrinter } from '../../models/progress-printer.js';
import { withWait } from '../wait-spinner.js';
import { checkPrecision, DEVICE_HELP, parseDeviceOption, parseIntOption } from '../options.js';
import type { NativeDevice } from '../../native/types.js';
import { loadNative } from '../../native/binding.js';
import { describeDevice } from '../../engine/model-device.js';
import { DEFAULT_MODEL } from '../../models/default-model.js';
import { CONNECTION_DEFAULTS, type ConnectionLimits } from '../../server/connection-limits.js';

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
  blockSize?: number;
  threads?: number;
  precision: 'exact' | 'fast';
  device?: NativeDevice; // default: RAPID_DEVICE, else auto
  stepTimeout: number; // seconds
  prefixCache: boolean;
  /** Speculative decoding; default defaultSpeculative(the model's device). */
  speculative?: SpeculativeMode;
  maxBodyBytes?: number;
  shutdownGrace: number; // seconds
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

const SIZE_UNITS: Record<string, number> = { '': 1, b: 1, k: 1024, kb: 1e3, kib: 1024, m: 1024 ** 2, mb: 1e6, mib: 1024 ** 2, g: 1024 ** 3, gb: 1e9, gib: 1024 ** 3 };

/** "2GiB", "512M", "1.5g", "1000000" -> bytes. */
export function parseByteSize(value: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(value);
  const unit = m ? SIZE_UNITS[m[2]!.toLowerCase()] : undefined;
  if (!m || unit === undefined) throw new InvalidArgumentError(`expected a size such as 2GiB, 512MiB or a byte count, got "${value}"`);
  const bytes = Math.floor(Number(m[1]) * unit);
  if (bytes <= 0) throw new InvalidArgumentError(`size must be positive, got "${value}"`);
  return bytes;
}

/** Seconds, fractions allowed (tests use short limits), > 0. */
function parseSecondsOption(flag: string): (value: string) => number {
  return (value: string) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n) || n <= 0) throw new InvalidArgumentError(`${flag} expects a positive number of seconds, got "${value}"`);
    return n;
  };
}

function parsePositiveInt(flag: string): (value: string) => number {
  return (value: string) => {
    const n = parseIntOption(flag)(value);
    if (n <= 0) throw new InvalidArgumentError(`${flag} must be at least 1, got "${value}"`);
    return n;
  };
}

function parseEngineProcess(value: string): EngineProcess {
  if (value !== 'child' && value !== 'inline') throw new InvalidArgumentError(`expected child or inline, got "${value}"`);
  return value;
}

const collect = (value: string, previous: string[] = []) => [...previous, value];
const collectOrigin = (value: string, previous: string[] = []) => {
  try {
    return collect(parseCorsOrigin(value), previous);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
};

/** --served-model-name values (repeated, each maybe comma-separated) -> the names; undefined when none. */
export function modelNames(given: string | readonly string[] | undefined): string[] | undefined {
  if (given === undefined) return undefined;
  const names = [...new Set((typeof given === 'string' ? [given] : given).flatMap((v) => v.split(',')).map((n) => n.trim()).filter((n) => n.length > 0))];
  return names.length > 0 ? names : undefined;
}

/** The serve options in seconds -> the server's limits in ms; unset ones keep their defaults. */
function connectionLimitsFrom(opts: Partial<ServeOptions>): Partial<ConnectionLimits> {
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

/** Loads the model, starts the engine and the HTTP server; used by the command and by tests. */
export function startServer(dir: string, opts?: Partial<ServeOptions> & { engineProcess?: 'inline' }, log?: (line: string) => void): Promise<RunningServer>;
export function startServer(dir: string, opts: Partial<ServeOptions> & { engineProcess: 'child' }, log?: (line: string) => void): Promise<RunningServer<RemoteEngine, HostModel>>;
export function startServer(dir: string, opts?: Partial<ServeOptions>, log?: (line: string) => void): Promise<RunningServer<EngineLike, HostModel>>;
export async function startServer(dir: string, opts: Partial<ServeOptions> = {}, log: (line: string) => void = () => undefined): Promise<RunningServer<EngineLike, HostModel>> {
  const load = { threads: opts.threads, precision: opts.precision ?? 'fast', kvCacheBytes: opts.kvCacheMemory, blockSize: opts.blockSize, device: opts.device };
  const engineOptions = {
    maxNumSeqs: opts.maxNumSeqs ?? ENGINE_DEFAULTS.maxNumSeqs,
    maxBatchedTokens: opts.maxBatchedTokens ?? ENGINE_DEFAULTS.maxBatchedTokens,
    maxWaiting: opts.maxWaiting ?? ENGINE_DEFAULTS.maxWaiting,
    maxPrefillAttention: opts.maxPrefillAttention,
    stepTimeoutMs: (opts.stepTimeout ?? 120) * 1000,
    enablePrefixCache: opts.prefixCache ?? true,
    ...(opts.speculative !== undefined ? { speculative: opts.speculative } : {}),
    encoderCacheBytes: opts.encoderCacheMemory,
  };
  let model: HostModel;
  let engine: EngineLike;
  let grammar: GrammarProvider;
  let closeModel: () => void;
  if (opts.engineProcess === 'child') {
    const host = await startEngineHost(dir, { load, engine: engineOptions }, log);
    ({ model, engine, grammar } = host);
    closeModel = () => void host.supervisor.shutdown(0); // after server.close the child has exited already
  } else {
    const m = openTextModel(dir, load);
    model = m;
    engine = createTextEngine(m, { ...engineOptions, log });
    grammar = grammarServiceFor(m.text, m.info.vocabSize);
    closeModel = () => m.close();
  }
  // Prompts are rendered and tokenized on worker threads; a template that throws or hangs fails the load.
  let prompts: PromptEncoderPool;
  try {
    prompts = await PromptEncoderPool.start(model.dir, { contextLength: model.info.contextLength, vision: model.vision !== null });
  } catch (err) {
    void engine.shutdown(0);
    closeModel();
    throw err;
  }
  const names = modelNames(opts.servedModelName) ?? [basename(resolve(dir))];
  // Images come inline as base64 (4/3 of the file): a vision model needs room for a few of them.
  const maxBodyBytes = opts.maxBodyBytes ?? (model.vision !== null ? 64 * 1024 * 1024 : 8 * 1024 * 1024);
  const server = createServer({
    engine,
    model: {
      ...servedModelFrom(model, names[0]!, opts.recommended, prompts),
      names,
      acceptAnyName: opts.acceptAnyModelName ?? false,
      vision: servedVisionFrom(model, {
        allowRemote: opts.allowRemoteImages ?? false,
        maxImageBytes: opts.maxImageBytes,
        maxImagesPerRequest: opts.maxImagesPerRequest,
        fetchTimeoutMs: opts.imageFetchTimeout !== undefined ? opts.imageFetchTimeout * 1000 : undefined,
      }, prompts),
      ...servedEmbeddingsFrom(model.info, opts.embeddings === true),
    },
    apiKey: opts.apiKey,
    maxBodyBytes,
    limits: connectionLimitsFrom(opts),
    corsOrigins: opts.corsOrigin,
    requireJsonContentType: opts.requireJsonContentType,
    strictRequests: opts.strictRequests,
    log,
    grammar,
  });
  let addr;
  try {
    addr = await server.listen(opts.port ?? 8000, opts.host ?? '127.0.0.1');
  } catch (err) {
    void engine.shutdown(0);
    closeModel();
    void prompts.close();
    throw err;
  }
  let closing: Promise<void> | undefined;
  return {
    url: addr.url,
    server,
    engine,
    model,
    close(graceMs = (opts.shutdownGrace ?? 30) * 1000) {
      closing ??= server.close(graceMs).finally(() => {
        closeModel();
        return prompts.close();
      });
      return closing;
    },
  };
}

export function registerServe(program: Command): void {
  program
    .command('serve')
    .description('Serve a model over an OpenAI-compatible HTTP API with continuous batching')
    .argument('[model]', `a model directory, a catalog alias (see \`rapid models\`) or an org/name repo; pulled on first use (default: ${DEFAULT_MODEL}, embedded)`, DEFAULT_MODEL)
    .option('--host <host>', 'interface to bind (loopback by default; 0.0.0.0 exposes it to the network)', '127.0.0.1')
    .option('--port <port>', 'TCP port', parseIntOption('--port'), 8000)
    .option('--api-key <key>', 'require Authorization: Bearer <key> on every route but /health (default: $RAPID_API_KEY)')
    .option('--served-model-name <name>', 'a model name clients send (default: the directory name); repeatable or comma-separated, responses carry the first', collect)
    .option('--accept-any-model-name', 'serve any `model` a request names (clients that hard-code e.g. gpt-4o)', false)
    .option('--strict-requests', 'refuse request fields OpenAI does not define with a 400 (default: accepted and logged once)', false)
    .option('--max-num-seqs <n>', 'requests decoded together at most', parseIntOption('--max-num-seqs'), ENGINE_DEFAULTS.maxNumSeqs)
    .option('--max-batched-tokens <n>', 'tokens per step at most (prefill chunks + decodes)', parseIntOption('--max-batched-tokens'), ENGINE_DEFAULTS.maxBatchedTokens)
    .option('--max-waiting <n>', 'queued requests at most; more get 503', parseIntOption('--max-waiting'), ENGINE_DEFAULTS.maxWaiting)
    .option('--max-prefill-attention <n>', 'while requests decode, a prefill chunk attends to at most N query-key pairs (default: max-batched-tokens x 4096; 0: no cap)', parseIntOption('--max-prefill-attention'))
    .option('--kv-cache-memory <size>', 'KV cache budget, e.g. 2GiB (default: a share of free RAM)', parseByteSize)
    .option('--block-size <n>', 'tokens per KV block', parseIntOption('--block-size'))
    .option('--threads <n>', 'CPU threads (default: all cores)', parseIntOption('--threads'))
    .option('--precision <mode>', 'exact (f32 activations) or fast (quantized weights with rounded activations: int8 on the CPU, bf16 on CUDA)', 'fast')
    .option('--device <device>', DEVICE_HELP, parseDeviceOption)
    .option('--step-timeout <s>', 'a step running longer fails its requests and turns /health to 503', parseIntOption('--step-timeout'), 120)
    .option('--no-prefix-cache', 'do not reuse KV of shared prompt prefixes')
    .option('--speculative <mode>', 'speculative decoding: ngram (drafts from the request\'s own context) or off (default: ngram on the CPU, off on CUDA)', parseSpeculativeMode)
    .option('--max-body-bytes <size>', 'largest request body accepted (default 8 MiB; 64 MiB for vision models: inline images)', parseByteSize)
    .option('--allow-remote-images', 'fetch http(s) image URLs (public addresses only; data: URIs are always accepted)', false)
    .option('--max-image-bytes <size>', 'largest image file accepted, inline or fetched', parseByteSize, IMAGE_DEFAULTS.maxImageBytes)
    .option('--max-images-per-request <n>', 'images one request may carry', parseIntOption('--max-images-per-request'), IMAGE_DEFAULTS.maxImagesPerRequest)
    .option('--image-fetch-timeout <s>', 'seconds a remote image fetch may take', parseIntOption('--image-fetch-timeout'), IMAGE_DEFAULTS.fetchTimeoutMs / 1000)
    .option('--encoder-cache-memory <size>', 'image embeddings kept for reuse, by content hash', parseByteSize, 256 * 1024 * 1024)
    .option('--headers-timeout <s>', 'seconds a client gets to send the request headers; slower sockets get 408 and are closed', parseSecondsOption('--headers-timeout'), CONNECTION_DEFAULTS.headersTimeoutMs / 1000)
    .option('--body-timeout <s>', 'seconds a client gets to send the whole request body', parseSecondsOption('--body-timeout'), CONNECTION_DEFAULTS.bodyTimeoutMs / 1000)
    .option('--body-idle-timeout <s>', 'seconds a request body may stall before a 408', parseSecondsOption('--body-idle-timeout'), CONNECTION_DEFAULTS.bodyIdleTimeoutMs / 1000)
    .option('--keep-alive-timeout <s>', 'seconds an idle keep-alive connection is kept', parseSecondsOption('--keep-alive-timeout'), CONNECTION_DEFAULTS.keepAliveTimeoutMs / 1000)
    .option('--send-stall-timeout <s>', 'seconds a response may wait on a client that stopped reading before its connection is closed', parseSecondsOption('--send-stall-timeout'), CONNECTION_DEFAULTS.sendStallTimeoutMs / 1000)
    .option('--max-connections <n>', 'open connections at most; past it requests get 503 and the connection is closed', parsePositiveInt('--max-connections'), CONNECTION_DEFAULTS.maxConnections)
    .option('--cors-origin <origin>', 'an origin (e.g. https://app.example) whose web pages may call the server; repeatable, * for any (default: none without --api-key, any with it)', collectOrigin)
    .option('--no-require-json-content-type', 'without --api-key, also accept POSTs without Content-Type: application/json from clients that are not browsers (no Origin; curl -d without -H)')
    .option('--embeddings', 'also serve POST /v1/embeddings: the last token\'s hidden state, L2-normalised (embedding models such as Qwen3-Embedding always serve it, and only it)')
    .option('--engine-process <mode>', 'child: run the engine and the native runtime in a supervised child process (a native crash fails only in-flight requests and it restarts); inline: in the server process', parseEngineProcess, 'inline')
    .option('--shutdown-grace <s>', 'seconds in-flight requests get to finish on SIGINT/SIGTERM', parseIntOption('--shutdown-grace'), 30)
    .action(async (spec: string, opts: ServeOptions) => {
      checkPrecision(opts.precision);
      const log = (line: string) => process.stderr.write(`[rapid] ${line}\n`);
      const resolved = await resolveModelDetailed(spec, { pull: true, onProgress: createProgressPrinter(process.stderr) });
      const dir = resolved.dir;
      const names = modelNames(opts.servedModelName) ?? [resolved.source === 'local' ? basename(resolve(dir)) : spec];
      const name = names.join(', ');
      const running = await withWait(
        `loading ${name}`,
        () => startServer(dir, { ...opts, servedModelName: names, apiKey: opts.apiKey ?? process.env.RAPID_API_KEY, recommended: resolved.entry?.sampling }, log),
        { plain: log },
      );
      const info = running.model.info;
      log(
        `serving ${name} on ${running.url}/v1 ` +
          `(${info.family}${info.vision ? ` + ${info.vision.family} vision` : ''}, context ${info.contextLength}, ` +
          `KV ${info.numBlocks} blocks of ${info.blockSize}, ${describeDevice(info)})`,
      );
      // Why a GPU machine runs on the CPU; on a machine without an NVIDIA driver there is nothing to explain.
      // (With an engine child the addon stays out of this process.)
      const native = opts.engineProcess === 'child' ? null : loadNative();
      if (native !== null && info.device === 'cpu' && native.driver !== null && native.device !== 'cpu') {
        const why = native.variant === 'cpu' ? (native.note ?? info.deviceNote) : (info.deviceNote ?? native.note);
        log(`running on the CPU: ${why ?? 'the CUDA backend was not used'}`);
      }
      let signals = 0;
      const stop = (sig: string) => {
        if (++signals > 1) {
          log(`${sig} again: exiting now`);
          process.exit(130);
        }
        log(`${sig}: no longer accepting requests; finishing in-flight ones (up to ${opts.shutdownGrace}s)`);
        running.close(opts.shutdownGrace * 1000).then(
          () => process.exit(0),
          (err: unknown) => {
            log(`shutdown failed: ${(err as Error).message}`);
            process.exit(1);
          },
        );
      };
      process.on('SIGINT', () => stop('SIGINT'));
      process.on('SIGTERM', () => stop('SIGTERM'));
    });
}
