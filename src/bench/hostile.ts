// Hostile-input benchmark: `rapid serve` runs in a child process while this one sends, one at a time, the
// heavy or malicious requests of issue 38 and probes /health every few ms meanwhile. Per case: the heavy
// request's status and time, /health's worst and p99 latency while it ran, and whether a plain and a
// schema-constrained request still succeed afterwards. The server is a separate process so a stalled
// event loop there shows as probe latency here.
import { spawn, type ChildProcess } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

interface Case {
  name: string;
  body: () => unknown;
  /** Raw text instead of JSON.stringify(body) (bodies too deep for the serializer's stack). */
  raw?: () => string;
  path?: string;
}

interface CaseResult {
  name: string;
  status: number | string;
  ms: number;
  healthMaxMs: number;
  healthP99Ms: number;
  probes: number;
  afterPlain: number | string;
  afterSchema: number | string;
}

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const chat = (content: string, extra: Record<string, unknown> = {}) => ({ messages: [{ role: 'user', content }], max_tokens: 8, temperature: 0, ...extra });
const schemaFormat = (schema: unknown) => ({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } });

function deepSchema(depth: number): unknown {
  let s: unknown = { type: 'string' };
  for (let i = 0; i < depth; i++) s = { type: 'object', properties: { a: s }, required: ['a'] };
  return s;
}

function nested(depth: number, leaf: string, open: string, close: string): string {
  return open.repeat(depth) + leaf + close.repeat(depth);
}

function cases(contextTokens: number): Case[] {
  const props: Record<string, unknown> = {};
  for (let i = 0; i < 10_000; i++) props[`p${i}`] = { type: 'integer' };
  return [
    { name: 'schema 60 levels deep', body: () => chat('hi', schemaFormat(deepSchema(60))) },
    { name: 'schema 10,000 properties', body: () => chat('hi', schemaFormat({ type: 'object', properties: props })) },
    { name: 'enum of 100,000 values', body: () => chat('hi', schemaFormat({ type: 'object', properties: { e: { enum: Array.from({ length: 100_000 }, (_, i) => `v${i}`) } } })) },
    { name: 'recursive $ref', body: () => chat('hi', schemaFormat({ $ref: '#' })) },
    { name: '$defs cycle', body: () => chat('hi', schemaFormat({ $defs: { a: { $ref: '#/$defs/b' }, b: { $ref: '#/$defs/a' } }, $ref: '#/$defs/a' })) },
    { name: 'const nested 5,000 deep', body: () => ({}), raw: () => `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"const":${nested(5000, '1', '[', ']')}}}}}` },
    { name: 'prompt array 10,000 deep', path: '/v1/completions', body: () => ({}), raw: () => `{"prompt":${nested(10_000, '1', '[', ']')},"max_tokens":4}` },
    { name: 'top_k 1e10', body: () => chat('hi', { top_k: 1e10, temperature: 0.7 }) },
    { name: '100,000 messages', body: () => ({ messages: Array.from({ length: 100_000 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'hello there' })), max_tokens: 4 }) },
    { name: '7 MB of content', body: () => chat('word '.repeat(1_400_000)) },
    { name: `prompt of ${contextTokens - 1} tokens`, path: '/v1/completions', body: () => ({ prompt: Array.from({ length: contextTokens - 1 }, (_, i) => i % 900), max_tokens: 1 }) },
  ];
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

async function timed(url: string, init: RequestInit, timeoutMs: number): Promise<{ status: number | string; ms: number }> {
  const t0 = performance.now();
  try {
    const res = await fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
    await res.arrayBuffer();
    return { status: res.status, ms: performance.now() - t0 };
  } catch (err) {
    return { status: (err as Error).name === 'TimeoutError' ? 'timeout' : 'dropped', ms: performance.now() - t0 };
  }
}

const post = (base: string, path: string, body: string) => ({ url: `${base}${path}`, init: { method: 'POST', headers: { 'content-type': 'application/json' }, body } });

async function runCase(base: string, c: Case, timeoutMs: number): Promise<CaseResult> {
  const body = c.raw ? c.raw() : JSON.stringify(c.body());
  const { url, init } = post(base, c.path ?? '/v1/chat/completions', body);
  const lat: number[] = [];
  let done = false;
  const probe = (async () => {
    while (!done) {
      const r = await timed(`${base}/health`, {}, 30_000);
      lat.push(r.ms);
      await new Promise((res) => setTimeout(res, 10));
    }
  })();
  const heavy = await timed(url, init, timeoutMs);
  done = true;
  await probe;
  lat.sort((a, b) => a - b);
  const plain = post(base, '/v1/chat/completions', JSON.stringify(chat('hello')));
  const schema = post(base, '/v1/chat/completions', JSON.stringify(chat('hello', schemaFormat({ type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] }))));
  const [p, s] = await Promise.all([timed(plain.url, plain.init, timeoutMs), timed(schema.url, schema.init, timeoutMs)]);
  return {
    name: c.name,
    status: heavy.status,
    ms: heavy.ms,
    healthMaxMs: lat.at(-1) ?? NaN,
    healthP99Ms: lat[Math.min(lat.length - 1, Math.floor(lat.length * 0.99))] ?? NaN,
    probes: lat.length,
    afterPlain: p.status,
    afterSchema: s.status,
  };
}

