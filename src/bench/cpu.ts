// `npm run bench:cpu`: prefill and batch-1 decode speed on a random-weight Qwen2.5-0.5B-shaped MLX
// 4-bit checkpoint, the decode roofline from weight bytes and measured bandwidth, and optionally a
// llama.cpp peer measured in the same run (figures are reported as ratios against it).
import { createRequire } from 'node:module';
import { existsSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { basename, join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadNative, packageRoot } from '../native/binding.js';
import type { NativeAddon, NativeModel, NativeModelInfo } from '../native/types.js';
import { median } from './median.js';
import { intOption, precisionOption, samplingOptions, type BenchSampling } from './bench-options.js';
import { defaultBenchDir, ensureRandomCheckpoint, QWEN25_05B, type RandomCheckpoint } from './random-checkpoint.js';
import { runPeer, type PeerResult } from './peer.js';
import { benchEngine, benchRequest } from './bench-engine.js';

export interface CpuBenchOptions {
  threads: number;
  promptTokens: number;
  genTokens: number;
  runs: number;
  chunk: number; // chunked-prefill size (secondary figure); 0 = skip
  precision: 'exact' | 'fast';
  bits?: 4 | 8; // weights of the random checkpoint (absent: 4)
  dir: string;
  bandwidthBytes: number;
  temperature?: number; // decode samples at this temperature (0 or absent: greedy, as the peer decodes)
  topP?: number; // with temperature: nucleus over top-p of the mass (absent: off)
  peer?: { llamaBench: string; models: string[] };
}

export interface PhaseFigure {
  tokS: number; // median over runs
  runsTokS: number[];
  wallMs: number; // median wall time of the whole phase
  forwardMs: number; // native forward time summed over the phase's steps (median run)
  sampleMs: number;
  steps: number;
  dispatches: number; // CPU thread-pool parallel regions summed over the phase's steps (median run)
}

export interface PeerFigure extends PeerResult {
  model: string;
  maxDecodeTokS: number;
  decodePct: number;
  ratios: { prefill: number; decode: number };
}

export interface CpuBenchReport {
  date: string;
  cpu: string;
  /** 1-minute load average before and after: other work on the cores skews every figure. */
  load: { start: number; end: number };
  binary: { path: string; source: string; note?: string };
  system: ReturnType<NativeAddon['systemInfo']>;
  checkpoint: RandomCheckpoint & { shape: typeof QWEN25_05B; quantization: string };
  model: NativeModelInfo;
  options: Omit<CpuBenchOptions, 'peer'>;
  loadMs: number;
  prefill: PhaseFigure;
  prefillChunked?: PhaseFigure & { chunk: number };
  decode: PhaseFigure;
  decodeAfterPrompt: PhaseFigure;
  roofline: {
    bytesPerToken: number;
    bandwidthBytesPerS: number;
    maxDecodeTokS: number;
    decodePct: number;
    targetPct: number;
  };
  /** One entry per peer model, each with rapid / peer ratios. */
  peers: PeerFigure[];
}



function log(msg: string): void {
  process.stderr.write(`bench: ${msg}\n`);
}

/** The project loader; if it rejects every binary, the local build directly (the reason is kept). */
function loadAddon(): { addon: NativeAddon; path: string; source: string; note?: string } {
  try {
    const n = loadNative();
    return { addon: n.addon, path: n.path, source: n.source };
  } catch (err) {
    const local = join(packageRoot(), 'build', 'Release', 'rapid_native.node');
    if (!existsSync(local)) throw err;
    const require = createRequire(import.meta.url);
    const note = `project loader refused: ${(err as Error).message.split('\n').slice(0, 3).join(' ')}`;
    return { addon: require(local) as NativeAddon, path: local, source: 'build (direct)', note };
  }
}

interface StepStats {
  wallMs: number;
  forwardMs: number;
  sampleMs: number;
  steps: number;
  dispatches: number;
  lastToken: number;
}

const newStats = (): StepStats => ({ wallMs: 0, forwardMs: 0, sampleMs: 0, steps: 0, dispatches: 0, lastToken: 0 });

/** One request at a time through the Engine (bench-engine.ts); each native step it drives is timed from
 *  outside and counted to the prefill (the prompt's steps) or the decode (one token per step after them). */
class Runner {
  private serial = 0;

  constructor(
    private readonly model: NativeModel,
    private readonly sampling: BenchSampling = { temperature: 0, topP: 1 },
  ) {}

  /** Prefills `prompt` in steps of `chunk` tokens (the last one samples), then decodes `decode` more tokens. */
  private async request(prompt: Int32Array, chunk: number, decode: number): Promise<{ prefill: StepStats; decode: StepStats }> {
    const prefillSteps = Math.ceil(prompt.length / chunk);
    const pre = newStats();
    const dec = newStats();
    let at = performance.now();
    const engine = benchEngine(this.model, {
      maxNumSeqs: 1,
      maxBatchedTokens: chunk,
      onStep: (r) => {
        const s = pre.steps < prefillSteps ? pre : dec;
        const now = performance.now();
        s.wallMs += now - at;
        at = now;
        s.forwardMs += r.timings.forwardMs;
        s.sampleMs += r.timings.sampleMs;
        s.dispatches += r.timings.dispatches ?? 0;
        s.steps++;
        s.lastToken = r.rows[0]?.token ?? 0;
      },
    });
    try {
      at = performance.now();
      await benchRequest(engine, `bench-${++this.serial}`, Array.from(prompt), decode + 1, { ...this.sampling, seed: 0 });
    } finally {
      await engine.shutdown(0);
    }
    return { prefill: pre, decode: dec };
  }

  /** Prefills `prompt` from position 0 in steps of `chunk` tokens; samples after the last one. */
  async prefill(prompt: Int32Array, chunk: number): Promise<StepStats> {
    return (await this.request(prompt, chunk, 0)).prefill;
  }

  /** Batch-1 decode of `n` tokens from an empty context (as llama-bench tg): `first` at position 0,
   *  then each sampled token fed back; all `n` steps count as decode. */
  async decode(first: number, n: number): Promise<StepStats> {
    const { prefill, decode } = await this.request(Int32Array.of(first), 1, n - 1);
    return { wallMs: prefill.wallMs + decode.wallMs, forwardMs: prefill.forwardMs + decode.forwardMs, sampleMs: prefill.sampleMs + decode.sampleMs, steps: prefill.steps + decode.steps, dispatches: prefill.dispatches + decode.dispatches, lastToken: decode.lastToken };
  }

  /** A `prompt`-token prefill in one step, then `n` decode steps; the decode's figures. */
  async decodeAfter(prompt: Int32Array, n: number): Promise<StepStats> {
    return (await this.request(prompt, prompt.length, n)).decode;
  }
}

function figure(stats: StepStats[], tokens: number): PhaseFigure {
  const runsTokS = stats.map((s) => (tokens * 1000) / s.wallMs);
  // Per-step timings come from the median run (the lower middle one for an even count).
  const order = runsTokS.map((_, i) => i).sort((a, b) => runsTokS[a] - runsTokS[b]);
  const pick = stats[order[(order.length - 1) >> 1]];
  return {
    tokS: median(runsTokS),
    runsTokS,
    wallMs: median(stats.map((s) => s.wallMs)),
    forwardMs: pick.forwardMs,
    sampleMs: pick.sampleMs,
    steps: pick.steps,
    dispatches: pick.dispatches,
  };
}

function randomPrompt(n: number, vocab: number): Int32Array {
  // Fixed LCG: the same prompt every run, so runs and machines are comparable.
  const out = new Int32Array(n);
  let s = 12345;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    out[i] = s % vocab;
  }
  return out;
}

