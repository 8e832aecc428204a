// `npm run bench:kv-dtype`: decode speed after a long prompt (default 1024 tokens) on the CPU or (--device cuda) the
// GPU with the KV cache stored as f32, f16, bf16 or int8 (--kv-cache-dtype), on the random-weight Qwen2.5-0.5B-shaped
// 4-bit checkpoint of bench:cpu. The dtypes run interleaved round by round in one process, so a loaded
// machine slows them alike; figures are medians with their spread, and ratios against the first dtype of the same run.
import { loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { loadNative } from '../native/binding.js';
import type { KvCacheDtype, NativeModel } from '../native/types.js';
import { intOption, precisionOption } from './bench-options.js';
import { timeDecode } from './decode-loop.js';
import { median } from './median.js';
import { defaultBenchDir, ensureRandomCheckpoint, hash32, QWEN25_05B } from './random-checkpoint.js';

const USAGE = `usage: npm run bench:kv-dtype -- [--device cpu|cuda] [--prompt N=1024] [--steps N=64] [--rounds N=3]
  [--threads N=2] [--concurrency N=1] [--dtypes f32,f16,int8 (cuda: f32,bf16,int8)] [--precision fast|exact] [--dir DIR]`;

const DEFAULT_DTYPES = { cpu: 'f32,f16,int8', cuda: 'f32,bf16,int8' } as const;

/** K + V bytes one token takes over all layers (int8: plus an f16 scale per KV head). */
function kvBytesPerToken(d: KvCacheDtype): number {
  const { layers, kvHeads, headDim } = QWEN25_05B;
  const elem = d === 'f32' ? 4 : d === 'int8' ? 1 : 2;
  return 2 * layers * kvHeads * (headDim * elem + (d === 'int8' ? 2 : 0));
}

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      prompt: { type: 'string' },
      steps: { type: 'string' },
      rounds: { type: 'string' },
      threads: { type: 'string' },
      concurrency: { type: 'string' },
      dtypes: { type: 'string' },
      device: { type: 'string' },
      precision: { type: 'string' },
      dir: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const prompt = intOption(values.prompt, 'prompt', 1024);
  const steps = intOption(values.steps, 'steps', 64);
  const rounds = intOption(values.rounds, 'rounds', 3);
  const threads = intOption(values.threads, 'threads', 2);
  const concurrency = intOption(values.concurrency, 'concurrency', 1);
  const precision = precisionOption(values.precision);
  const device = values.device ?? 'cpu';
  if (device !== 'cpu' && device !== 'cuda') throw new Error(`--device must be cpu or cuda, got '${device}'`);
  const dtypes = (values.dtypes ?? DEFAULT_DTYPES[device]).split(',') as KvCacheDtype[];
  const ckpt = ensureRandomCheckpoint(values.dir ?? defaultBenchDir(), QWEN25_05B, { bits: 4, groupSize: 64 });
  const addon = loadNative({ device }).addon;
  // Enough for every row's prompt and decode at f32 (the widest), so each dtype runs the same sequence.
  const kvBytes = concurrency * (prompt + steps + 32) * QWEN25_05B.layers * 2 * QWEN25_05B.kvHeads * QWEN25_05B.headDim * 4;
  const models = new Map<KvCacheDtype, NativeModel>(
    dtypes.map((d) => [d, addon.loadModel(ckpt.dir, { threads, precision, kvCacheBytes: kvBytes, kvCacheDtype: d, device })]),
  );
  const info = models.get(dtypes[0]!)!.info();
  if (info.device !== device) throw new Error(`the model loaded on ${String(info.device)}, not ${device}${info.deviceNote ? ` (${info.deviceNote})` : ''}`);
  const load0 = loadavg()[0]!;
  const tokS = new Map<KvCacheDtype, number[]>(dtypes.map((d) => [d, []]));
  try {
    for (let r = 0; r <= rounds; r++) {
      for (const d of dtypes) {
        const ms = await timeDecode(models.get(d)!, {
          concurrency,
          steps: r === 0 ? 4 : steps, // round 0: warm-up (pages the weights in)
          prompt,
          idPrefix: `kv-${d}-${r}`,
          promptToken: (row, k, vocab) => hash32(row * 65_537 + k) % vocab,
        });
        if (r > 0) tokS.get(d)!.push((concurrency * steps * 1000) / ms);
      }
      if (r > 0) process.stderr.write(`bench: round ${r}: ${dtypes.map((d) => `${d} ${tokS.get(d)!.at(-1)!.toFixed(1)}`).join(', ')} tok/s\n`);
    }
  } finally {
    for (const m of models.values()) m.close();
  }
  const base = median(tokS.get(dtypes[0]!)!);
  process.stdout.write(
    `Qwen2.5-0.5B shape, random 4-bit weights, ${device}${device === 'cuda' ? ` (${info.deviceName})` : `, ${threads} threads`}, ${precision}, concurrency ${concurrency}, ` +
      `decode ${steps} tokens after a ${prompt}-token prompt, ${rounds} rounds (load average ${load0.toFixed(1)} -> ${loadavg()[0]!.toFixed(1)})\n`,
  );
  for (const d of dtypes) {
    const xs = tokS.get(d)!;
    const m = median(xs);
    process.stdout.write(
      `  kv ${d.padEnd(4)} ${m.toFixed(2)} tok/s (rounds ${xs.map((x) => x.toFixed(1)).join(', ')}), ` +
        `${(m / base).toFixed(2)}x ${dtypes[0]}, ${(kvBytesPerToken(d) / 1024).toFixed(1)} KiB of KV per token\n`,
    );
  }
  return 0;
}
