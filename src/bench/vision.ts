// `npm run bench:vision`: image preprocessing, encode time and time-to-first-token for a one-image
// request (a) on each tiny f32 VLM fixture and (b) on a random-weight Qwen2.5-VL-3B-shaped vision tower
// (one 448x448 image) in front of a small random text decoder, through the same engine path as
// `rapid run --image`. Encode = the vision tower + projector; TTFT = engine submit to first token
// (encode + prefill + sample); preprocess = decode + resize/normalize/patchify on the worker pool.
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import sharp from 'sharp';

import { imageChatPrompt, imageUserMessage } from '../engine/image-prompt.js';
import { resolveSamplingParams } from '../engine/sampling-params.js';
import { createTextEngine } from '../engine/text-engine.js';
import { openTextModel, type TextModel } from '../engine/text-model.js';
import { packageRoot, parseDevice } from '../native/binding.js';
import type { NativeDevice } from '../native/types.js';
import { decodeImage } from '../vision/decode-image.js';
import { median } from './median.js';
import { intOption } from './bench-options.js';
import { defaultBenchDir } from './random-checkpoint.js';
import { TorchTowerPeer, torchPeerLabel, type TorchDevice } from './vision-torch-peer.js';
import { ensureRandomVlmCheckpoint, QWEN25_VL_3B_TOWER, type VlmTowerShape } from './random-vlm-checkpoint.js';

const USAGE = `usage: npm run bench:vision -- [--runs N] [--threads N] [--skip-tower] [--skip-fixtures] [--dir DIR] [--json FILE]
                               [--tower-runs N] [--torch PYTHON] [--device cpu|cuda|auto] [--concurrent N]
  --runs N         runs per tiny fixture (median reported; default 5)
  --tower-runs N   runs of the 3B-shaped tower (default 1)
  --concurrent N   also N one-image requests (N different images) at once on the 3B-shaped tower, each
                   round once with the step's image encodes batched and once one at a time (default 0: off)
  --torch PYTHON   also time transformers' tower (bench/peers/torch_vision_tower.py, this python, the same
                   threads; default threads: all cores), one forward after each rapid run: f32 on the CPU,
                   bf16 sdpa on the GPU with --device cuda
  --device D       where rapid runs (default: RAPID_DEVICE, else auto); cuda puts the tower on the GPU
  --threads N      native threads (default: all cores)
  --skip-tower     only the tiny fixtures
  --skip-fixtures  only the 3B-shaped tower
  --dir DIR        where the random checkpoint is cached (default $RAPID_BENCH_DIR or <tmp>/rapid-bench)`;

export interface VisionRun {
  preprocessMs: number; // decode + preprocess (worker pool)
  encodeMs: number; // vision tower + projector
  ttftMs: number; // engine submit -> first token
  requestTtftMs: number; // preprocess + ttft: what a client waits for the first token
  ttftCpuMs: number; // process CPU time (all threads) from submit to first token: comparable on a shared machine
}

export interface VisionCase {
  name: string;
  image: string;
  grid: [number, number, number];
  imageTokens: number;
  promptTokens: number;
  loadMs: number;
  runs: VisionRun[];
  median: VisionRun;
}

export interface TowerProfile {
  /** Analytic FLOPs of one image through the tower (multiply-add = 2). */
  gflop: { linear: number; attention: number; merger: number; patchEmbed: number };
  /** Share of the tower's FLOPs in the linear layers (qkv, proj, MLP, merger, patch embed). */
  linearShare: number;
  /** Achieved rate over the measured encode time. */
  gflopPerSecond: number;
}