export async function runCpuBench(o: CpuBenchOptions): Promise<CpuBenchReport> {
  const loadStart = loadavg()[0];
  if (loadStart > 0.5) log(`warning: load average ${loadStart.toFixed(2)}: other processes compete for the cores`);
  const quant = { bits: o.bits ?? 4, groupSize: 64 };
  const ckpt = ensureRandomCheckpoint(o.dir, QWEN25_05B, quant);
  log(
    ckpt.cached
      ? `checkpoint (cached): ${ckpt.dir}`
      : `checkpoint generated in ${(ckpt.generateMs / 1000).toFixed(1)} s: ${ckpt.dir}`,
  );

  const native = loadAddon();
  log(`native: ${native.path} (${native.source})${native.note ? ` — ${native.note}` : ''}`);
  const { addon } = native;
  const system = addon.systemInfo();

  const contextTokens = o.promptTokens + o.genTokens + 1;
  const t0 = performance.now();
  const model = addon.loadModel(ckpt.dir, {
    threads: o.threads,
    precision: o.precision,
    kvCacheBytes: 256 << 20,
  });
  const loadMs = performance.now() - t0;
  const info = model.info();
  const needBlocks = Math.ceil(contextTokens / info.blockSize);
  if (info.numBlocks < needBlocks) throw new Error(`KV pool has ${info.numBlocks} blocks; the bench needs ${needBlocks}`);
  log(`loaded in ${loadMs.toFixed(0)} ms: ${info.family}, ${info.quantization}, ${info.threads} threads, ${info.precision}`);

  const runner = new Runner(model, { temperature: o.temperature ?? 0, topP: o.topP ?? 1 });
  const prompt = randomPrompt(o.promptTokens, QWEN25_05B.vocab);
  let report: CpuBenchReport;
  try {
    log('warm-up');
    await runner.prefill(prompt, o.promptTokens);
    await runner.decode(prompt[0], Math.min(16, o.genTokens));

    const pre: StepStats[] = [];
    for (let r = 0; r < o.runs; r++) pre.push(await runner.prefill(prompt, o.promptTokens));
    log(`prefill ${o.promptTokens} in one step: ${pre.map((s) => s.wallMs.toFixed(0)).join(', ')} ms`);

    let chunked: StepStats[] | undefined;
    if (o.chunk > 0 && o.chunk < o.promptTokens) {
      chunked = [];
      for (let r = 0; r < o.runs; r++) chunked.push(await runner.prefill(prompt, o.chunk));
      log(`prefill ${o.promptTokens} in chunks of ${o.chunk}: ${chunked.map((s) => s.wallMs.toFixed(0)).join(', ')} ms`);
    }

    // Like llama-bench tg: decode from an empty context, one token per step.
    const dec: StepStats[] = [];
    for (let r = 0; r < o.runs; r++) dec.push(await runner.decode(prompt[0], o.genTokens));
    log(`decode ${o.genTokens} from empty context: ${dec.map((s) => s.wallMs.toFixed(0)).join(', ')} ms`);

    const decAfter: StepStats[] = [];
    for (let r = 0; r < o.runs; r++) decAfter.push(await runner.decodeAfter(prompt, o.genTokens));
    log(`decode ${o.genTokens} after a ${o.promptTokens}-token prompt: ${decAfter.map((s) => s.wallMs.toFixed(0)).join(', ')} ms`);

    log(`memory bandwidth (${o.bandwidthBytes >> 20} MiB, ${o.threads} threads)`);
    const bw = median([0, 1, 2].map(() => addon.memoryBandwidth(o.bandwidthBytes, o.threads)));

    const decode = figure(dec, o.genTokens);
    const maxDecodeTokS = bw / ckpt.decodeBytesPerToken;
    report = {
      date: new Date().toISOString(),
      cpu: cpus()[0]?.model ?? 'unknown',
      load: { start: loadStart, end: 0 },
      binary: { path: native.path, source: native.source, note: native.note },
      system,
      checkpoint: { ...ckpt, shape: QWEN25_05B, quantization: `affine ${quant.bits}-bit g${quant.groupSize}` },
      model: info,
      options: {
        threads: o.threads,
        promptTokens: o.promptTokens,
        genTokens: o.genTokens,
        runs: o.runs,
        chunk: o.chunk,
        precision: o.precision,
        dir: o.dir,
        bandwidthBytes: o.bandwidthBytes,
      },
      loadMs,
      prefill: figure(pre, o.promptTokens),
      prefillChunked: chunked ? { ...figure(chunked, o.promptTokens), chunk: o.chunk } : undefined,
      decode,
      decodeAfterPrompt: figure(decAfter, o.genTokens),
      roofline: {
        bytesPerToken: ckpt.decodeBytesPerToken,
        bandwidthBytesPerS: bw,
        maxDecodeTokS,
        decodePct: (100 * decode.tokS) / maxDecodeTokS,
        targetPct: 85,
      },
      peers: [],
    };
  } finally {
    model.close();
  }

  for (const model of o.peer?.models ?? []) {
    const llamaBench = o.peer?.llamaBench ?? '';
    log(`peer: ${llamaBench} -m ${model}`);
    const peer = runPeer({
      llamaBench,
      model,
      threads: o.threads,
      promptTokens: o.promptTokens,
      genTokens: o.genTokens,
      runs: o.runs,
    });
    // The peer's tied head reads all of token_embd, so its bytes per token are about its model size.
    const peerMax = report.roofline.bandwidthBytesPerS / peer.modelBytes;
    report.peers.push({
      ...peer,
      model,
      maxDecodeTokS: peerMax,
      decodePct: (100 * peer.decodeTokS) / peerMax,
      ratios: { prefill: report.prefill.tokS / peer.prefillTokS, decode: report.decode.tokS / peer.decodeTokS },
    });
  }
  report.load.end = loadavg()[0];
  return report;
}

