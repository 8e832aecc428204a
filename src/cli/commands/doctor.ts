// `rapid doctor`: checks the machine and the install; exits 1 when any check fails.
// `rapid doctor --coherence [MODEL]`: the golden-set coherence gate through a real `rapid serve`.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { InvalidArgumentError, Option, type Command } from 'commander';
import { formatReport } from '../../doctor/format-report.js';
import { runDoctor, type DoctorOptions } from '../../doctor/run-doctor.js';
import { formatCoherence } from '../../doctor/coherence/format-coherence.js';
import { runCoherenceGate } from '../../doctor/coherence/run-gate.js';
import { DEFAULT_MODEL } from '../../models/default-model.js';
import { resolveModelDetailed } from '../../models/resolve-model.js';
import { checkPrecision, parseIntOption } from '../options.js';

interface DoctorCliOptions {
  json?: boolean;
  model?: string;
  port?: number;
  threads?: number;
  coherence?: string | boolean;
  minScore: number;
  concurrency: number[];
  precision: 'exact' | 'fast';
  golden?: string[];
  perCategory?: boolean;
}

function parsePercent(value: string): number {
  const x = Number(value);
  if (!Number.isFinite(x) || x < 0 || x > 100) throw new InvalidArgumentError(`expected a percentage 0-100, got "${value}"`);
  return x;
}

function parseConcurrencies(value: string): number[] {
  const list = value.split(',').map((s) => Number(s.trim()));
  if (list.length === 0 || list.some((n) => !Number.isInteger(n) || n < 1 || n > 256)) {
    throw new InvalidArgumentError(`expected a comma-separated list of concurrencies 1-256, got "${value}"`);
  }
  return list;
}

function parseDirs(value: string): string[] {
  const dirs = value.split(',').map((s) => s.trim()).filter((s) => s.length > 0);
  if (dirs.length === 0) throw new InvalidArgumentError(`expected one or more comma-separated folders, got "${value}"`);
  return dirs;
}

/** The sets a model is gated on: its golden/ and, where shipped, independent/ (issue 42's held-out set). */
function ownSets(modelDir: string): string[] {
  return ['golden', 'independent'].map((d) => join(modelDir, d)).filter((d) => existsSync(join(d, 'golden.jsonl')));
}

async function coherence(spec: string, opts: DoctorCliOptions): Promise<void> {
  checkPrecision(opts.precision);
  const model = await resolveModelDetailed(spec, { pull: false });
  // A model without its own sets (e.g. a converted copy) is gated on the default model's.
  let dirs = opts.golden ?? ownSets(model.dir);
  if (dirs.length === 0) dirs = ownSets((await resolveModelDetailed(DEFAULT_MODEL, { pull: false })).dir);
  const reports = [];
  for (const goldenDir of dirs) {
    reports.push(
      await runCoherenceGate(model.dir, {
        goldenDir,
        concurrencies: opts.concurrency,
        minScore: opts.minScore / 100,
        perCategory: opts.perCategory,
        precision: opts.precision,
        threads: opts.threads,
        onProgress: opts.json ? undefined : (line) => process.stderr.write(`${line}\n`),
      }),
    );
  }
  if (opts.json) process.stdout.write(`${JSON.stringify(reports.length === 1 ? reports[0] : reports, null, 2)}\n`);
  else process.stdout.write(reports.map((r) => formatCoherence(r)).join('\n'));
  if (!reports.every((r) => r.ok)) process.exitCode = 1;
}

/** `overrides` lets tests point the probe at another package root; the CLI passes none. */
export function registerDoctor(program: Command, overrides: Pick<DoctorOptions, 'nativeRoot' | 'env'> = {}): void {
  program
    .command('doctor')
    .description('Check Node, the native binary, CPU, GPU, memory, disk, the model cache and the server port; or, with --coherence, gate a model on its golden set')
    .option('--json', 'print the report as JSON')
    .option('-m, --model <model>', 'also load MODEL (alias, repo or directory; never downloaded) and generate a few tokens')
    .option('--port <n>', 'port to check for `rapid serve` (default 8000)', parseIntOption('--port'))
    .option('--threads <n>', 'CPU threads for the --model smoke test and the coherence gate', parseIntOption('--threads'))
    .option(
      '--coherence [model]',
      `instead of the checks: answer the golden set (text facts, image questions on held-out images, JSON extraction through structured output) through an in-process \`rapid serve\` on a loopback port, score it and exit 1 below --min-score (default model: ${DEFAULT_MODEL}; a model without golden/ uses ${DEFAULT_MODEL}'s set)`,
    )
    .option('--min-score <percent>', 'coherence: the pass threshold at every concurrency', parsePercent, 95)
    .addOption(new Option('--concurrency <list>', 'coherence: concurrent requests, one run each').argParser(parseConcurrencies).default([1, 16], '1,16'))
    .option('--precision <mode>', 'coherence: exact (f32 activations) or fast (quantized weights with rounded activations: int8 on the CPU, bf16 on CUDA)', 'fast')
    .option('--golden <dirs>', "coherence: the set folders to use, comma-separated (golden.jsonl, images, words.txt; default: the model's golden/ and independent/)", parseDirs)
    .option('--per-category', 'coherence: --min-score applies to every category too, and an answer naming a shape not in a single-shape picture fails the set')
    .action(async (opts: DoctorCliOptions) => {
      if (opts.coherence !== undefined) {
        await coherence(typeof opts.coherence === 'string' ? opts.coherence : DEFAULT_MODEL, opts);
        return;
      }
      const report = await runDoctor({ ...overrides, model: opts.model, port: opts.port, threads: opts.threads });
      if (opts.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
      else process.stdout.write(formatReport(report, !!process.stdout.isTTY && !process.env.NO_COLOR));
      if (!report.ok) process.exitCode = 1;
    });
}