export interface VisionBenchReport {
  machine: { cpu: string; cores: number; loadavg1: number };
  /** --device as given ('default': RAPID_DEVICE, else auto). */
  device: NativeDevice | 'default';
  threads: number | 'default';
  fixtures: VisionCase[];
  skipped: { name: string; reason: string }[];
  tower?: VisionCase & {
    checkpoint: { dir: string; towerMiB: number; towerParameters: number; generated: boolean; generateMs: number };
    profile: TowerProfile;
    /**
     * transformers forward (f32 sdpa on the CPU, bf16 sdpa on CUDA) after each rapid run: wall ms and torch ms /
     * rapid encode ms per round; process CPU ms and torch CPU / rapid ttft CPU (encode + the small decoder's
     * prefill: conservative).
     */
    torch?: { label: string; ms: number[]; ratios: number[]; medianRatio: number; cpuMs: number[]; cpuRatios: number[]; medianCpuRatio: number };
    concurrent?: ConcurrentCase;
  };
}

/** N one-image requests submitted together (N different images), a fresh engine (empty encoder cache) a run. */
export interface ConcurrentRun {
  ttftMs: number[]; // per request, engine submit -> first token
  lastMs: number; // submit -> every request's first token
  encodeCalls: number; // native encode calls (batched or not)
}

export interface ConcurrentCase {
  requests: number;
  /** Per round, the same requests with the engine's batchImageEncodes on and off (alternating which goes first). */
  batched: ConcurrentRun[];
  single: ConcurrentRun[];
  /** Medians over rounds: the median request's TTFT, the last request's, and one-at-a-time / batched of the last. */
  median: { batchedP50: number; batchedLast: number; singleP50: number; singleLast: number; lastRatio: number };
}

function log(msg: string): void {
  process.stderr.write(`bench:vision: ${msg}\n`);
}


/** One image request through a fresh engine (empty encoder cache, so the image is encoded every run). */
async function oneRun(model: TextModel, bytes: Uint8Array): Promise<{ run: VisionRun; grid: [number, number, number]; imageTokens: number; promptTokens: number }> {
  const vision = model.vision!;
  const t0 = performance.now();
  const prepared = await vision.prepareImageOffThread(await decodeImage(bytes));
  const preprocessMs = performance.now() - t0;
  const { promptIds, multimodal } = imageChatPrompt(model, [imageUserMessage('Describe this image.', 1)], [prepared]);
  // The 3B-shaped tower takes minutes on a loaded 2-core machine: past the engine's default 120 s watchdog.
  const engine = createTextEngine(model, { maxNumSeqs: 1, stepTimeoutMs: 30 * 60_000 });
  const params = resolveSamplingParams({ temperature: 0, maxTokens: 1, seed: 0 }, { maxTokens: 1 });
  let ttftMs = NaN;
  const cpu0 = process.cpuUsage();
  let cpu: NodeJS.CpuUsage | undefined;
  try {
    for await (const ev of engine.generate({ promptIds, params, multimodal })) {
      cpu ??= process.cpuUsage(cpu0); // at the first event: the first token (max_tokens is 1)
      if (ev.type === 'done') ttftMs = ev.timings.ttftMs;
    }
  } finally {
    await engine.shutdown(0);
  }
  const encodeMs = engine.stats().encoderCache.encodeMs;
  return {
    run: { preprocessMs, encodeMs, ttftMs, requestTtftMs: preprocessMs + ttftMs, ttftCpuMs: cpu ? (cpu.user + cpu.system) / 1000 : NaN },
    grid: prepared.input.grid,
    imageTokens: prepared.tokens,
    promptTokens: promptIds.length,
  };
}

