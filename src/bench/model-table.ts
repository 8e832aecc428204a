// `node bench/run.js model-table` (after `npm run compile`): the README's model table, measured as a user meets
// each catalog model at full size (random-weight replicas from scripts/replicas/make-replica.mjs, their real shapes
// and layout): load time, resident memory (host, and GPU where the model runs there), time to first token for a
// 512-token prompt and for one 1024x768 photo, decode tok/s at 1 and 16 sequences. Each model is measured in its own
// child process (`--child DIR`), so its memory figures are its own. Weights are random: speed and memory only.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { parseByteSize } from '../cli/commands/serve.js';
import { runOneRequest } from '../app/one-request.js';
import { imageChatPrompt, imageUserMessage } from '../engine/image-prompt.js';
import { openTextModel } from '../engine/text-model.js';
import { GREEDY_SAMPLE, resolveSamplingParams } from '../engine/sampling-params.js';
import { loadNative } from '../native/binding.js';
import { decodeImage } from '../vision/decode-image.js';
import { intOption } from './bench-options.js';
import { timeDecode } from './decode-loop.js';
import { defaultBenchDir } from './random-checkpoint.js';
import { photoJpeg } from './replica-steps.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const MAKE = join(ROOT, 'scripts', 'replicas', 'make-replica.mjs');
const STEP_MS = 30 * 60_000; // one model's child: the largest replica on a slow CPU
const PROMPT = 512; // the prompt of the TTFT figure
const DECODE_PROMPT = 128; // the prompt of the decode figures
const DECODE_STEPS = 32;
const KV_BYTES = 2 * 2 ** 30; // a fixed KV budget (2 << 30 would overflow int32), so GPU memory is the model's and not half the free memory

const USAGE = `usage: node bench/run.js model-table [--only a,b] [--max-bytes SIZE] [--dir DIR] [--threads N] [--device D] [--keep]
  --only       catalog aliases (default: every model with a replica config of at most --max-bytes)
  --max-bytes  largest download size to run (default: a fifth of this machine's memory)
  --dir        work folder for the replicas (default: $RAPID_BENCH_DIR/model-table)
  --threads    CPU threads (default: rapid's)
  --device     cpu or cuda (default: cpu)
  --keep       keep the replicas (reused by the next run)`;

/** What the child measures for one model. */
export interface ModelFigures {
  device: string;
  loadS: number;
  hostRssGB: number; // after load and every measurement (peak resident set of the child)
  gpuGB?: number; // device memory taken by load and the measurements (free-memory drop), KV budget included
  ttftPromptMs: number; // 512-token prompt, after a warm-up request
  ttftImageMs?: number; // one 1024x768 JPEG and a short question, image encode included
  imageTokens?: number;
  decode1: number; // tok/s, one sequence
  decode16: number; // tok/s, 16 sequences together
}

function gpuFreeBytes(device: string): number | undefined {
  if (device !== 'cuda') return undefined;
  return loadNative({ device: 'cuda' }).addon.systemInfo().cuda.devices[0]?.freeBytes;
}

/** Child: loads dir and measures it (see ModelFigures); prints one JSON line. */
async function child(dir: string, device: 'cpu' | 'cuda', threads: number | undefined): Promise<ModelFigures> {
  const free0 = gpuFreeBytes(device);
  const t0 = performance.now();
  const model = openTextModel(dir, { device, kvCacheBytes: KV_BYTES, ...(threads ? { threads } : {}) });
  const loadS = (performance.now() - t0) / 1000;
  try {
    if (model.info.device !== device) throw new Error(`loaded on ${String(model.info.device)}, not ${device}: ${model.info.deviceNote ?? ''}`);
    const vocab = model.info.vocabSize;
    const token = (k: number, salt: number): number => 1000 + ((k * 7919 + salt * 104729) % Math.min(vocab - 1000, 100_000));
    const ids = (n: number, salt: number): number[] => Array.from({ length: n }, (_, k) => token(k, salt));
    const params = resolveSamplingParams({ temperature: 0, maxTokens: 1 }, { maxTokens: 1 });
    await runOneRequest(model, { promptIds: ids(32, 1), params }); // warm-up: pages the weights in
    const first = await runOneRequest(model, { promptIds: ids(PROMPT, 2), params });
    const figures: ModelFigures = { device, loadS, hostRssGB: 0, ttftPromptMs: first.done.timings.ttftMs, decode1: 0, decode16: 0 };
    if (model.vision) {
      const prepared = await model.vision.prepareImageOffThread(await decodeImage(await photoJpeg(1024, 768)));
      const { promptIds, multimodal } = imageChatPrompt(model, [imageUserMessage('What is in this picture?', 1)], [prepared]);
      const r = await runOneRequest(model, { promptIds, params, multimodal });
      figures.ttftImageMs = r.done.timings.ttftMs;
      figures.imageTokens = prepared.tokens;
    }
    for (const c of [1, 16] as const) {
      const o = { concurrency: c, prompt: DECODE_PROMPT, idPrefix: `table-${c}`, promptToken: (row: number, k: number) => token(k, row + 3), sample: GREEDY_SAMPLE };
      await timeDecode(model.native, { ...o, steps: 2 }); // warm-up at this batch size
      const ms = await timeDecode(model.native, { ...o, steps: DECODE_STEPS });
      figures[c === 1 ? 'decode1' : 'decode16'] = (c * DECODE_STEPS * 1000) / ms;
    }
    const free1 = gpuFreeBytes(device);
    if (free0 !== undefined && free1 !== undefined) figures.gpuGB = (free0 - free1) / 1e9;
    figures.hostRssGB = (process.resourceUsage().maxRSS * 1024) / 1e9;
    return figures;
  } finally {
    model.close();
  }
}

