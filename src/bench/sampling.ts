// `npm run bench:sampling`: sampled decode (temperature 0.8, top-p 0.95 by default) against greedy on the same
// loaded model, random-weight Qwen2.5-0.5B shape, at 1 and 16 sequences by default, in alternating rounds; the
// figure is the median of the per-round sampled / greedy ratios with their min-max (the issue's CPU target: within
// 5% of greedy). --device cuda runs it on the GPU.
import { writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { loadNative } from '../native/binding.js';
import type { NativeDevice } from '../native/types.js';
import { intOption, precisionOption, reportCheckpoint, samplingOptions } from './bench-options.js';
import { defaultBenchDir, ensureRandomCheckpoint, QWEN25_05B } from './random-checkpoint.js';
import { measureRounds, SAMPLED, summarizeRounds, type RoundFigures } from './sampled-rounds.js';

const USAGE = `usage: npm run bench:sampling -- [options]
  --levels LIST      concurrencies (default 1,16)
  --rounds N         alternating greedy / sampled rounds per level (default 5)
  --gen N            decode steps per run (default 32)
  --prompt N         prompt tokens per sequence (default 64)
  --temperature T    sampled runs' temperature (default 0.8)
  --top-p P          sampled runs' nucleus (default 0.95)
  --threads N        CPU threads (default 2)
  --device D         cpu | cuda (default cpu)
  --precision P      fast | exact (default fast)
  --dir DIR          checkpoint cache (default $RAPID_BENCH_DIR or <tmpdir>/rapid-bench)
  --json FILE        write every round as JSON`;

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      levels: { type: 'string' },
      rounds: { type: 'string' },
      gen: { type: 'string' },
      prompt: { type: 'string' },
      temperature: { type: 'string' },
      'top-p': { type: 'string' },
      threads: { type: 'string' },
      device: { type: 'string' },
      precision: { type: 'string' },
      dir: { type: 'string' },
      json: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const levels = (values.levels ?? '1,16').split(',').map((v) => intOption(v.trim(), 'levels', 1));
  const rounds = intOption(values.rounds, 'rounds', 5);
  const steps = intOption(values.gen, 'gen', 32);
  const prompt = intOption(values.prompt, 'prompt', 64);
  const threads = intOption(values.threads, 'threads', 2);
  const device = (values.device ?? 'cpu') as NativeDevice;
  if (device !== 'cpu' && device !== 'cuda') throw new Error(`--device must be cpu or cuda, got ${String(values.device)}`);
  const sample = samplingOptions(values.temperature ?? String(SAMPLED.temperature), values['top-p'] ?? String(SAMPLED.topP));
  if (sample.temperature === 0) throw new Error('--temperature must be above 0: the bench compares sampled with greedy');
  const t0 = performance.now();
  const ck = ensureRandomCheckpoint(values.dir ?? defaultBenchDir(), QWEN25_05B);
  reportCheckpoint({ dir: ck.dir, bytes: ck.tensorBytes, cached: ck.cached }, t0);

  const maxLevel = Math.max(...levels);
  const blockSize = 16;
  const perToken = QWEN25_05B.layers * 2 * QWEN25_05B.kvHeads * QWEN25_05B.headDim * 4;
  const kvCacheBytes = maxLevel * (Math.ceil((prompt + steps + 1) / blockSize) + 1) * blockSize * perToken;
  const { addon, path } = loadNative(device === 'cuda' ? { device } : undefined);
  const model = addon.loadModel(ck.dir, { threads, kvCacheBytes, blockSize, precision: precisionOption(values.precision), device });
  const loadStart = loadavg()[0]!;
  const figures: RoundFigures[] = [];
  try {
    for (const level of levels) {
      figures.push(
        await measureRounds(model, { level, steps, prompt, rounds, sample, warmupSteps: 4 }, (r, g, s) =>
          process.stderr.write(`concurrency ${level} round ${r + 1}: greedy ${g.toFixed(1)} tok/s, sampled ${s.toFixed(1)} tok/s (${(s / g).toFixed(3)}x)\n`),
        ),
      );
    }
  } finally {
    model.close();
  }
  const lines = [
    `rapid bench:sampling: Qwen2.5-0.5B shape (random weights, MLX 4-bit), ${device}${device === 'cpu' ? `, ${threads} threads (${cpus()[0]?.model ?? 'cpu'})` : ''}, prompt ${prompt}, ${steps} decode steps, ${rounds} alternating rounds`,
    `sampled: temperature ${sample.temperature}, top-p ${sample.topP}; load average ${loadStart.toFixed(2)} at start, ${loadavg()[0]!.toFixed(2)} at end; addon ${path}`,
    `  conc  greedy tok/s  sampled tok/s  sampled/greedy (median, min-max of rounds)  sample ms/step greedy -> sampled`,
  ];
  for (const f of figures) {
    const s = summarizeRounds(f);
    const ms = (xs: number[]) => (xs.reduce((a, b) => a + b, 0) / xs.length).toFixed(2);
    lines.push(
      `  ${String(f.level).padStart(4)}  ${s.greedyTokS.toFixed(1).padStart(12)}  ${s.sampledTokS.toFixed(1).padStart(13)}  ${s.ratio.toFixed(3)}x (${s.ratioMin.toFixed(3)}-${s.ratioMax.toFixed(3)})${' '.repeat(24)}  ${ms(f.greedySampleMs)} -> ${ms(f.sampledSampleMs)}`,
    );
  }
  process.stdout.write(`${lines.join('\n')}\n`);
  if (values.json) writeFileSync(values.json, `${JSON.stringify({ device, threads, prompt, steps, rounds, sample, figures: figures.map((f) => ({ ...f, ...summarizeRounds(f) })) }, null, 2)}\n`);
  return 0;
}