function pad(s: string, n: number): string {
  return s.length >= n ? s : s + ' '.repeat(n - s.length);
}

function lpad(s: string, n: number): string {
  return s.length >= n ? s : ' '.repeat(n - s.length) + s;
}

export function formatReport(r: CpuBenchReport): string {
  const o = r.options;
  const f = (x: number): string => x.toFixed(1);
  const lines: string[] = [];
  lines.push(
    `rapid bench:cpu — Qwen2.5-0.5B shape (random weights), MLX ${r.checkpoint.quantization}, ${o.threads} threads, precision ${o.precision}` +
      (o.temperature ? `, decode sampled at temperature ${o.temperature}${o.topP !== undefined && o.topP < 1 ? ` top-p ${o.topP}` : ''}` : ''),
  );
  lines.push(`load average ${r.load.start.toFixed(2)} at start, ${r.load.end.toFixed(2)} at end`);
  lines.push(`cpu: ${r.cpu}; kernel ${r.system.kernel} [${r.system.simd.join(', ')}]; addon ${r.binary.path} (${r.binary.source})`);
  lines.push('');
  const peers = r.peers;
  const head = [pad('', 28), lpad('rapid tok/s', 12)];
  for (const p of peers) head.push(lpad(basename(p.model, '.gguf').slice(0, 15), 16), lpad('ratio', 7));
  lines.push(head.join(''));
  const row = (label: string, ours: PhaseFigure, pick?: (p: PeerFigure) => number): void => {
    const cols = [pad(label, 28), lpad(f(ours.tokS), 12)];
    for (const p of peers) {
      const theirs = pick?.(p);
      cols.push(lpad(theirs === undefined ? '' : f(theirs), 16), lpad(theirs ? (ours.tokS / theirs).toFixed(2) : '', 7));
    }
    lines.push(cols.join('').trimEnd());
  };
  row(`prefill pp${o.promptTokens} (1 step)`, r.prefill, (p) => p.prefillTokS);
  if (r.prefillChunked) row(`prefill pp${o.promptTokens} (${r.prefillChunked.chunk}/step)`, r.prefillChunked);
  row(`decode tg${o.genTokens} (batch 1)`, r.decode, (p) => p.decodeTokS);
  row(`decode tg${o.genTokens} @ ctx ${o.promptTokens}`, r.decodeAfterPrompt);
  lines.push('');
  const per = (p: PhaseFigure, n: number): string =>
    `wall ${(p.wallMs / n).toFixed(2)} ms/tok, forward ${(p.forwardMs / n).toFixed(2)}, sample ${(p.sampleMs / n).toFixed(2)}, ` +
    `other ${((p.wallMs - p.forwardMs - p.sampleMs) / n).toFixed(2)}`;
  lines.push(`prefill: ${per(r.prefill, o.promptTokens)}`);
  lines.push(`decode:  ${per(r.decode, o.genTokens)}, ${(r.decode.dispatches / o.genTokens).toFixed(0)} pool dispatches/tok`);
  const rf = r.roofline;
  lines.push(
    `roofline: ${(rf.bytesPerToken / 1e6).toFixed(1)} MB of weights per decoded token / ${(rf.bandwidthBytesPerS / 1e9).toFixed(1)} GB/s ` +
      `= ${f(rf.maxDecodeTokS)} tok/s max; rapid decode at ${f(rf.decodePct)}% (target ≥ ${rf.targetPct}%)`,
  );
  for (const p of peers) {
    lines.push(
      `peer ${basename(p.model)}: llama.cpp ${p.build}, ${p.modelType}, ${(p.modelBytes / 1e6).toFixed(1)} MB/token -> ` +
        `${f(p.maxDecodeTokS)} tok/s max; its decode at ${f(p.decodePct)}%`,
    );
    lines.push(`  ${p.command}`);
  }
  return lines.join('\n');
}