interface CatalogModel {
  alias: string;
  sizeBytes: number;
  status: string;
}

const fmt = (x: number | undefined, digits = 1): string => (x === undefined ? '-' : x.toFixed(digits));

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      only: { type: 'string' }, 'max-bytes': { type: 'string' }, dir: { type: 'string' }, threads: { type: 'string' },
      device: { type: 'string', default: 'cpu' }, keep: { type: 'boolean' }, child: { type: 'string' }, help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const device = values.device === 'cuda' ? 'cuda' : values.device === 'cpu' ? 'cpu' : undefined;
  if (device === undefined) throw new Error(`--device ${values.device}: cpu or cuda`);
  const threads = values.threads ? intOption(values.threads, 'threads', 1) : undefined;
  if (values.child) {
    console.log(JSON.stringify(await child(values.child, device, threads)));
    return 0;
  }
  if (!existsSync(MAKE)) throw new Error(`${MAKE} is missing: the model table runs from a rapid checkout`);
  const maxBytes = values['max-bytes'] ? parseByteSize(values['max-bytes']) : totalmem() / 5;
  const only = values.only?.split(',').map((s) => s.trim());
  const { models } = JSON.parse(readFileSync(join(ROOT, 'src', 'models', 'catalog.json'), 'utf8')) as { models: CatalogModel[] };
  const configs = join(ROOT, 'scripts', 'replicas', 'configs');
  // chat models with a replica config (embedding models have no decode to time; replicas.ts tells them by alias too)
  const candidates = models.filter((m) => m.status !== 'retired' && !/embedding/.test(m.alias) && existsSync(join(configs, `${m.alias}.json`)));
  for (const a of only ?? []) if (!candidates.some((m) => m.alias === a)) throw new Error(`--only ${a}: not a catalog chat model with a replica config`);
  const chosen = candidates.filter((m) => (only ? only.includes(m.alias) : m.sizeBytes <= maxBytes));
  const work = values.dir ?? join(defaultBenchDir(), 'model-table');
  mkdirSync(work, { recursive: true });
  console.log(`| model | status | load s | host GB | GPU GB | TTFT 512 ms | TTFT image ms (tokens) | tok/s x1 | tok/s x16 |`);
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  let ok = true;
  for (const m of chosen) {
    const dir = join(work, m.alias);
    const stamp = `${dir}.complete`;
    try {
      if (!existsSync(stamp)) {
        rmSync(dir, { recursive: true, force: true });
        const made = spawnSync(process.execPath, [MAKE, m.alias, '--out', dir], { encoding: 'utf8', timeout: STEP_MS });
        if (made.status !== 0) throw new Error(`make-replica: ${made.stderr.trim().split('\n').slice(-2).join(' / ')}`);
        writeFileSync(stamp, '');
      }
      const args = [join(ROOT, 'bench', 'run.js'), 'model-table', '--child', dir, '--device', device, ...(threads ? ['--threads', String(threads)] : [])];
      const run = spawnSync(process.execPath, args, { encoding: 'utf8', timeout: STEP_MS });
      if (run.status !== 0) throw new Error((run.stderr || run.stdout).trim().split('\n').slice(-2).join(' / ') || `exit ${run.status}`);
      const f = JSON.parse(run.stdout.trim().split('\n').at(-1)!) as ModelFigures;
      const image = f.ttftImageMs === undefined ? '-' : `${fmt(f.ttftImageMs, 0)} (${f.imageTokens})`;
      console.log(`| ${m.alias} | ${m.status} | ${fmt(f.loadS)} | ${fmt(f.hostRssGB)} | ${fmt(f.gpuGB)} | ${fmt(f.ttftPromptMs, 0)} | ${image} | ${fmt(f.decode1)} | ${fmt(f.decode16)} |`);
    } catch (err) {
      ok = false;
      console.log(`| ${m.alias} | ${m.status} | FAILED: ${(err as Error).message} | | | | | | |`);
    } finally {
      if (!values.keep) {
        rmSync(dir, { recursive: true, force: true });
        rmSync(stamp, { force: true });
      }
    }
  }
  const skipped = candidates.filter((m) => !chosen.includes(m)).map((m) => m.alias);
  if (skipped.length) console.log(`\nnot run (${only ? 'not in --only' : `over --max-bytes ${(maxBytes / 1e9).toFixed(1)} GB`}): ${skipped.join(', ')}`);
  return ok ? 0 : 1;
}
