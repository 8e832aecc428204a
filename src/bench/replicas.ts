// `node bench/run.js replicas` (after `npm run compile`): every text catalog model as a user meets it, at full
// size. For each: build the replica (scripts/replicas/make-replica.mjs), serve it from a local hub with its
// repository's file list, then time `rapid models pull`, `rapid run` and `rapid serve` + a json_schema chat
// completion (embedding models: /v1/embeddings). Weights are random: this checks download, cache, load and
// first answer at the real shapes, not text quality. See docs/replicas.md.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { parseByteSize } from '../cli/commands/serve.js';
import { intOption } from './bench-options.js';
import { defaultBenchDir } from './random-checkpoint.js';
import { ReplicaHub } from './replica-hub.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const BIN = join(ROOT, 'bin', 'rapid.js');
const MAKE = join(ROOT, 'scripts', 'replicas', 'make-replica.mjs');
const STEP_MS = 20 * 60_000; // one step of the largest model (16 GB) on a slow disk

const USAGE = `usage: node bench/run.js replicas [--only a,b] [--max-bytes SIZE] [--dir DIR] [--threads N] [--device D] [--keep]
  --only       catalog aliases to run (default: every text model of at most --max-bytes)
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

interface Exit {
  code: number | null;
  out: string;
  err: string;
  seconds: number;
}

function cli(file: string, args: string[], env: NodeJS.ProcessEnv): Promise<Exit> {
  const t0 = performance.now();
  const child = spawn(process.execPath, [file, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise((ok) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), STEP_MS);
    child.on('exit', (code) => (clearTimeout(timer), ok({ code, out, err, seconds: (performance.now() - t0) / 1000 })));
  });
}

/** `rapid serve` until it logs its URL; resolves with the URL or the reason it has none. */
function serve(args: string[], env: NodeJS.ProcessEnv): Promise<{ child: ChildProcess; url?: string; err: () => string }> {
  const child = spawn(process.execPath, [BIN, 'serve', '--port', '0', ...args], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  return new Promise((ok) => {
    const timer = setTimeout(() => (child.kill('SIGKILL'), ok({ child, err: () => `${err}\nno URL within ${STEP_MS / 1000} s` })), STEP_MS);
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      const m = /serving .* on (http:\/\/[^\s]+)\/v1/.exec(err);
      if (m) (clearTimeout(timer), ok({ child, url: m[1]!, err: () => err }));
    });
    child.on('exit', () => (clearTimeout(timer), ok({ child, err: () => err })));
  });
}

const SCHEMA = {
  type: 'object',
  properties: { colour: { enum: ['red', 'green', 'blue'] }, count: { type: 'integer', minimum: 0, maximum: 9 } },
  required: ['colour', 'count'],
  additionalProperties: false,
};

async function post(url: string, body: unknown): Promise<{ status: number; json: unknown }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(STEP_MS) });
  return { status: res.status, json: await res.json() };
}

/** The first answer over HTTP: a constrained chat completion that must parse and match, or an embedding. */
async function firstAnswer(url: string, alias: string, embedding: boolean): Promise<string> {
  if (embedding) {
    const r = await post(`${url}/v1/embeddings`, { model: alias, input: ['a full-size replica'] });
    const dims = (r.json as { data?: { embedding: number[] }[] }).data?.[0]?.embedding.length;
    if (r.status !== 200 || !dims) throw new Error(`/v1/embeddings answered ${r.status}: ${JSON.stringify(r.json).slice(0, 300)}`);
    return `embedding of ${dims}`;
  }
  const r = await post(`${url}/v1/chat/completions`, {
    model: alias,
    messages: [{ role: 'user', content: 'Pick a colour and a count.' }],
    max_tokens: 32,
    temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 'pick', strict: true, schema: SCHEMA } },
  });
  const content = (r.json as { choices?: { message: { content: string } }[] }).choices?.[0]?.message.content;
  if (r.status !== 200 || content === undefined) throw new Error(`/v1/chat/completions answered ${r.status}: ${JSON.stringify(r.json).slice(0, 300)}`);
  const v = JSON.parse(content) as { colour?: unknown; count?: unknown };
  if (!['red', 'green', 'blue'].includes(v.colour as string) || !Number.isInteger(v.count)) throw new Error(`json_schema output does not match: ${content}`);
  return `json ${content}`;
}

async function benchOne(m: CatalogModel, hub: ReplicaHub, work: string, rapidArgs: string[], keep: boolean): Promise<Row> {
  const row: Row = { alias: m.alias, bytes: m.sizeBytes, steps: {}, detail: '', ok: false };
  const replica = join(work, m.alias);
  const stamp = `${replica}.complete`; // beside the folder: the hub serves every file inside it
  const home = join(work, `hf-${m.alias}`);
  const env: NodeJS.ProcessEnv = { ...process.env, HF_HOME: home, HF_ENDPOINT: hub.url, XDG_CONFIG_HOME: join(home, 'config') };
  for (const k of ['HF_HUB_CACHE', 'HF_HUB_OFFLINE', 'HF_TOKEN', 'RAPID_API_KEY']) delete env[k];
  const fail = (step: string, text: string): Row => ((row.detail = `${step}: ${text.trim().split('\n').slice(-3).join(' | ')}`), row);
  try {
    if (!existsSync(stamp)) {
      rmSync(replica, { recursive: true, force: true });
      const made = await cli(MAKE, [m.alias, '--out', replica], process.env);
      row.steps.generate = made.seconds;
      if (made.code !== 0) return fail('generate', made.err);
      writeFileSync(stamp, 'ok\n');
    }
    let t0 = performance.now();
    await hub.addRepo(m.repo, replica);
    row.steps.hash = (performance.now() - t0) / 1000;
    const pull = await cli(BIN, ['models', 'pull', m.alias], env);
    row.steps.pull = pull.seconds;
    if (pull.code !== 0) return fail('pull', pull.err);
    const embedding = /embedding/.test(m.alias);
    if (!embedding) {
      const run = await cli(BIN, ['run', m.alias, '-p', 'Name a colour.', '-n', '16', '-t', '0', '--json', ...rapidArgs], env);
      row.steps.run = run.seconds;
      if (run.code !== 0) return fail('run', run.err);
      const r = JSON.parse(run.out) as { finish_reason: string; usage: { completion_tokens: number } };
      row.detail = `run: ${r.usage.completion_tokens} tokens (${r.finish_reason}); `;
    }
    t0 = performance.now();
    const s = await serve([m.alias, ...rapidArgs], env);
    try {
      if (!s.url) return fail('serve', s.err());
      row.steps.serveReady = (performance.now() - t0) / 1000;
      row.detail += `serve: ${await firstAnswer(s.url, m.alias, embedding)}`;
      row.steps.firstAnswer = (performance.now() - t0) / 1000;
    } finally {
      s.child.kill('SIGTERM');
    }
    row.ok = true;
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
  const maxBytes = values['max-bytes'] ? parseByteSize(values['max-bytes']) : totalmem() / 10; // rapid holds the weights once, plus KV cache and the run/serve peaks
  const only = values.only?.split(',').map((s) => s.trim());
  const { models } = JSON.parse(readFileSync(join(ROOT, 'src', 'models', 'catalog.json'), 'utf8')) as { models: CatalogModel[] };
  const configs = join(ROOT, 'scripts', 'replicas', 'configs');
  const text = models.filter((m) => m.status === 'supported' && m.modalities.join() === 'text' && existsSync(join(configs, `${m.alias}.json`)));
  for (const a of only ?? []) if (!text.some((m) => m.alias === a)) throw new Error(`--only ${a}: not a text catalog model with a replica config`);
  const chosen = text.filter((m) => (only ? only.includes(m.alias) : m.sizeBytes <= maxBytes));
  const skipped = text.filter((m) => !chosen.includes(m)).map((m) => m.alias);
  const rapidArgs = [...(values.threads ? ['--threads', String(intOption(values.threads, 'threads', 1))] : []), ...(values.device ? ['--device', values.device] : [])];
  const work = values.dir ?? join(defaultBenchDir(), 'replicas');
  mkdirSync(work, { recursive: true });

  const hub = new ReplicaHub();
  await hub.start();
  const rows: Row[] = [];
  try {
    for (const m of chosen) {
      console.error(`replicas: ${m.alias} (${(m.sizeBytes / 1e9).toFixed(2)} GB) ...`);
      const row = await benchOne(m, hub, work, rapidArgs, values.keep === true);
      rows.push(row);
      console.error(`replicas: ${m.alias} ${row.ok ? 'ok' : 'FAILED'}: ${row.detail}`);
    }
  } finally {
    await hub.stop();
  }
  const secs = (r: Row, k: string) => (r.steps[k] === undefined ? '-' : r.steps[k]!.toFixed(1));
  console.log('| model | size GB | generate s | hash s | pull s | run s | serve ready s | first answer s | result |');
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  for (const r of rows) {
    console.log(`| ${r.alias} | ${(r.bytes / 1e9).toFixed(2)} | ${secs(r, 'generate')} | ${secs(r, 'hash')} | ${secs(r, 'pull')} | ${secs(r, 'run')} | ${secs(r, 'serveReady')} | ${secs(r, 'firstAnswer')} | ${r.ok ? 'ok' : 'FAILED'}: ${r.detail} |`);
  }
  const why = only ? 'not in --only' : `over --max-bytes ${(maxBytes / 1e9).toFixed(1)} GB`;
  if (skipped.length) console.log(`\nnot run (${why}): ${skipped.join(', ')}`);
  return rows.every((r) => r.ok) ? 0 : 1;
}
