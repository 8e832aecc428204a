// `npm run bench:fuzz` / `node bench/run.js fuzz`: the hostile-request fuzz run at length, against
// an in-process server on a model directory (default: the qwen2-q4 test fixture, else the embedded
// tiny-vlm) or any running server (--url). Exits 1 on any failure or failed post-run check.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startServer } from '../app/start-server.js';
import { packageRoot } from '../native/binding.js';
import { intOption } from './bench-options.js';
import { formatReport, runFuzz } from './fuzz/fuzz-run.js';
import { shortContextCopy } from './fuzz/short-context-copy.js';

const USAGE = `usage: node bench/run.js fuzz [--requests N] [--seed S] [--concurrency C] [--only I,J]
       [--model DIR [--context N] | --url URL --served-model NAME] [--max-body-bytes B] [--huge-bytes B] [--bound-s S] [--json]
--context: the in-process model's context (default 4096), so unbounded generations end within --bound-s`;

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      requests: { type: 'string' },
      seed: { type: 'string' },
      concurrency: { type: 'string' },
      only: { type: 'string' },
      model: { type: 'string' },
      context: { type: 'string' },
      url: { type: 'string' },
      'served-model': { type: 'string' },
      'max-body-bytes': { type: 'string' },
      'huge-bytes': { type: 'string' },
      'bound-s': { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const maxBodyBytes = intOption(values['max-body-bytes'], 'max-body-bytes', 8 << 20);
  const fixture = join(packageRoot(), 'test', 'fixtures', 'models', 'qwen2-q4');
  const dir = values.model ?? (existsSync(fixture) ? fixture : join(packageRoot(), 'models', 'tiny-vlm'));
  const served = values['served-model'] ?? 'fuzz';
  const copy = values.url ? null : shortContextCopy(dir, intOption(values.context, 'context', 4096));
  let running: Awaited<ReturnType<typeof startServer>> | null = null;
  try {
    if (copy !== null) {
      const limits = { headersTimeout: 5, bodyIdleTimeout: 5 };
      running = await startServer(copy.dir, { port: 0, threads: 2, kvCacheMemory: 64 << 20, maxNumSeqs: 16, servedModelName: served, maxBodyBytes, shutdownGrace: 5, ...limits });
    }
    const url = values.url ?? running!.url;
    process.stderr.write(`fuzzing ${url} (${values.url ? 'external' : dir})\n`);
    const report = await runFuzz(
      {
        url,
        model: served,
        seed: intOption(values.seed, 'seed', 1, 0),
        requests: intOption(values.requests, 'requests', 2000),
        concurrency: intOption(values.concurrency, 'concurrency', 8),
        boundMs: intOption(values['bound-s'], 'bound-s', 120) * 1000,
        maxBodyBytes,
        hugeBytes: intOption(values['huge-bytes'], 'huge-bytes', 2 << 20),
        only: values.only?.split(',').map((s) => intOption(s, 'only', 0, 0)),
      },
      (done, total) => {
        if (process.stderr.isTTY && (done % 50 === 0 || done === total)) process.stderr.write(`\r${done}/${total}`);
      },
    );
    if (process.stderr.isTTY) process.stderr.write('\n');
    process.stdout.write(values.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatReport(report)}\n`);
    return report.failures.length === 0 && Object.values(report.after).every((p) => p === null) ? 0 : 1;
  } finally {
    await running?.close(5000);
    copy?.remove();
  }
}
