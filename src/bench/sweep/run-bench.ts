// `rapid bench` end to end: check the flags, load --schema / --images, open the target (served
// in-process or --url), run the sweep with a live view or plain lines, print the table, write
// --json and --report. Everything the command does, callable from tests.
import type { SpeculativeMode } from '../../engine/speculative/speculator.js';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { BenchReport } from './bench-report.js';
import { openInProcessTarget, openUrlTarget, type OpenTarget } from './bench-target.js';
import { htmlReport } from './html-report.js';
import { loadImages, type BenchImage } from './images.js';
import { describeLengthDistribution, parseLengthDistribution } from './length-distribution.js';
import { plainProgress } from './plain-progress.js';
import { resultsTable } from './results-table.js';
import { loadSchemaCheck, type SchemaCheck } from './schema-validator.js';
import { runSweep, validateSweep, type SweepListener } from './sweep.js';
import { longPromptMixTable, runLongPromptMix } from './long-prompt-mix.js';
import { validateWorkload, type WorkloadKind, type WorkloadOptions } from './workload.js';
import { DEFAULT_PROMPT_WORDS, isPresetWorkload, workloadPreset, type PresetWorkload } from './workload-presets.js';
import type { KvCacheDtype, NativeDevice } from '../../native/types.js';

export type WorkloadChoice = 'text' | 'schema' | 'vision' | 'mixed' | 'extraction' | PresetWorkload;

export interface BenchOptions {
  /** A model to serve in-process (directory, alias or repo); exclusive with url. */
  model?: string;
  url?: string;
  /** The "model" sent to --url (default: the first of its /v1/models). */
  modelName?: string;
  apiKey?: string;
  concurrency: number[];
  requests: number;
  runs: number;
  seed: number;
  timeoutMs: number;
  levelTimeoutMs?: number;
  maxTokens: number;
  /** Default: the workload's preset, else 0 (greedy). */
  temperature?: number;
  /** Sent as top_p when set (default: the workload's preset, else not sent). */
  topP?: number;
  /** Default: the workload's preset, else DEFAULT_PROMPT_WORDS. */
  promptLen?: string;
  outputLen?: string;
  schema?: string;
  images?: string;
  workload?: WorkloadChoice;
  warmup: number;
  json?: string;
  report?: string;
  /** In-process serving. */
  threads?: number;
  precision?: 'exact' | 'fast';
  device?: NativeDevice;
  kvCacheMemory?: number;
  kvCacheDtype?: KvCacheDtype;
  /** In-process serving: speculative decoding (default: the server's). */
  speculative?: SpeculativeMode;
  /** auto: the ink view on a terminal, plain lines otherwise. */
  progress?: 'auto' | 'live' | 'plain' | 'none';
  /** Instead of the sweep: a long prompt of this many words among short and running requests. */
  longPrompt?: number;
}

export interface BenchIo {
  stdout: NodeJS.WritableStream & { isTTY?: boolean };
  stderr: NodeJS.WritableStream;
  version: string;
}

export function workloadKinds(choice: WorkloadChoice | undefined, hasSchema: boolean, hasImages: boolean): WorkloadKind[] {
  const mixed = (): WorkloadKind[] => ['text', ...(hasSchema ? (['schema'] as const) : []), ...(hasImages ? (['vision'] as const) : [])];
  switch (choice) {
    case undefined:
      return hasSchema && hasImages ? mixed() : hasSchema ? ['schema'] : hasImages ? ['vision'] : ['text'];
    case 'mixed':
      if (!hasSchema && !hasImages) throw new Error('--workload mixed needs --schema FILE and/or --images DIR to mix with text');
      return mixed();
    case 'text':
    case 'sampled':
    case 'long-prompt':
      return ['text'];
    case 'schema':
      if (!hasSchema) throw new Error('--workload schema needs --schema FILE');
      return ['schema'];
    case 'vision':
      if (!hasImages) throw new Error('--workload vision needs --images DIR');
      return ['vision'];
    case 'extraction':
      return ['extraction'];
    default:
      throw new Error(`--workload must be text, sampled, long-prompt, schema, vision, mixed or extraction, got "${String(choice)}"`);
  }
}

function writeFile(path: string, text: string): void {
  mkdirSync(dirname(resolve(path)), { recursive: true });
  writeFileSync(path, text);
}