export async function benchModel(
  name: string,
  dir: string,
  image: string,
  bytes: Uint8Array,
  runs: number,
  threads: number | undefined,
  afterRun?: () => Promise<void>,
  device?: NativeDevice,
): Promise<VisionCase> {
  const t0 = performance.now();
  const model = openTextModel(dir, { ...(threads !== undefined ? { threads } : {}), ...(device !== undefined ? { device } : {}) });
  const loadMs = performance.now() - t0;
  try {
    if (model.vision === null) throw new Error(`${dir} has no vision tower`);
    const out: VisionRun[] = [];
    let first: Awaited<ReturnType<typeof oneRun>> | undefined;
    for (let i = 0; i < runs; i++) {
      const r = await oneRun(model, bytes);
      first ??= r;
      out.push(r.run);
      log(`${name} run ${i + 1}/${runs}: encode ${r.run.encodeMs.toFixed(1)} ms, ttft ${r.run.ttftMs.toFixed(1)} ms`);
      await afterRun?.();
    }
    const med = (k: keyof VisionRun) => median(out.map((r) => r[k]));
    return {
      name,
      image,
      grid: first!.grid,
      imageTokens: first!.imageTokens,
      promptTokens: first!.promptTokens,
      loadMs,
      runs: out,
      median: { preprocessMs: med('preprocessMs'), encodeMs: med('encodeMs'), ttftMs: med('ttftMs'), requestTtftMs: med('requestTtftMs'), ttftCpuMs: med('ttftCpuMs') },
    };
  } finally {
    model.native.close();
  }
}

async function concurrentRun(model: TextModel, pngs: Uint8Array[], batch: boolean): Promise<ConcurrentRun> {
  const vision = model.vision!;
  const prompts = [];
  for (const png of pngs) {
    const prepared = await vision.prepareImageOffThread(await decodeImage(png));
    prompts.push(imageChatPrompt(model, [imageUserMessage('Describe this image.', 1)], [prepared]));
  }
  // The serving defaults (token budget, sequences) but batchImageEncodes forced either way.
  const engine = createTextEngine(model, { stepTimeoutMs: 30 * 60_000, batchImageEncodes: batch, maxNumSeqs: Math.max(16, pngs.length) });
  const params = resolveSamplingParams({ temperature: 0, maxTokens: 1, seed: 0 }, { maxTokens: 1 });
  const t0 = performance.now();
  try {
    const ttftMs = await Promise.all(
      prompts.map(async ({ promptIds, multimodal }) => {
        let ttft = NaN;
        for await (const ev of engine.generate({ promptIds, params, multimodal })) if (ev.type === 'done') ttft = ev.timings.ttftMs;
        return ttft;
      }),
    );
    return { ttftMs, lastMs: performance.now() - t0, encodeCalls: engine.stats().encoderCache.encodes };
  } finally {
    await engine.shutdown(0);
  }
}

async function benchConcurrent(dir: string, requests: number, rounds: number, threads: number | undefined, device?: NativeDevice): Promise<ConcurrentCase> {
  const model = openTextModel(dir, { ...(threads !== undefined ? { threads } : {}), ...(device !== undefined ? { device } : {}) });
  try {
    const pngs = await Promise.all(Array.from({ length: requests }, (_, i) => syntheticPng(448, 12345 + i)));
    await concurrentRun(model, pngs.slice(0, 1), false); // warm-up: weights on the device
    const batched: ConcurrentRun[] = [];
    const single: ConcurrentRun[] = [];
    for (let r = 0; r < rounds; r++) {
      for (const batch of r % 2 === 0 ? [true, false] : [false, true]) {
        const run = await concurrentRun(model, pngs, batch);
        (batch ? batched : single).push(run);
        log(`${requests} concurrent one-image requests, ${batch ? 'batched' : 'one at a time'}: last first token at ${run.lastMs.toFixed(1)} ms, median ${median(run.ttftMs).toFixed(1)} ms`);
      }
    }
    const med = (runs: ConcurrentRun[], f: (x: ConcurrentRun) => number) => median(runs.map(f));
    return {
      requests,
      batched,
      single,
      median: {
        batchedP50: med(batched, (x) => median(x.ttftMs)),
        batchedLast: med(batched, (x) => x.lastMs),
        singleP50: med(single, (x) => median(x.ttftMs)),
        singleLast: med(single, (x) => x.lastMs),
        lastRatio: median(single.map((x, i) => x.lastMs / batched[i]!.lastMs)),
      },
    };
  } finally {
    model.native.close();
  }
}

