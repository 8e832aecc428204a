// `node bench/run.js replicas` (after `npm run compile`): every catalog model as a user meets it, at full
// size. For each: build the replica (scripts/replicas/make-replica.mjs), serve it from a local hub with its
// repository's file list, then time `rapid models pull`, `rapid run` and `rapid serve` + a json_schema chat
// completion (VLMs: `run --image photo.jpg --schema`, and the chat turn carries the photo; embedding models:
// /v1/embeddings). `planned` entries are pulled by alias (allowed) and run and served from the pulled snapshot's
// path (their alias is refused): a load check. Weights are random: this checks download, cache, load and first
// answer at the real shapes, not text quality. See docs/replicas.md.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { parseByteSize } from '../cli/commands/serve.js';
import { intOption } from './bench-options.js';
import { cachedSnapshot } from '../models/hf-cache.js';
import { defaultBenchDir } from './random-checkpoint.js';
import { ReplicaHub } from './replica-hub.js';
import { checkPick, firstAnswer, photoJpeg, RAPID_BIN, runCli, SCHEMA, serveCli } from './replica-steps.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const MAKE = join(ROOT, 'scripts', 'replicas', 'make-replica.mjs');
const STEP_MS = 20 * 60_000; // one step of the largest model (16 GB) on a slow disk

const USAGE = `usage: node bench/run.js replicas [--only a,b] [--max-bytes SIZE] [--dir DIR] [--threads N] [--device D] [--keep]
  --only       catalog aliases to run (default: every model with a replica config of at most --max-bytes)
  --max-bytes  largest download size to run (default: a tenth of this machine's memory)
  --dir        work folder for replicas and the hub cache (default: $RAPID_BENCH_DIR/replicas)
  --threads    CPU threads for rapid run / serve (default: rapid's)
  --device     cpu, cuda or cuda:N (default: rapid's auto)
  --keep       keep the replicas (reused by the next run) and the caches`;

interface CatalogModel {
  alias: string;
  repo: string;
  modalities: string[];
  status: string;
  sizeBytes: number;
}

interface Row {
  alias: string;
  bytes: number;
  steps: Record<string, number>; // seconds
  detail: string;
  ok: boolean;
}

interface Inputs {
  photo: string; // photo.jpg path
  photoBytes: Buffer;
  schema: string; // schema.json path
}