export async function runBench(o: BenchOptions, io: BenchIo): Promise<BenchReport> {
  if ((o.model === undefined) === (o.url === undefined)) throw new Error('rapid bench needs either a model to serve (rapid bench MODEL) or --url URL of a running server, not both');
  validateSweep({ concurrency: o.concurrency, requests: o.requests, runs: o.runs, timeoutMs: o.timeoutMs, warmup: o.warmup });
  if (o.levelTimeoutMs !== undefined && !(o.levelTimeoutMs > 0)) throw new Error('--level-timeout-ms must be positive');
  const preset = isPresetWorkload(o.workload) ? workloadPreset(o.workload) : {};
  const temperature = o.temperature ?? preset.temperature ?? 0;
  const topP = o.topP ?? preset.topP;
  if (!(temperature >= 0 && Number.isFinite(temperature))) throw new Error('--temperature must be a number >= 0');
  if (topP !== undefined && !(topP > 0 && topP <= 1)) throw new Error('--top-p must be a number in (0, 1]');
  const promptLength = parseLengthDistribution(o.promptLen ?? preset.promptLen ?? String(DEFAULT_PROMPT_WORDS));
  const outputLength = parseLengthDistribution(o.outputLen ?? String(o.maxTokens));
  const schema: SchemaCheck | undefined = o.schema !== undefined ? await loadSchemaCheck(o.schema) : undefined;
  const images: BenchImage[] | undefined = o.images !== undefined ? loadImages(o.images) : undefined;
  const kinds = workloadKinds(o.workload, schema !== undefined, images !== undefined);
  const workload: WorkloadOptions = { kinds, promptLength, outputLength, maxTokens: o.maxTokens, seed: o.seed, schema: schema?.schema, images, topP };
  validateWorkload(workload);

  const log = (line: string) => io.stderr.write(`[rapid bench] ${line}\n`);
  const maxC = Math.max(...o.concurrency);
  // --long-prompt keeps 8 requests in flight (2 decoding, the long one, 5 short ones).
  const connections = Math.max(maxC, o.longPrompt !== undefined ? 8 : 1);
  const opened: OpenTarget =
    o.url !== undefined
      ? await openUrlTarget(o.url, o.modelName, o.apiKey, o.timeoutMs, connections)
      : await openInProcessTarget(o.model!, { threads: o.threads, precision: o.precision, device: o.device, maxNumSeqs: maxC, connections, kvCacheMemory: o.kvCacheMemory, kvCacheDtype: o.kvCacheDtype, speculative: o.speculative, log: () => undefined });
  if (o.longPrompt !== undefined) {
    try {
      const mix = await runLongPromptMix({ target: opened.target, longWords: o.longPrompt, timeoutMs: o.timeoutMs, seed: o.seed });
      io.stdout.write(`${longPromptMixTable(mix)}\n`);
      if (o.json) writeFile(o.json, `${JSON.stringify({ tool: 'rapid bench --long-prompt', version: io.version, longPromptWords: o.longPrompt, ...mix }, null, 2)}\n`);
      return { tool: 'rapid bench', version: io.version, startedAt: new Date().toISOString(), wallMs: 0, target: { endpoint: opened.target.endpoint, model: opened.target.model ?? null, inProcessModel: opened.inProcessModel }, settings: {} as BenchReport['settings'], levels: [] };
    } finally {
      await opened.close();
    }
  }
  let report: BenchReport;
  try {
    const mode = o.progress ?? 'auto';
    const live = mode === 'live' || (mode === 'auto' && io.stdout.isTTY === true);
    const title = `rapid bench → ${opened.target.model ?? opened.target.endpoint} · ${isPresetWorkload(o.workload) ? o.workload : kinds.join('+')} · ${o.requests} requests × ${o.runs} runs · concurrency ${o.concurrency.join(',')}`;
    let view: SweepListener & { close(): void };
    if (live) {
      const { inkProgress } = await import('./progress-view.js');
      view = inkProgress(title, o.runs, io.stdout as NodeJS.WriteStream);
    } else if (mode === 'none') view = { close: () => undefined };
    else {
      io.stdout.write(`${title}\n`);
      view = plainProgress((line) => io.stdout.write(`${line}\n`), o.runs);
    }
    let result;
    try {
      result = await runSweep({
        target: opened.target,
        workload,
        concurrency: o.concurrency,
        requests: o.requests,
        runs: o.runs,
        timeoutMs: o.timeoutMs,
        levelDeadlineMs: o.levelTimeoutMs,
        temperature,
        warmup: o.warmup,
        schema,
        listener: view,
      });
    } finally {
      view.close();
    }
    report = {
      tool: 'rapid bench',
      version: io.version,
      startedAt: result.startedAt,
      wallMs: result.wallMs,
      target: { endpoint: opened.target.endpoint, model: opened.target.model ?? null, inProcessModel: opened.inProcessModel },
      settings: {
        concurrency: o.concurrency,
        requests: o.requests,
        runs: o.runs,
        seed: o.seed,
        timeoutMs: o.timeoutMs,
        levelDeadlineMs: o.levelTimeoutMs ?? null,
        maxTokens: o.maxTokens,
        temperature,
        topP: topP ?? null,
        warmup: o.warmup,
        promptLength: describeLengthDistribution(promptLength),
        outputLength: describeLengthDistribution(outputLength),
        workload: kinds,
        schemaFile: o.schema ?? null,
        imagesDir: o.images ?? null,
        images: images?.length ?? 0,
      },
      levels: result.levels,
    };
  } finally {
    await opened.close();
  }
  if (o.progress !== 'none') io.stdout.write(`\n${resultsTable(report.levels)}\n`);
  if (o.json) {
    writeFile(o.json, `${JSON.stringify(report, null, 2)}\n`);
    log(`wrote ${o.json}`);
  }
  if (o.report) {
    writeFile(o.report, htmlReport(report));
    log(`wrote ${o.report}`);
  }
  return report;
}