const USAGE = `usage: npm run bench:cpu -- [options]
  --threads N          threads (default 2)
  --prompt N           prompt tokens for prefill (default 512)
  --gen N              decoded tokens (default 128)
  --runs N             timed runs per figure, median reported (default 3)
  --chunk N            also prefill in chunks of N tokens (default 128; 0 = skip)
  --precision P        fast | exact (default fast)
  --bits B             4 | 8: MLX affine bits of the random checkpoint (default 4)
  --dir DIR            checkpoint cache (default $RAPID_BENCH_DIR or <tmpdir>/rapid-bench)
  --json FILE          write every figure as JSON
  --temperature T      decode samples at temperature T (default 0: greedy); the 'sample' ms/tok shows its cost
  --top-p P            with --temperature: nucleus sampling over top-p P (default 1: off)
  --peer PATH          llama.cpp llama-bench binary, run in the same bench
  --peer-model FILE    GGUF for the peer (Q4_0 of the same shape); repeat for several`;

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      threads: { type: 'string' },
      prompt: { type: 'string' },
      gen: { type: 'string' },
      runs: { type: 'string' },
      chunk: { type: 'string' },
      precision: { type: 'string' },
      bits: { type: 'string' },
      dir: { type: 'string' },
      json: { type: 'string' },
      temperature: { type: 'string' },
      'top-p': { type: 'string' },
      peer: { type: 'string' },
      'peer-model': { type: 'string', multiple: true },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const precision = precisionOption(values.precision);
  const bits = intOption(values.bits, 'bits', 4);
  if (bits !== 4 && bits !== 8) throw new Error(`--bits ${bits}: 4 or 8`);
  const peerModels = values['peer-model'] ?? [];
  if (Boolean(values.peer) !== peerModels.length > 0) throw new Error('--peer and --peer-model go together');
  const options: CpuBenchOptions = {
    threads: intOption(values.threads, 'threads', 2, 0) || 2,
    promptTokens: intOption(values.prompt, 'prompt', 512, 0) || 512,
    genTokens: intOption(values.gen, 'gen', 128, 0) || 128,
    runs: intOption(values.runs, 'runs', 3, 0) || 3,
    chunk: intOption(values.chunk, 'chunk', 128, 0),
    precision,
    bits: bits as 4 | 8,
    dir: values.dir ?? defaultBenchDir(),
    bandwidthBytes: 1 << 30,
    ...samplingOptions(values.temperature, values['top-p']),
    peer: values.peer ? { llamaBench: values.peer, models: peerModels } : undefined,
  };
  const report = await runCpuBench(options);
  process.stdout.write(`${formatReport(report)}\n`);
  if (values.json) {
    writeFileSync(values.json, `${JSON.stringify(report, null, 2)}\n`);
    log(`wrote ${values.json}`);
  }
  return 0;
}