/** FLOPs of one image of `patches` patches through a Qwen2.5-VL tower (window attention over windowPatches). */
export function towerFlops(t: VlmTowerShape, patches: number): TowerProfile['gflop'] {
  const H = t.hidden;
  const windowPatches = (t.windowSize / t.patchSize) ** 2;
  const full = t.fullAttBlocks.length;
  const linearPerBlock = 2 * patches * H * (3 * H + H + 3 * t.ffn);
  // QK^T and PV: 2 * 2 * n * span * H per block, span = the window or the whole image.
  const attention = (t.depth - full) * 4 * patches * Math.min(windowPatches, patches) * H + full * 4 * patches * patches * H;
  const merged = patches / 4;
  return {
    linear: (t.depth * linearPerBlock) / 1e9,
    attention: attention / 1e9,
    merger: (2 * merged * (4 * H * 4 * H + 4 * H * t.outHidden)) / 1e9,
    patchEmbed: (2 * patches * H * 3 * 2 * t.patchSize * t.patchSize) / 1e9,
  };
}

function fixtureDirs(root: string): string[] {
  if (!existsSync(root)) return [];
  return readdirSync(root)
    .filter((d) => d.endsWith('-f32') && existsSync(join(root, d, 'config.json')) && existsSync(join(root, d, 'model.safetensors')))
    .sort();
}

/** A deterministic 448x448 PNG with structure (gradients + noise), as a client would send it. */
async function syntheticPng(size: number, seed = 12345): Promise<Uint8Array> {
  const raw = Buffer.alloc(size * size * 3);
  let s = seed;
  for (let i = 0; i < size * size; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    const x = i % size;
    const y = Math.floor(i / size);
    raw[3 * i] = (x * 255) / size;
    raw[3 * i + 1] = (y * 255) / size;
    raw[3 * i + 2] = s >>> 24;
  }
  return new Uint8Array(await sharp(raw, { raw: { width: size, height: size, channels: 3 } }).png().toBuffer());
}

