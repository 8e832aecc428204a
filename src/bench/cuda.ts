// `npm run bench:cuda` (or `node bench/run.js cuda` after `npm run compile`): decode speed of the CUDA
// backend on random-weight MLX 4-bit checkpoints of the Qwen2.5-0.5B and Qwen2.5-3B shapes at several
// concurrencies, the weight bytes each decode step streams and the fraction of peak memory bandwidth
// reached at batch 1; with --peer-llama / --peer-torch, the same figures of llama.cpp CUDA (Q4_0) and
// PyTorch eager bf16 measured in the same run, reported as ratios. Imports nothing from node_modules:
// the GPU machine has only a node binary.
import { writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { loadNative } from '../native/binding.js';
import type { NativeModel } from '../native/types.js';
import { intOption, precisionOption, samplingOptions, type BenchSampling } from './bench-options.js';
import { median } from './median.js';
import { runLlamaPeer, runTorchPeer, type LlamaRun, type TorchRun } from './cuda-peers.js';
import { timeDecode } from './decode-loop.js';
import { measureRounds, SAMPLED, summarizeRounds, type RoundSummary } from './sampled-rounds.js';
import { moeBenchCheckpoint, QWEN3_VL_30B_A3B } from './moe.js';
import { defaultBenchDir, ensureRandomCheckpoint, QWEN25_05B, QWEN25_3B } from './random-checkpoint.js';

/** What the bench needs of a shape's checkpoint: its directory, and the weight bytes one decode token streams. */
interface BenchCheckpoint {
  dir: string;
  tensorBytes: number;
  cached: boolean;
  decodeBytesPerToken: number;
}
interface BenchShape {
  label: string;
  kv: { layers: number; kvHeads: number; headDim: number };
  /** The checkpoint under `dir` (generated when missing); `moeLayers`: the MoE shape's decoder layers. */
  checkpoint: (dir: string, moeLayers: number) => BenchCheckpoint;
}
const SHAPES: Record<string, BenchShape> = {
  '0.5b': { label: 'Qwen2.5-0.5B', kv: QWEN25_05B, checkpoint: (dir) => ensureRandomCheckpoint(dir, QWEN25_05B) },
  '3b': { label: 'Qwen2.5-3B', kv: QWEN25_3B, checkpoint: (dir) => ensureRandomCheckpoint(dir, QWEN25_3B) },
  // Qwen3-30B-A3B's decoder (128 experts, top-8), MLX 4-bit; --moe-layers takes a subset of its 48 layers.
  '30b-a3b': { label: 'Qwen3-30B-A3B', kv: QWEN3_VL_30B_A3B, checkpoint: (dir, layers) => moeBenchCheckpoint(dir, layers) },
};
const BLOCK_SIZE = 16;
const WARMUP_STEPS = 4;

export interface LevelFigure {
  level: number;
  steps: number;
  tokS: number; // tokens per second over all rows
  msPerStep: number; // wall time per decode step, JS included
  forwardMsPerStep: number; // what the native side reports for the forward
  /** What the native side reports for sampling: on the GPU this includes waiting for the step's kernels. */
  sampleMsPerStep?: number;
  /** Fraction of decode steps whose forward the GPU had started ahead (before the step was asked for). */
  aheadFraction?: number;
  runs?: number[]; // tok/s of each timed run when there were several (the other fields are their medians)
  /** The sampled row (temperature 0.8, top-p 0.95) against greedy in alternating rounds of the same run. */
  sampled?: RoundSummary & { rounds: number };
}

/** One level's figure from its timed runs: each field the median over the runs, the runs' tok/s kept when several. */
export function summarizeRuns(runs: readonly LevelFigure[]): LevelFigure {
  if (runs.length === 0) throw new Error('summarizeRuns: no runs');
  if (runs.length === 1) return runs[0]!;
  return {
    level: runs[0]!.level,
    steps: runs[0]!.steps,
    tokS: median(runs.map((r) => r.tokS)),
    msPerStep: median(runs.map((r) => r.msPerStep)),
    forwardMsPerStep: median(runs.map((r) => r.forwardMsPerStep)),
    ...(runs.every((r) => r.sampleMsPerStep !== undefined) ? { sampleMsPerStep: median(runs.map((r) => r.sampleMsPerStep!)) } : {}),
    ...(runs.every((r) => r.aheadFraction !== undefined) ? { aheadFraction: median(runs.map((r) => r.aheadFraction!)) } : {}),
    runs: runs.map((r) => r.tokS),
    ...(runs[0]!.sampled ? { sampled: runs[0]!.sampled } : {}),
  };
}

export interface ShapeResult {
  shape: string;
  label: string;
  checkpoint: string;
  /** Weight bytes one decode step streams: every tensor (the tied embedding is re-read as the head). */
  weightBytesPerStep: number;
  nativeWeightBytes: number;
  deviceName: string;
  levels: LevelFigure[];
  error?: string;
}

/** KV pool bytes for `rows` sequences of `tokens` each, at f32 (the widest the runtime stores), plus a block of slack per row. */
function kvBytesFor(s: BenchShape['kv'], rows: number, tokens: number): number {
  const perToken = s.layers * 2 * s.kvHeads * s.headDim * 4;
  return rows * (Math.ceil(tokens / BLOCK_SIZE) + 1) * BLOCK_SIZE * perToken;
}

async function measureLevel(model: NativeModel, level: number, steps: number, prompt: number, sample: BenchSampling): Promise<LevelFigure> {
  let forwardMs = 0;
  let sampleMs = 0;
  let ahead = 0;
  const ms = await timeDecode(model, {
    concurrency: level,
    steps,
    prompt,
    idPrefix: 'cuda',
    sample,
    promptToken: (i, k, vocab) => (i * 7919 + k * 104729 + 1) % vocab,
    onTimings: (t, decode) => {
      if (!decode) return;
      forwardMs += t.forwardMs;
      sampleMs += t.sampleMs;
      if (t.ahead) ahead++;
    },
  });
  return { level, steps, tokS: (level * steps * 1000) / ms, msPerStep: ms / steps, forwardMsPerStep: forwardMs / steps, sampleMsPerStep: sampleMs / steps, aheadFraction: ahead / steps };
}

interface RapidOptions {
  dir: string;
  threads: number;
  precision: 'fast' | 'exact';
  prompt: number;
  gen: number;
  levels: number[];
  repeat: number;
  sample: BenchSampling;
  /** Also measure each level sampled (SAMPLED) against greedy in alternating rounds. */
  sampledRows: boolean;
  moeLayers: number;
}

/** Loads the shape's checkpoint on the GPU and measures every level, each after a short warm-up; a failure is kept in `error`. */
async function measureShape(key: string, o: RapidOptions): Promise<ShapeResult> {
  const { label, kv, checkpoint } = SHAPES[key]!;
  const result: ShapeResult = { shape: key, label, checkpoint: '', weightBytesPerStep: 0, nativeWeightBytes: 0, deviceName: '', levels: [] };
  try {
    const t0 = performance.now();
    const ck = checkpoint(o.dir, o.moeLayers);
    process.stderr.write(`${label}: checkpoint ${ck.dir} (${(ck.tensorBytes / 2 ** 30).toFixed(2)} GiB, ${ck.cached ? 'cached' : `generated in ${((performance.now() - t0) / 1000).toFixed(1)} s`})\n`);
    result.checkpoint = ck.dir;
    result.weightBytesPerStep = ck.decodeBytesPerToken;
    const kvCacheBytes = kvBytesFor(key === '30b-a3b' ? { ...kv, layers: o.moeLayers } : kv, Math.max(...o.levels), o.prompt + o.gen + 1);
    const { addon } = loadNative({ device: 'cuda' });
    const model = addon.loadModel(ck.dir, { threads: o.threads, kvCacheBytes, blockSize: BLOCK_SIZE, precision: o.precision, device: 'cuda' });
    try {
      const info = model.info();
      if (info.device !== 'cuda') throw new Error(`the model loaded on ${String(info.device)}, not cuda${info.deviceNote ? ` (${info.deviceNote})` : ''}`);
      result.deviceName = info.deviceName;
      result.nativeWeightBytes = info.weightBytes;
      for (const level of o.levels) {
        await measureLevel(model, level, WARMUP_STEPS, o.prompt, o.sample);
        const runs: LevelFigure[] = [];
        for (let i = 0; i < o.repeat; i++) {
          const f = await measureLevel(model, level, o.gen, o.prompt, o.sample);
          process.stderr.write(`${label}: concurrency ${level}: ${f.tokS.toFixed(1)} tok/s (${f.msPerStep.toFixed(3)} ms/step, forward ${f.forwardMsPerStep.toFixed(3)} ms, sample ${(f.sampleMsPerStep ?? 0).toFixed(3)} ms, ahead ${((f.aheadFraction ?? 0) * 100).toFixed(0)}% of steps)\n`);
          runs.push(f);
        }
        if (o.sampledRows) {
          const rounds = Math.max(2, o.repeat);
          const r = await measureRounds(model, { level, steps: o.gen, prompt: o.prompt, rounds, sample: SAMPLED, warmupSteps: WARMUP_STEPS });
          runs[0]!.sampled = { ...summarizeRounds(r), rounds };
          process.stderr.write(`${label}: concurrency ${level}: sampled ${runs[0]!.sampled.sampledTokS.toFixed(1)} tok/s, ${runs[0]!.sampled.ratio.toFixed(3)}x greedy over ${rounds} rounds\n`);
        }
        result.levels.push(summarizeRuns(runs));
      }
    } finally {
      model.close();
    }
  } catch (err) {
    result.error = err instanceof Error ? err.message : String(err);
  }
  return result;
}

function listOption(v: string | undefined, name: string, dflt: string): string[] {
  const items = (v ?? dflt).split(',').map((s) => s.trim()).filter((s) => s !== '');
  if (items.length === 0) throw new Error(`--${name} must list at least one value`);
  return items;
}

export interface CudaBenchReport {
  prompt: number;
  gen: number;
  levels: number[];
  repeat: number; // timed runs per level of rapid and llama.cpp (figures are medians); torch runs once
  temperature: number; // rapid's sampling (0 = greedy); the peers' figures are greedy / unsampled decode
  topP: number; // rapid's nucleus with temperature > 0 (1 = off)
  sampledRows: boolean; // each level also sampled at temperature 0.8 / top-p 0.95 against greedy, alternating rounds
  precision: 'fast' | 'exact';
  peakBandwidth: number; // bytes/s the fractions are stated against
  native: string; // the addon binary
  rapid: ShapeResult[];
  llama: (LlamaRun & { shape: string })[];
  torch?: TorchRun;
  errors: string[];
}

const fmt = (v: number | undefined, digits = 1): string => (v === undefined ? '-' : v.toFixed(digits));
const ratio = (a: number | undefined, b: number | undefined): string => (a === undefined || b === undefined ? '-' : `${(a / b).toFixed(2)}x`);

/** "min-max" of a figure's runs, or "-" for a single run. */
const spread = (runs: readonly number[] | undefined): string =>
  runs && runs.length > 1 ? `${Math.min(...runs).toFixed(0)}-${Math.max(...runs).toFixed(0)}` : '-';

/** The report table: per shape and level, the three tok/s and the ratios (with several runs, medians and each
 * side's min-max); per shape, bandwidth at batch 1. */
export function formatReport(r: CudaBenchReport): string {
  const out: string[] = [];
  const device = r.rapid.find((s) => s.deviceName)?.deviceName ?? 'unknown device';
  const runs = r.repeat > 1 ? `, median of ${r.repeat} runs (torch: one)` : '';
  out.push(`rapid CUDA decode bench on ${device}: random weights, prompt ${r.prompt}, ${r.gen} decode steps, aggregate tok/s over all sequences${runs}`);
  const topP = r.topP < 1 ? `, top-p ${r.topP}` : '';
  const sampling = r.temperature > 0 ? `, sampling at temperature ${r.temperature}${topP} (the peers do not sample)` : ', greedy';
  out.push(`  rapid: MLX affine 4-bit g64 (${r.precision})${sampling}; llama.cpp: Q4_0 GGUF, llama-batched-bench S_TG; torch: eager bf16, transformers Qwen2ForCausalLM + DynamicCache`);
  const head = ['shape', 'conc', 'rapid tok/s', 'llama.cpp tok/s', 'torch tok/s', 'rapid/llama', 'rapid/torch'];
  if (r.repeat > 1) head.push('rapid runs', 'llama.cpp runs');
  if (r.sampledRows) head.push('sampled tok/s', 'sampled/greedy', 'sampled/llama');
  const rows: string[][] = [head];
  const bw: string[] = [];
  for (const s of r.rapid) {
    const llama = r.llama.find((l) => l.shape === s.shape);
    for (const level of r.levels) {
      const mine = s.levels.find((f) => f.level === level);
      const l = llama?.figures.find((f) => f.level === level);
      const t = r.torch?.figures.find((f) => f.shape === s.shape && f.level === level)?.tokS;
      const row = [s.label, String(level), fmt(mine?.tokS), fmt(l?.tokS), fmt(t), ratio(mine?.tokS, l?.tokS), ratio(mine?.tokS, t)];
      if (r.repeat > 1) row.push(spread(mine?.runs), spread(l?.runs));
      if (r.sampledRows) {
        const sm = mine?.sampled;
        row.push(fmt(sm?.sampledTokS), sm ? `${sm.ratio.toFixed(2)}x (${sm.ratioMin.toFixed(2)}-${sm.ratioMax.toFixed(2)})` : '-', ratio(sm?.sampledTokS, l?.tokS));
      }
      rows.push(row);
    }
    if (!r.levels.includes(1)) continue;
    const one = s.levels.find((f) => f.level === 1)?.tokS;
    const l1 = llama?.figures.find((f) => f.level === 1)?.tokS;
    const t1 = r.torch?.figures.find((f) => f.shape === s.shape && f.level === 1);
    const reached = (who: string, bytes: number, tokS: number | undefined): string =>
      tokS === undefined || bytes === 0
        ? `${who} -`
        : `${who} ${(bytes / 1e6).toFixed(1)} MB x ${tokS.toFixed(1)}/s = ${((bytes * tokS) / 1e12).toFixed(3)} TB/s = ${((100 * bytes * tokS) / r.peakBandwidth).toFixed(1)}%`;
    bw.push(`  ${s.label}: ${reached('rapid', s.weightBytesPerStep, one)}; ${reached('llama.cpp', llama?.ggufBytes ?? 0, l1)}; ${reached('torch', t1?.weightBytes ?? 0, t1?.tokS)}`);
  }
  const widths = head.map((_, c) => Math.max(...rows.map((row) => row[c]!.length)));
  for (const row of rows) out.push(`  ${row.map((cell, c) => (c < 1 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join('  ')}`);
  if (bw.length) out.push(`batch 1: weight bytes per step x steps/s, as a fraction of ${(r.peakBandwidth / 1e12).toFixed(1)} TB/s (llama.cpp: GGUF bytes; torch: bf16 parameter bytes)`, ...bw);
  for (const e of r.errors) out.push(`FAILED: ${e}`);
  return `${out.join('\n')}\n`;
}

const USAGE = `usage: npm run bench:cuda -- [options]   (on a GPU machine without npm: node bench/run.js cuda [options])
  --shapes LIST      0.5b,3b,30b-a3b (default 0.5b,3b; 30b-a3b: the Qwen3-30B-A3B MoE decoder)
  --moe-layers N     decoder layers of the 30b-a3b shape (default 48, the whole model: ~17 GB at 4-bit)
  --levels LIST      concurrencies (default 1,8,64)
  --prompt N         prompt tokens per sequence (default 128)
  --gen N            decode steps timed per level (default 128)
  --repeat N         timed runs per level of rapid and llama.cpp, reported as medians with min-max (default 1)
  --temperature T    rapid samples every token at temperature T (default 0: greedy, as the peers decode)
  --top-p P          with --temperature: nucleus sampling over top-p P of the mass (default 1: off)
  --skip-sampled     greedy runs only: no sampled rows (by default each level is also measured at temperature
                     0.8 / top-p 0.95 against greedy in max(2, --repeat) alternating rounds: sampled/greedy, sampled/llama)
  --precision P      fast | exact (default fast)
  --threads N        host threads (default: available cores)
  --dir DIR          checkpoint cache (default $RAPID_BENCH_DIR or <tmpdir>/rapid-bench)
  --native FILE      the CUDA addon to load (sets RAPID_NATIVE_CUDA_PATH)
  --peak-bw B        peak memory bandwidth in bytes/s for the fraction (default 4.8e12, H200)
  --out FILE         also write the report as JSON
  --prepare-only     generate the checkpoints and exit (e.g. while llama.cpp builds)
  --peer-torch       run bench/peers/torch_decode.py (PyTorch eager bf16) with the same shapes and levels
  --python BIN       python for --peer-torch (default python3)
  --peer-llama DIR   run DIR/llama-batched-bench (llama.cpp CUDA) on --gguf-0.5b / --gguf-3b
  --gguf-0.5b FILE   Q4_0 GGUF of the 0.5B shape for --peer-llama
  --gguf-3b FILE     Q4_0 GGUF of the 3B shape for --peer-llama
  --gguf-30b-a3b FILE  Q4_0 GGUF of the 30b-a3b shape (same --moe-layers) for --peer-llama`;

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      shapes: { type: 'string' },
      levels: { type: 'string' },
      prompt: { type: 'string' },
      gen: { type: 'string' },
      repeat: { type: 'string' },
      temperature: { type: 'string' },
      'top-p': { type: 'string' },
      'skip-sampled': { type: 'boolean' },
      precision: { type: 'string' },
      threads: { type: 'string' },
      dir: { type: 'string' },
      native: { type: 'string' },
      'peak-bw': { type: 'string' },
      out: { type: 'string' },
      'prepare-only': { type: 'boolean' },
      'peer-torch': { type: 'boolean' },
      python: { type: 'string' },
      'peer-llama': { type: 'string' },
      'gguf-0.5b': { type: 'string' },
      'gguf-3b': { type: 'string' },
      'gguf-30b-a3b': { type: 'string' },
      'moe-layers': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const shapes = listOption(values.shapes, 'shapes', '0.5b,3b');
  for (const s of shapes) if (!SHAPES[s]) throw new Error(`--shapes: unknown shape ${s} (known: ${Object.keys(SHAPES).join(', ')})`);
  const levels = listOption(values.levels, 'levels', '1,8,64').map((v) => intOption(v, 'levels', 1));
  const prompt = intOption(values.prompt, 'prompt', 128);
  const gen = intOption(values.gen, 'gen', 128);
  const repeat = intOption(values.repeat, 'repeat', 1);
  const { temperature, topP } = samplingOptions(values.temperature, values['top-p']);
  const precision = precisionOption(values.precision);
  const peakBandwidth = Number(values['peak-bw'] ?? 4.8e12);
  if (!(peakBandwidth > 0)) throw new Error(`--peak-bw must be a positive number of bytes/s, got ${String(values['peak-bw'])}`);
  const ggufs: Record<string, string | undefined> = { '0.5b': values['gguf-0.5b'], '3b': values['gguf-3b'], '30b-a3b': values['gguf-30b-a3b'] };
  const moeLayers = intOption(values['moe-layers'], 'moe-layers', QWEN3_VL_30B_A3B.layers);
  if (values['peer-llama']) for (const s of shapes) if (!ggufs[s]) throw new Error(`--peer-llama needs --gguf-${s}`);
  if (values.native) process.env.RAPID_NATIVE_CUDA_PATH = values.native;

  const dir = values.dir ?? defaultBenchDir();
  if (values['prepare-only']) {
    for (const s of shapes) {
      const t0 = performance.now();
      const ck = SHAPES[s]!.checkpoint(dir, moeLayers);
      process.stderr.write(`${SHAPES[s]!.label}: checkpoint ${ck.dir} ${ck.cached ? 'cached' : `generated in ${((performance.now() - t0) / 1000).toFixed(1)} s`}\n`);
    }
    return 0;
  }
  // The sampled rows compare with greedy: with --temperature the main rows already sample.
  const sampledRows = !values['skip-sampled'] && temperature === 0;
  const report: CudaBenchReport = { prompt, gen, levels, repeat, temperature, topP, sampledRows, precision, peakBandwidth, native: '', rapid: [], llama: [], errors: [] };
  const opts: RapidOptions = { dir, threads: intOption(values.threads, 'threads', availableParallelism()), precision, prompt, gen, levels, repeat, sample: { temperature, topP }, sampledRows, moeLayers };
  for (const s of shapes) {
    const r = await measureShape(s, opts);
    report.rapid.push(r);
    if (r.error) report.errors.push(`rapid ${s}: ${r.error}`);
  }
  try {
    report.native = loadNative({ device: 'cuda' }).path;
  } catch {
    // already recorded by the shape that failed to load
  }
  if (values['peer-torch']) {
    const script = fileURLToPath(new URL('../../bench/peers/torch_decode.py', import.meta.url));
    try {
      report.torch = runTorchPeer({ python: values.python ?? 'python3', script, shapes, prompt, gen, levels });
    } catch (err) {
      report.errors.push(err instanceof Error ? err.message : String(err));
    }
  }
  const binDir = values['peer-llama'];
  if (binDir) {
    for (const s of shapes) {
      try {
        report.llama.push({ shape: s, ...runLlamaPeer({ binDir, gguf: ggufs[s]!, shape: s, prompt, gen, levels, repeat }) });
      } catch (err) {
        report.errors.push(err instanceof Error ? err.message : String(err));
      }
    }
  }
  process.stdout.write(formatReport(report));
  if (values.out) writeFileSync(values.out, `${JSON.stringify(report, null, 2)}\n`);
  return report.errors.length === 0 ? 0 : 1;
}
