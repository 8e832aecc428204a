// `rapid bench [MODEL] | --url URL`: concurrency sweeps over HTTP streaming (throughput, TTFT,
// inter-token latency, failures, structured-output validity); the work is in src/bench/sweep.
import { InvalidArgumentError, Option, type Command } from 'commander';
import { runBench, type BenchOptions } from '../../bench/sweep/run-bench.js';
import { parseByteSize } from './serve.js';
import { parseSpeculativeMode } from '../../engine/speculative/speculator.js';
import { checkPrecision, DEVICE_HELP, kvCacheDtypeOption, parseDeviceOption, parseFloatOption, parseIntOption, useDevice } from '../options.js';
import { DEFAULT_PROMPT_WORDS, LONG_PROMPT_WORDS, SAMPLED_SAMPLING } from '../../bench/sweep/workload-presets.js';

/** "1,2,4,16" -> [1, 2, 4, 16] */
export function parseConcurrencyList(value: string): number[] {
  const parts = value.split(',').map((s) => s.trim());
  if (parts.length === 0 || parts.some((p) => !/^\d+$/.test(p) || Number(p) < 1)) {
    throw new InvalidArgumentError(`--concurrency expects positive integers separated by commas, e.g. 1,2,4,16; got "${value}"`);
  }
  return parts.map(Number);
}

type CliOptions = Omit<BenchOptions, 'model'> & { model?: string };

export function registerBench(program: Command, version = '0.0.0'): void {
  program
    .command('bench')
    .description('Benchmark a model or any OpenAI-compatible server: throughput, latency and validity under concurrency')
    .argument('[model]', 'a model to serve in-process on a loopback port (directory, catalog alias or org/name); or use --url')
    .option('--url <url>', 'an OpenAI-compatible server to bench instead (root, /v1 or the chat/completions endpoint)')
    .option('--model <name>', 'the model name sent to --url (default: the first of its /v1/models)')
    .option('--api-key <key>', 'sent as Authorization: Bearer <key>')
    .addOption(new Option('-c, --concurrency <list>', 'concurrency levels, comma-separated').argParser(parseConcurrencyList).default([1, 2, 4], '1,2,4'))
    .option('-n, --requests <n>', 'requests per level and run', parseIntOption('--requests'), 16)
    .option('--runs <r>', 'repeated runs per level', parseIntOption('--runs'), 1)
    .option('--seed <n>', 'workload seed: same seed, same requests on any server', parseIntOption('--seed'), 0)
    .option('--max-tokens <n>', 'max_tokens of every request (upper bound of --output-len)', parseIntOption('--max-tokens'), 128)
    .addOption(new Option('--prompt-len <dist>', 'prompt length in words: N, uniform:MIN-MAX or normal:MEAN,STD').default(undefined, `${DEFAULT_PROMPT_WORDS}; long-prompt: ${LONG_PROMPT_WORDS}`))
    .option('--output-len <dist>', 'max_tokens distribution: N, uniform:MIN-MAX or normal:MEAN,STD (default: --max-tokens)')
    .addOption(new Option('--temperature <t>', 'sampling temperature (0 = greedy)').argParser(parseFloatOption('--temperature')).default(undefined, `0; sampled: ${SAMPLED_SAMPLING.temperature}`))
    .addOption(new Option('--top-p <p>', 'nucleus sampling: top_p sent with every request').argParser(parseFloatOption('--top-p')).default(undefined, `not sent; sampled: ${SAMPLED_SAMPLING.topP}`))
    .option('--schema <file>', 'structured output: send this JSON Schema as response_format and validate every reply (ajv)')
    .option('--images <dir>', 'vision: each vision request attaches one image of this directory (data: URI)')
    .option('--workload <kind>', 'text, sampled (temperature 0.8, top-p 0.95), long-prompt (1024-word prompts), schema, vision, mixed or extraction (a document whose answer copies spans of it; default: from --schema/--images)')
    .option('--timeout-ms <ms>', 'a request without a complete reply by then fails as a timeout', parseIntOption('--timeout-ms'), 120_000)
    .option('--level-timeout-ms <ms>', 'deadline of one level run (default: every request timing out in turn, plus 5 s)', parseIntOption('--level-timeout-ms'))
    .option('--warmup <n>', 'unmeasured requests sent before the sweep', parseIntOption('--warmup'), 1)
    .option('--long-prompt <words>', 'instead of the sweep: a prompt of this many words arrives while 2 requests decode, then 5 short ones; reports their TTFT and ITL', parseIntOption('--long-prompt'))
    .option('--json <file>', 'write every figure as JSON')
    .option('--report <file>', 'write a self-contained HTML report with charts')
    .option('--progress <mode>', 'auto (live on a terminal, plain lines otherwise), live, plain or none', 'auto')
    .option('--threads <n>', 'in-process model: CPU threads', parseIntOption('--threads'))
    .option('--precision <mode>', 'in-process model: exact or fast', 'fast')
    .option('--device <device>', `in-process model: ${DEVICE_HELP}`, parseDeviceOption)
    .option('--kv-cache-memory <size>', 'in-process model: KV cache budget, e.g. 2GiB', parseByteSize)
    .addOption(kvCacheDtypeOption('in-process model: '))
    .option('--speculative <mode>', 'in-process model: speculative decoding, ngram or off (default: the server\'s, ngram on the CPU, off on CUDA)', parseSpeculativeMode)
    .action(async (model: string | undefined, opts: CliOptions) => {
      checkPrecision(opts.precision);
      if (!['auto', 'live', 'plain', 'none'].includes(opts.progress ?? 'auto')) throw new Error(`--progress must be auto, live, plain or none, got "${opts.progress}"`);
      // commander puts --model on opts.model; the positional is the model to serve.
      const { model: modelName, device, ...rest } = opts;
      const report = await runBench({ ...rest, device: useDevice(device), model, modelName }, { stdout: process.stdout, stderr: process.stderr, version });
      if (opts.longPrompt === undefined && report.levels.every((l) => l.ok === 0)) process.exitCode = 1; // nothing worked: say so to scripts
    });
}