export async function runVisionBench(o: {
  runs: number;
  towerRuns?: number;
  torch?: string;
  threads?: number;
  fixtures: boolean;
  tower: boolean;
  dir: string;
  device?: NativeDevice;
  concurrent?: number;
}): Promise<VisionBenchReport> {
  const root = join(packageRoot(), 'test', 'fixtures', 'vlm');
  const report: VisionBenchReport = {
    machine: { cpu: cpus()[0]?.model ?? 'unknown', cores: cpus().length, loadavg1: loadavg()[0] },
    threads: o.threads ?? 'default',
    device: o.device ?? 'default',
    fixtures: [],
    skipped: [],
  };
  if (o.fixtures) {
    const dirs = fixtureDirs(root);
    if (dirs.length === 0) log(`no tiny VLM fixtures under ${root} (they ship with the repository, not the package)`);
    const imageFile = 'big_200x150.png';
    const bytes = new Uint8Array(readFileSync(join(root, 'images', imageFile)));
    for (const d of dirs) {
      try {
        report.fixtures.push(await benchModel(d, join(root, d), imageFile, bytes, o.runs, o.threads, undefined, o.device));
      } catch (err) {
        // A fixture of a family this build does not know yet is reported, not fatal.
        const why = err instanceof Error ? err.message.split('\n')[0] : String(err);
        report.skipped.push({ name: d, reason: why });
        log(`${d}: skipped (${why})`);
      }
    }
  }
  if (o.tower) {
    const tokenizerDir = join(root, 'qwen2_5_vl-f32');
    if (!existsSync(join(tokenizerDir, 'tokenizer.json'))) throw new Error(`the 3B-shaped tower bench borrows the tokenizer of ${tokenizerDir}, which is missing`);
    log('generating (or reusing) the random Qwen2.5-VL-3B-shaped checkpoint ...');
    const ck = ensureRandomVlmCheckpoint(o.dir, tokenizerDir);
    log(`${ck.cached ? 'reused' : `generated in ${(ck.generateMs / 1000).toFixed(1)} s:`} ${ck.dir}`);
    const threads = o.threads ?? cpus().length;
    // 448x448 at patch 14: a 1 x 32 x 32 grid, the one rapid's processor makes of the synthetic PNG.
    const torchDevice: TorchDevice = o.device === 'cuda' ? 'cuda' : 'cpu';
    const peer = o.torch !== undefined ? await TorchTowerPeer.start(o.torch, join(ck.dir, 'config.json'), threads, [1, 32, 32], torchDevice) : undefined;
    const torchMs: number[] = [];
    const torchCpuMs: number[] = [];
    let c: VisionCase;
    try {
      c = await benchModel('qwen2_5_vl-3B-tower (random bf16)', ck.dir, 'synthetic 448x448 PNG', await syntheticPng(448), o.towerRuns ?? 1, o.threads, peer && (async () => {
        const r = await peer.run();
        torchMs.push(r.ms);
        torchCpuMs.push(r.cpuMs);
        log(`${torchPeerLabel(torchDevice)} tower: ${r.ms.toFixed(1)} ms (CPU ${r.cpuMs.toFixed(0)} ms)`);
      }), o.device);
    } finally {
      peer?.close();
    }
    const patches = c.grid[0] * c.grid[1] * c.grid[2];
    const gflop = towerFlops(QWEN25_VL_3B_TOWER, patches);
    const totalGflop = gflop.linear + gflop.attention + gflop.merger + gflop.patchEmbed;
    report.tower = {
      ...c,
      checkpoint: { dir: ck.dir, towerMiB: ck.towerBytes / 1048576, towerParameters: ck.towerParameters, generated: !ck.cached, generateMs: ck.generateMs },
      profile: {
        gflop,
        linearShare: (gflop.linear + gflop.merger + gflop.patchEmbed) / totalGflop,
        gflopPerSecond: totalGflop / (c.median.encodeMs / 1000),
      },
    };
    if (peer) {
      const ratios = torchMs.map((ms, i) => ms / c.runs[i].encodeMs);
      const cpuRatios = torchCpuMs.map((ms, i) => ms / c.runs[i].ttftCpuMs);
      report.tower.torch = { label: torchPeerLabel(torchDevice), ms: torchMs, ratios, medianRatio: median(ratios), cpuMs: torchCpuMs, cpuRatios, medianCpuRatio: median(cpuRatios) };
    }
    if ((o.concurrent ?? 0) > 1) report.tower.concurrent = await benchConcurrent(ck.dir, o.concurrent!, Math.max(1, o.towerRuns ?? 1), o.threads, o.device);
  }
  return report;
}

function row(c: VisionCase): string {
  const m = c.median;
  const f = (x: number) => x.toFixed(1).padStart(9);
  return `${c.name.padEnd(36)} ${`${c.grid.join('x')}`.padStart(8)} ${String(c.imageTokens).padStart(6)} ${String(c.promptTokens).padStart(6)} ${f(m.preprocessMs)} ${f(m.encodeMs)} ${f(m.ttftMs)} ${f(m.ttftCpuMs)} ${f(m.requestTtftMs)} ${String(c.runs.length).padStart(4)}`;
}

