// `rapid doctor`: checks the machine and the install; exits 1 when any check fails.
import type { Command } from 'commander';
import { formatReport } from '../../doctor/format-report.js';
import { runDoctor, type DoctorOptions } from '../../doctor/run-doctor.js';
import { parseIntOption } from '../options.js';

interface DoctorCliOptions {
  json?: boolean;
  model?: string;
  port?: number;
  threads?: number;
}

/** `overrides` lets tests point the probe at another package root; the CLI passes none. */
export function registerDoctor(program: Command, overrides: Pick<DoctorOptions, 'nativeRoot' | 'env'> = {}): void {
  program
    .command('doctor')
    .description('Check Node, the native binary, CPU, GPU, memory, disk, the model cache and the server port')
    .option('--json', 'print the report as JSON')
    .option('-m, --model <model>', 'also load MODEL (alias, repo or directory; never downloaded) and generate a few tokens')
    .option('--port <n>', 'port to check for `rapid serve` (default 8000)', parseIntOption('--port'))
    .option('--threads <n>', 'CPU threads for the --model smoke test', parseIntOption('--threads'))
    .action(async (opts: DoctorCliOptions) => {
      const report = await runDoctor({ ...overrides, model: opts.model, port: opts.port, threads: opts.threads });
      if (opts.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
      else process.stdout.write(formatReport(report, !!process.stdout.isTTY && !process.env.NO_COLOR));
      if (!report.ok) process.exitCode = 1;
    });
}