async function startChild(model: string, port: number, extra: string[]): Promise<ChildProcess> {
  const child = spawn(process.execPath, [join(ROOT, 'bin/rapid.js'), 'serve', model, '--port', String(port), ...extra], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr!.on('data', (d: Buffer) => (log += d.toString()));
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`rapid serve exited (${child.exitCode}): ${log}`);
    const r = await timed(`http://127.0.0.1:${port}/health`, {}, 1000);
    if (r.status === 200) return child;
    await new Promise((res) => setTimeout(res, 200));
  }
  child.kill('SIGKILL');
  throw new Error(`rapid serve did not come up: ${log}`);
}

/**
 * A copy of the model whose chat template, only when the last message says HANG, asks for range(10^8)
 * (one huge array) or, when it says SPIN, loops 10^10 times over small ranges (only a time limit stops it).
 */
function hangingTemplateCopy(model: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'rapid-hostile-'));
  cpSync(model, dir, { recursive: true });
  const file = join(dir, 'tokenizer_config.json');
  const cfg = JSON.parse(readFileSync(file, 'utf8')) as { chat_template?: string };
  const loop =
    "{% if 'HANG' in messages[-1]['content'] %}{% for i in range(100000000) %}{% endfor %}{% endif %}" +
    "{% if 'SPIN' in messages[-1]['content'] %}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{% endif %}";
  cfg.chat_template = loop + (cfg.chat_template ?? "{% for m in messages %}{{ m['content'] }}{% endfor %}");
  writeFileSync(file, JSON.stringify(cfg));
  return dir;
}

function table(rows: CaseResult[]): string {
  const head = ['case', 'status', 'time ms', '/health max ms', '/health p99 ms', 'probes', 'then plain', 'then schema'];
  const body = rows.map((r) => [r.name, String(r.status), r.ms.toFixed(0), r.healthMaxMs.toFixed(1), r.healthP99Ms.toFixed(1), String(r.probes), String(r.afterPlain), String(r.afterSchema)]);
  const w = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(w[i]!) : c.padStart(w[i]!))).join('  ');
  return [line(head), ...body.map(line)].join('\n');
}

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      model: { type: 'string', default: join(ROOT, 'test/fixtures/models/qwen2-q4') },
      timeout: { type: 'string', default: '120' },
      only: { type: 'string' },
      json: { type: 'string' },
    },
  });
  const model = values.model!;
  const timeoutMs = Number(values.timeout) * 1000;
  const cfg = JSON.parse(readFileSync(join(model, 'config.json'), 'utf8')) as { max_position_embeddings?: number; text_config?: { max_position_embeddings?: number } };
  const context = cfg.max_position_embeddings ?? cfg.text_config?.max_position_embeddings ?? 4096;
  const hanging = hangingTemplateCopy(model);
  const all: Case[] = [...cases(context)];
  const results: CaseResult[] = [];
  const only = values.only ? new RegExp(values.only, 'i') : null;
  try {
    for (const [dir, list] of [
      [model, all],
      [hanging, [{ name: 'template range(100000000)', body: () => chat('HANG') }, { name: 'template 10^10 loop', body: () => chat('SPIN') }]],
    ] as const) {
      const chosen = list.filter((c) => !only || only.test(c.name));
      if (chosen.length === 0) continue;
      const port = await freePort();
      let child: ChildProcess;
      try {
        child = await startChild(dir, port, ['--kv-cache-memory', '256MiB']);
      } catch (err) {
        // A template that hangs may be refused at load: that is a pass for the template case.
        process.stderr.write(`${(err as Error).message.slice(0, 400)}\n`);
        results.push({ name: chosen[0]!.name, status: 'refused at load', ms: 0, healthMaxMs: 0, healthP99Ms: 0, probes: 0, afterPlain: '-', afterSchema: '-' });
        continue;
      }
      try {
        for (const c of chosen) {
          const r = await runCase(`http://127.0.0.1:${port}`, c, timeoutMs);
          results.push(r);
          process.stderr.write(`${r.name}: ${r.status} in ${r.ms.toFixed(0)} ms, /health max ${r.healthMaxMs.toFixed(1)} ms\n`);
          if (child.exitCode !== null) throw new Error(`the server died during "${c.name}"`);
        }
      } finally {
        child.kill('SIGKILL');
      }
    }
  } finally {
    rmSync(hanging, { recursive: true, force: true });
  }
  process.stdout.write(`${table(results)}\n`);
  if (values.json) writeFileSync(values.json, JSON.stringify(results, null, 2));
  const bad = results.filter((r) => (typeof r.status === 'number' && r.status >= 500) || r.status === 'timeout' || r.status === 'dropped' || (r.afterPlain !== '-' && (r.afterPlain !== 200 || r.afterSchema !== 200)));
  return bad.length === 0 ? 0 : 1;
}