async function benchOne(m: CatalogModel, hub: ReplicaHub, work: string, rapidArgs: string[], keep: boolean, inputs: Inputs): Promise<Row> {
  const row: Row = { alias: m.alias, bytes: m.sizeBytes, steps: {}, detail: m.status === 'planned' ? 'planned, by path: ' : '', ok: false };
  const replica = join(work, m.alias);
  const stamp = `${replica}.complete`; // beside the folder: the hub serves every file inside it
  const home = join(work, `hf-${m.alias}`);
  const env: NodeJS.ProcessEnv = { ...process.env, HF_HOME: home, HF_ENDPOINT: hub.url, XDG_CONFIG_HOME: join(home, 'config') };
  for (const k of ['HF_HUB_CACHE', 'HF_HUB_OFFLINE', 'HF_TOKEN', 'RAPID_API_KEY']) delete env[k];
  const tail = (text: string): string => text.trim().split('\n').slice(-3).join(' / ');
  const fail = (step: string, text: string): Row => ((row.detail += `${step}: ${tail(text)}`), row);
  let runOk = true;
  try {
    if (!existsSync(stamp)) {
      rmSync(replica, { recursive: true, force: true });
      const made = await runCli(MAKE, [m.alias, '--out', replica], process.env, STEP_MS);
      row.steps.generate = made.seconds;
      if (made.code !== 0) return fail('generate', made.err);
      writeFileSync(stamp, 'ok\n');
    }
    let t0 = performance.now();
    await hub.addRepo(m.repo, replica);
    row.steps.hash = (performance.now() - t0) / 1000;
    const pull = await runCli(RAPID_BIN, ['models', 'pull', m.alias], env, STEP_MS);
    row.steps.pull = pull.seconds;
    if (pull.code !== 0) return fail('pull', pull.err);
    const embedding = /embedding/.test(m.alias);
    const vision = m.modalities.includes('image');
    // run/serve refuse a planned alias; the pulled snapshot's path loads the same files
    let target = m.alias;
    if (m.status === 'planned') {
      const snap = cachedSnapshot(join(home, 'hub'), m.repo, 'main');
      if (!snap) return fail('pull', `no snapshot of ${m.repo} in ${home}`);
      target = snap;
    }
    if (!embedding) {
      const ask = vision ? ['-p', 'Which colour dominates the photo, and how many squares?', '-n', '32', '--image', inputs.photo, '--schema', inputs.schema] : ['-p', 'Name a colour.', '-n', '16'];
      const run = await runCli(RAPID_BIN, ['run', target, ...ask, '-t', '0', '--json', ...rapidArgs], env, STEP_MS);
      row.steps.run = run.seconds;
      // a failed run still lets serve show whether the model loads and answers
      runOk = run.code === 0;
      if (runOk) {
        const r = JSON.parse(run.out) as { text: string; finish_reason: string; usage: { completion_tokens: number }; images?: { tokens: number }[] };
        if (vision) checkPick(r.text);
        row.detail += `run: ${r.usage.completion_tokens} tokens (${r.finish_reason})${vision ? `, image of ${r.images?.[0]?.tokens} tokens, ${r.text}` : ''}; `;
      } else row.detail += `run FAILED: ${tail(run.err)}; `;
    }
    t0 = performance.now();
    // the step watchdog bounds one image encode too: a full-size tower on a slow shared CPU needs more than 120 s
    const s = await serveCli([target, '--served-model-name', m.alias, '--step-timeout', String(STEP_MS / 1000), ...rapidArgs], env, STEP_MS);
    try {
      if (!s.url) return fail('serve', s.err());
      row.steps.serveReady = (performance.now() - t0) / 1000;
      row.detail += `serve: ${await firstAnswer(s.url, m.alias, embedding, STEP_MS, vision ? inputs.photoBytes : undefined)}`;
      row.steps.firstAnswer = (performance.now() - t0) / 1000;
    } finally {
      s.child.kill('SIGTERM');
    }
    row.ok = runOk;
    return row;
  } catch (err) {
    return fail('error', err instanceof Error ? err.message : String(err));
  } finally {
    hub.removeRepo(m.repo);
    rmSync(home, { recursive: true, force: true });
    if (!keep) {
      rmSync(replica, { recursive: true, force: true });
      rmSync(stamp, { force: true });
    }
  }
}

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: { only: { type: 'string' }, 'max-bytes': { type: 'string' }, dir: { type: 'string' }, threads: { type: 'string' }, device: { type: 'string' }, keep: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  if (!existsSync(MAKE)) throw new Error(`${MAKE} is missing: bench:replicas runs from a rapid checkout (scripts/ is not in the package)`);
  const maxBytes = values['max-bytes'] ? parseByteSize(values['max-bytes']) : totalmem() / 10; // rapid holds the weights once, plus KV cache and the run/serve peaks
  const only = values.only?.split(',').map((s) => s.trim());
  const { models } = JSON.parse(readFileSync(join(ROOT, 'src', 'models', 'catalog.json'), 'utf8')) as { models: CatalogModel[] };
  const configs = join(ROOT, 'scripts', 'replicas', 'configs');
  // every supported or planned entry with a replica config (the embedded tiny models have none)
  const candidates = models.filter((m) => m.status !== 'retired' && existsSync(join(configs, `${m.alias}.json`)));
  for (const a of only ?? []) if (!candidates.some((m) => m.alias === a)) throw new Error(`--only ${a}: not a catalog model with a replica config`);
  const chosen = candidates.filter((m) => (only ? only.includes(m.alias) : m.sizeBytes <= maxBytes));
  const skipped = candidates.filter((m) => !chosen.includes(m)).map((m) => m.alias);
  const rapidArgs = [...(values.threads ? ['--threads', String(intOption(values.threads, 'threads', 1))] : []), ...(values.device ? ['--device', values.device] : [])];
  const work = values.dir ?? join(defaultBenchDir(), 'replicas');
  mkdirSync(work, { recursive: true });
  const inputs: Inputs = { photo: join(work, 'photo.jpg'), photoBytes: await photoJpeg(), schema: join(work, 'schema.json') };
  writeFileSync(inputs.photo, inputs.photoBytes);
  writeFileSync(inputs.schema, JSON.stringify(SCHEMA));

  const hub = new ReplicaHub();
  await hub.start();
  const rows: Row[] = [];
  const secs = (r: Row, k: string) => (r.steps[k] === undefined ? '-' : r.steps[k]!.toFixed(1));
  // one row per model as soon as it is done: a long run interrupted still leaves its figures
  console.log('| model | size GB | generate s | hash s | pull s | run s | serve ready s | first answer s | result |');
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  try {
    for (const m of chosen) {
      console.error(`replicas: ${m.alias} (${(m.sizeBytes / 1e9).toFixed(2)} GB) ...`);
      const r = await benchOne(m, hub, work, rapidArgs, values.keep === true, inputs);
      rows.push(r);
      console.log(`| ${r.alias} | ${(r.bytes / 1e9).toFixed(2)} | ${secs(r, 'generate')} | ${secs(r, 'hash')} | ${secs(r, 'pull')} | ${secs(r, 'run')} | ${secs(r, 'serveReady')} | ${secs(r, 'firstAnswer')} | ${r.ok ? 'ok' : 'FAILED'}: ${r.detail} |`);
    }
  } finally {
    await hub.stop();
  }
  const why = only ? 'not in --only' : `over --max-bytes ${(maxBytes / 1e9).toFixed(1)} GB`;
  if (skipped.length) console.log(`\nnot run (${why}): ${skipped.join(', ')}`);
  return rows.every((r) => r.ok) ? 0 : 1;
}