export function formatReport(r: VisionBenchReport): string {
  const lines = [
    `bench:vision on ${r.machine.cpu} (${r.machine.cores} cores, load ${r.machine.loadavg1.toFixed(1)}), native threads ${r.threads}, device ${r.device}`,
    `${'model'.padEnd(36)} ${'grid'.padStart(8)} ${'img tk'.padStart(6)} ${'prompt'.padStart(6)} ${'prep ms'.padStart(9)} ${'encode ms'.padStart(9)} ${'ttft ms'.padStart(9)} ${'ttft CPU'.padStart(9)} ${'req ttft'.padStart(9)} ${'runs'.padStart(4)}`,
    ...r.fixtures.map(row),
    ...r.skipped.map((k) => `${k.name.padEnd(36)} skipped: ${k.reason}`),
  ];
  if (r.tower) {
    const t = r.tower;
    const g = t.profile.gflop;
    lines.push(row(t));
    lines.push(
      `  tower: ${t.checkpoint.towerMiB.toFixed(0)} MiB bf16, ${(t.checkpoint.towerParameters / 1e6).toFixed(0)} M parameters; ` +
        `${(g.linear + g.attention + g.merger + g.patchEmbed).toFixed(0)} GFLOP per image ` +
        `(linear ${g.linear.toFixed(0)}, attention ${g.attention.toFixed(1)}, merger ${g.merger.toFixed(1)}, patch embed ${g.patchEmbed.toFixed(1)}): ` +
        `${(100 * t.profile.linearShare).toFixed(1)}% in matmuls, ${t.profile.gflopPerSecond.toFixed(0)} GFLOP/s achieved`,
    );
    if (t.torch)
      lines.push(
        `  ${t.torch.label} ms per round: ${t.torch.ms.map((x) => x.toFixed(0)).join(', ')}; ` +
          `rapid speed-up per round: ${t.torch.ratios.map((x) => `${x.toFixed(2)}x`).join(', ')} (median ${t.torch.medianRatio.toFixed(2)}x)`,
        `  in process CPU time (torch forward / rapid ttft CPU): ${t.torch.cpuRatios.map((x) => `${x.toFixed(2)}x`).join(', ')} ` +
          `(median ${t.torch.medianCpuRatio.toFixed(2)}x)`,
      );
  }
  const cc = r.tower?.concurrent;
  if (cc) {
    const m = cc.median;
    lines.push(
      `  ${cc.requests} one-image requests at once (${cc.batched.length} rounds): batched encodes: median ttft ${m.batchedP50.toFixed(1)} ms, ` +
        `last ${m.batchedLast.toFixed(1)} ms (${cc.batched[0]?.encodeCalls ?? 0} images); one at a time: median ${m.singleP50.toFixed(1)} ms, ` +
        `last ${m.singleLast.toFixed(1)} ms; last first token ${m.lastRatio.toFixed(2)}x sooner batched ` +
        `(per round ${cc.single.map((x, i) => (x.lastMs / cc.batched[i]!.lastMs).toFixed(2)).join(', ')})`,
    );
  }
  lines.push(
    'prep = decode + preprocess (worker pool); encode = tower + projector; ttft = engine submit -> first token (wall);',
    'ttft CPU = process CPU ms (all threads) over the same span, steadier on a shared machine; req ttft = prep + ttft',
  );
  return lines.join('\n');
}

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      runs: { type: 'string' },
      threads: { type: 'string' },
      'skip-tower': { type: 'boolean' },
      'tower-runs': { type: 'string' },
      torch: { type: 'string' },
      device: { type: 'string' },
      'skip-fixtures': { type: 'boolean' },
      dir: { type: 'string' },
      json: { type: 'string' },
      concurrent: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const report = await runVisionBench({
    runs: intOption(values.runs, 'runs', 5),
    towerRuns: intOption(values['tower-runs'], 'tower-runs', 1),
    torch: values.torch,
    threads: values.threads === undefined ? undefined : intOption(values.threads, 'threads', 1), // absent: all cores
    fixtures: !values['skip-fixtures'],
    tower: !values['skip-tower'],
    dir: values.dir ?? defaultBenchDir(),
    device: values.device === undefined ? undefined : parseDevice(values.device, '--device'),
    concurrent: values.concurrent === undefined ? 0 : intOption(values.concurrent, 'concurrent', 0),
  });
  process.stdout.write(`${formatReport(report)}\n`);
  if (values.json) {
    writeFileSync(values.json, `${JSON.stringify(report, null, 2)}\n`);
    log(`wrote ${values.json}`);
  }
  return 0;
}
