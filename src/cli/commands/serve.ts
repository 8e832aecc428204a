// `rapid serve MODEL`: the continuous-batching engine behind the OpenAI-compatible HTTP server.
import { parseSpeculativeMode } from '../../engine/speculative/speculator.js';
import { basename, resolve } from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import { modelNames, startServer, type EngineProcess, type ServeOptions } from '../../app/start-server.js';
import { ENGINE_DEFAULTS } from '../../engine/defaults.js';
import { IMAGE_DEFAULTS } from '../../server/served-vision.js';
import { parseCorsOrigin } from '../../server/cors.js';
import { resolveModelDetailed } from '../../models/resolve-model.js';
import { createProgressPrinter } from '../../models/progress-printer.js';
import { withWait } from '../wait-spinner.js';
import { checkPrecision, DEVICE_HELP, kvCacheDtypeOption, parseDeviceOption, parseIntOption } from '../options.js';
import { loadNative } from '../../native/binding.js';
import { describeDevice } from '../../engine/model-device.js';
import { DEFAULT_MODEL } from '../../models/default-model.js';
import { CONNECTION_DEFAULTS } from '../../server/connection-limits.js';
import { createServeLogger, parseLogFormat } from '../log-format.js';
import { servePool, type PoolServeOptions } from '../serve-pool.js';

// Tests and scripts start servers through the command's module; the wiring lives in src/app.
export { modelNames, startServer, type EngineProcess, type RunningServer, type ServeOptions } from '../../app/start-server.js';

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

function parseNonNegativeSeconds(flag: string): (value: string) => number {
  return (value: string) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n) || n < 0) throw new InvalidArgumentError(`${flag} expects a number of seconds (0 or more), got "${value}"`);
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

export function registerServe(program: Command): void {
  program
    .command('serve')
    .description('Serve a model over an OpenAI-compatible HTTP API with continuous batching')
    .argument('[models...]', `a model directory, a catalog alias (see \`rapid models\`) or an org/name repo; pulled on first use (default: ${DEFAULT_MODEL}, embedded); several: one server, each loaded on its first request`)
    .option('--models-config <file>', 'JSON file of models to serve, each with aliases, pin and its own options (docs/serving.md)')
    .option('--max-loaded-bytes <size>', 'with several models: bytes all loaded ones may hold (weights + KV cache); idle unpinned ones are unloaded, least recently used first', parseByteSize)
    .option('--model-load-timeout <s>', 'with several models: seconds a request waits for its model to load', parseSecondsOption('--model-load-timeout'), 300)
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
    .addOption(kvCacheDtypeOption())
    .option('--block-size <n>', 'tokens per KV block', parseIntOption('--block-size'))
    .option('--threads <n>', 'CPU threads (default: all cores)', parseIntOption('--threads'))
    .option('--precision <mode>', 'exact (f32 activations) or fast (quantized weights with rounded activations: int8 on the CPU, bf16 on CUDA)', 'fast')
    .option('--device <device>', DEVICE_HELP, parseDeviceOption)
    .option('--step-timeout <s>', 'a step running longer fails its requests and turns /health to 503', parseIntOption('--step-timeout'), ENGINE_DEFAULTS.stepTimeoutS)
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
    .option('--data-parallel <n>', 'engine processes on the same model behind this endpoint, one per GPU (cuda:N from --device\'s N); each request goes to the least-loaded one, with affinity for shared prompt prefixes', parsePositiveInt('--data-parallel'), 1)
    .option('--shutdown-grace <s>', 'seconds in-flight requests get to finish on SIGINT/SIGTERM', parseIntOption('--shutdown-grace'), 30)
    .option('--drain-delay <s>', 'on SIGTERM, seconds /health/ready answers 503 while requests are still served, before the listener closes (load balancers stop sending first)', parseNonNegativeSeconds('--drain-delay'), 0)
    .option('--log-format <format>', 'text ([rapid] lines) or json (one object per line, access entries included)', parseLogFormat, 'text')
    .option('--no-access-log', 'no log line per request (probes of /health and /metrics are only logged when they fail)')
    .action(async (specs: string[], opts: ServeOptions & PoolServeOptions & { modelsConfig?: string }) => {
      checkPrecision(opts.precision);
      const logger = createServeLogger(opts.logFormat, (text) => void process.stderr.write(text));
      const log = logger.log;
      if (opts.accessLog !== false) opts.accessLog = logger.access;
      if (specs.length > 1 || opts.modelsConfig !== undefined || opts.maxLoadedBytes !== undefined) return servePool(specs, opts, parseByteSize);
      const spec = specs[0] ?? DEFAULT_MODEL;
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
          `KV ${info.kvCacheDtype}: ${info.numBlocks * info.blockSize} tokens in ${info.numBlocks} blocks of ${info.blockSize}, ${describeDevice(info)}${(opts.dataParallel ?? 1) > 1 ? `; ${opts.dataParallel} engine processes` : ''})`,
      );
      // Why a GPU machine runs on the CPU; on a machine without an NVIDIA driver there is nothing to explain.
      // (With an engine child the addon stays out of this process.)
      const native = opts.engineProcess === 'child' || (opts.dataParallel ?? 1) > 1 ? null : loadNative();
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
        const unready = opts.drainDelay > 0 ? `/health/ready is 503; still serving for ${opts.drainDelay}s, then ` : '';
        log(`${sig}: ${unready}no longer accepting requests; finishing in-flight ones (up to ${opts.shutdownGrace}s)`);
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
