#!/usr/bin/env node
// `rapid serve` over real HTTP on a chosen device (CUDA on a GPU machine, or the CPU), the way a client sees
// it. Imports only node: builtins and uses the global fetch, so it runs with a bare `node` next to the
// project's production node_modules (the server needs them; this script does not). Per model it starts
// `node bin/rapid.js serve MODEL --device D` on a free port and checks:
//   start   the server comes up and /v1/status reports the device asked for;
//   chat    a greedy chat completion has text, usage and a finish reason;
//   stream  the same request streamed: SSE chunks ending in [DONE], the same text;
//   batch   N distinct greedy prompts alone, then all at once: the same texts (batch invariance over HTTP);
//   seeded  the same with seeded sampling (top-p, top-k, min-p, penalties, logprobs): alone == all at once;
//   run     `rapid run --json` on the same device, greedy and seeded: the same text as the server (one engine);
//   schema  json_schema requests mixed with plain ones, all at once: every constrained reply parses and
//           validates against its schema, every plain reply equals its solo run;
//   errors  a malformed body, an unknown model, a negative max_tokens, an invalid schema and empty messages are
//           4xx with a message, and the server answers the next request;
//   abort   a stream dropped after its first chunk: the server frees the request (running back to 0) and
//           serves the next one;
//   load    32 concurrent requests, greedy then sampled (reported: aggregate completion tok/s of each).
// Usage: node test/cuda/serve-checks.mjs [--device cuda|cpu] [--model DIR]... [--precision fast|exact]
//          [--requests N] [--threads N] [--json OUT]
// Default models: test/fixtures/models/qwen2-q4 and gemma3-q4. Prints one PASS/FAIL/INFO line per check, then
// 'N passed, M failed'; exits 1 on any failure.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { schemaViolation } from '../grammar/json-schema-check.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, '..', '..');
const MODEL_ROOT = join(ROOT, 'test', 'fixtures', 'models');
const START_TIMEOUT_MS = 180_000;
const REQUEST_TIMEOUT_MS = 120_000;
const WORDS = ['river', 'stone', 'cloud', 'market', 'engine', 'yellow', 'quiet', 'seven', 'garden', 'paper', 'north', 'silver'];

// The schemas of test/grammar/structured-output.test.ts: enums, bounded integers, nesting, arrays, null.
const SCHEMAS = JSON.parse(readFileSync(join(ROOT, 'test', 'grammar', 'mixed-schemas.json'), 'utf8'));

// ---------------------------------------------------------------- options

function parseArgs(argv) {
  const o = { device: 'cuda', models: [], precision: 'fast', requests: 8, threads: 0, json: '' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--device') o.device = val();
    else if (a === '--model') o.models.push(resolve(val()));
    else if (a === '--precision') o.precision = val();
    else if (a === '--requests') o.requests = Number(val());
    else if (a === '--threads') o.threads = Number(val());
    else if (a === '--json') o.json = resolve(val());
    else if (a === '--help' || a === '-h') {
      process.stdout.write(`${readUsage()}\n`);
      process.exit(0);
    } else throw new Error(`unknown option ${a}`);
  }
  if (o.device !== 'cuda' && o.device !== 'cpu') throw new Error(`--device must be cuda or cpu, got ${o.device}`);
  if (o.precision !== 'fast' && o.precision !== 'exact') throw new Error(`--precision must be fast or exact, got ${o.precision}`);
  if (!Number.isInteger(o.requests) || o.requests < 2) throw new Error('--requests must be an integer >= 2');
  if (!Number.isInteger(o.threads) || o.threads < 0) throw new Error('--threads must be a non-negative integer');
  if (o.models.length === 0) o.models = ['qwen2-q4', 'gemma3-q4'].map((m) => join(MODEL_ROOT, m));
  for (const m of o.models) if (!existsSync(join(m, 'config.json'))) throw new Error(`--model ${m}: no config.json there`);
  return o;
}

function readUsage() {
  return 'usage: node test/cuda/serve-checks.mjs [--device cuda|cpu] [--model DIR]... [--precision fast|exact] [--requests N] [--threads N] [--json OUT]';
}

// ---------------------------------------------------------------- reporting

const results = [];
function report(kind, name, detail = '') {
  results.push({ kind, name, detail });
  process.stdout.write(`${kind} ${name}${detail ? ` ${detail}` : ''}\n`);
}
const pass = (name, detail) => report('PASS', name, detail);
const fail = (name, detail) => report('FAIL', name, detail);
const info = (name, detail) => report('INFO', name, detail);

/** Runs one check: a thrown error (or a returned failure string) is its FAIL line, never the end of the run. */
async function check(name, fn) {
  try {
    const problem = await fn();
    if (typeof problem === 'string' && problem !== '') fail(name, problem);
    else pass(name, typeof problem === 'object' && problem?.detail ? problem.detail : '');
  } catch (err) {
    fail(name, err instanceof Error ? err.message : String(err));
  }
}

// ---------------------------------------------------------------- the server

function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}

/** Starts `rapid serve`; resolves with its base URL once it logs "serving ... on URL/v1", rejects if it exits first. */
async function startServer(model, o) {
  const port = await freePort();
  const args = [join(ROOT, 'bin', 'rapid.js'), 'serve', model, '--device', o.device, '--host', '127.0.0.1', '--port', String(port)];
  args.push('--precision', o.precision, '--served-model-name', 'm', '--kv-cache-memory', '96MiB', '--block-size', '16');
  args.push('--max-num-seqs', '32', '--max-batched-tokens', '512', '--shutdown-grace', '2');
  if (o.threads > 0) args.push('--threads', String(o.threads));
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  const onData = (d) => {
    log += d.toString();
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  const url = await new Promise((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`no "serving" line within ${START_TIMEOUT_MS / 1000} s:\n${tail(log)}`)), START_TIMEOUT_MS);
    const poll = setInterval(() => {
      const m = /serving \S+ on (http:\/\/\S+)\/v1/.exec(log);
      if (m) {
        clearInterval(poll);
        clearTimeout(timer);
        res(m[1]);
      }
    }, 50);
    child.once('exit', (code, sig) => {
      clearInterval(poll);
      clearTimeout(timer);
      rej(new Error(`rapid serve exited (${code ?? sig}) before serving:\n${tail(log)}`));
    });
  });
  return { url, child, log: () => log };
}

async function stopServer(srv) {
  if (srv.child.exitCode !== null) return;
  const exited = new Promise((res) => srv.child.once('exit', res));
  srv.child.kill('SIGTERM');
  const timer = setTimeout(() => srv.child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

const tail = (s, n = 12) => s.trim().split('\n').slice(-n).join('\n');

// ---------------------------------------------------------------- HTTP

async function post(url, body, signal) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal: signal ?? AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  return res;
}

async function getJson(url) {
  const res = await fetch(url, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
  if (res.status !== 200) throw new Error(`GET ${url}: ${res.status} ${await res.text()}`);
  return res.json();
}

function chatBody(prompt, extra = {}) {
  return { model: 'm', messages: [{ role: 'user', content: prompt }], temperature: 0, max_tokens: 12, ...extra };
}

/** A non-streamed chat completion: { text, finish, usage }; a non-200 reply is an error naming status and body. */
async function chat(base, body) {
  const res = await post(`${base}/v1/chat/completions`, body);
  const text = await res.text();
  if (res.status !== 200) throw new Error(`chat: ${res.status} ${text.slice(0, 300)}`);
  const j = JSON.parse(text);
  const choice = j.choices?.[0];
  if (!choice || typeof choice.message?.content !== 'string') throw new Error(`chat: no message content in ${text.slice(0, 300)}`);
  return { text: choice.message.content, finish: choice.finish_reason, usage: j.usage };
}

/** A streamed chat completion: its deltas joined, the finish reason, and whether the stream ended with [DONE]. */
async function chatStream(base, body) {
  const res = await post(`${base}/v1/chat/completions`, { ...body, stream: true });
  if (res.status !== 200) throw new Error(`stream: ${res.status} ${await res.text()}`);
  if (!/text\/event-stream/.test(res.headers.get('content-type') ?? '')) throw new Error(`stream: content-type ${res.headers.get('content-type')}`);
  const raw = await res.text();
  let text = '';
  let finish = null;
  let done = false;
  let chunks = 0;
  for (const line of raw.split('\n')) {
    if (!line.startsWith('data: ')) continue;
    const data = line.slice(6).trim();
    if (data === '[DONE]') {
      done = true;
      continue;
    }
    if (done) throw new Error('stream: data after [DONE]');
    const j = JSON.parse(data);
    if (j.error) throw new Error(`stream: error event ${JSON.stringify(j.error)}`);
    chunks++;
    const c = j.choices?.[0];
    if (c?.delta?.content) text += c.delta.content;
    if (c?.finish_reason) finish = c.finish_reason;
  }
  return { text, finish, done, chunks };
}

// ---------------------------------------------------------------- the checks

async function runModel(model, o) {
  const tag = `${basename(model)} [${o.device}, ${o.precision}]`;
  let srv;
  try {
    srv = await startServer(model, o);
  } catch (err) {
    fail(`start ${tag}`, err instanceof Error ? err.message : String(err));
    return;
  }
  const base = srv.url;
  try {
    await check(`start ${tag}`, async () => {
      const models = await getJson(`${base}/v1/models`);
      if (!models.data?.some((m) => m.id === 'm')) return `/v1/models lacks the served name: ${JSON.stringify(models)}`;
      const status = await getJson(`${base}/v1/status`);
      if (status.device?.kind !== o.device) return `/v1/status device ${JSON.stringify(status.device)}, expected ${o.device}`;
      return { detail: `(${status.device.name})` };
    });

    const prompts = Array.from({ length: o.requests }, (_, i) => `${WORDS[i % 12]} ${WORDS[(i * 5 + 3) % 12]} ${i} ${WORDS[(i * 7 + 1) % 12]}`.repeat(1 + (i % 3)));
    let first;
    await check(`chat ${tag}`, async () => {
      first = await chat(base, chatBody(prompts[0]));
      if (first.text.length === 0 && first.finish !== 'stop') return `empty text, finish ${first.finish}`;
      if (!['stop', 'length'].includes(first.finish)) return `finish_reason ${first.finish}`;
      const u = first.usage;
      if (!(u?.prompt_tokens > 0 && u.completion_tokens > 0 && u.total_tokens === u.prompt_tokens + u.completion_tokens)) return `usage ${JSON.stringify(u)}`;
      return { detail: `(${u.completion_tokens} tokens, ${first.finish})` };
    });

    await check(`stream ${tag}`, async () => {
      const s = await chatStream(base, chatBody(prompts[0]));
      if (!s.done) return 'no [DONE]';
      if (first && s.text !== first.text) return `streamed ${JSON.stringify(s.text)} != ${JSON.stringify(first.text)}`;
      if (first && s.finish !== first.finish) return `finish ${s.finish} != ${first.finish}`;
      return { detail: `(${s.chunks} chunks)` };
    });

    const solo = [];
    await check(`batch ${tag}`, async () => {
      for (const p of prompts) solo.push((await chat(base, chatBody(p))).text);
      const together = await Promise.all(prompts.map((p) => chat(base, chatBody(p))));
      const bad = together.findIndex((r, i) => r.text !== solo[i]);
      if (bad >= 0) return `request ${bad}: together ${JSON.stringify(together[bad].text)} != alone ${JSON.stringify(solo[bad])}`;
      return { detail: `(${prompts.length} requests alone == together)` };
    });

    await check(`seeded ${tag}`, async () => {
      // Sampled requests with seeds (top-p, top-k, min-p, penalties, one with logprobs): alone == all at once.
      const sampled = (p, i) =>
        chatBody(p, {
          temperature: 0.9,
          seed: 100 + i,
          ...(i % 2 === 0 ? { top_p: 0.9 } : {}),
          ...(i % 3 === 0 ? { top_k: 20 } : {}),
          ...(i % 4 === 1 ? { presence_penalty: 0.4, frequency_penalty: 0.2 } : {}),
          ...(i % 5 === 2 ? { min_p: 0.05 } : {}),
          ...(i === 3 ? { logprobs: true, top_logprobs: 2 } : {}),
        });
      const alone = [];
      for (let i = 0; i < prompts.length; i++) alone.push((await chat(base, sampled(prompts[i], i))).text);
      const together = await Promise.all(prompts.map((p, i) => chat(base, sampled(p, i))));
      const bad = together.findIndex((r, i) => r.text !== alone[i]);
      if (bad >= 0) return `request ${bad}: together ${JSON.stringify(together[bad].text)} != alone ${JSON.stringify(alone[bad])}`;
      if (solo.length === prompts.length && alone.every((t, i) => t === solo[i])) return 'every sampled reply equals its greedy one: sampling had no effect';
      return { detail: `(${prompts.length} seeded sampled requests alone == together)` };
    });

    await check(`run ${tag}`, async () => {
      // `rapid run` is one request on the engine `rapid serve` runs: the same prompt and sampling, the same text.
      for (const sampling of [{ temperature: 0 }, { temperature: 0.9, seed: 7 }]) {
        const served = await chat(base, chatBody(prompts[0], sampling));
        const args = [join(ROOT, 'bin', 'rapid.js'), 'run', model, '--device', o.device, '--precision', o.precision, '--prompt', prompts[0]];
        args.push('--max-tokens', '12', '--json', '--temperature', String(sampling.temperature));
        if (sampling.seed !== undefined) args.push('--seed', String(sampling.seed));
        if (o.threads > 0) args.push('--threads', String(o.threads));
        const r = spawnSync(process.execPath, args, { encoding: 'utf8', timeout: START_TIMEOUT_MS });
        if (r.status !== 0) return `rapid run exited ${r.status ?? r.signal}: ${tail(r.stderr ?? '')}`;
        const ran = JSON.parse(r.stdout).text;
        if (ran !== served.text) return `${JSON.stringify(sampling)}: run ${JSON.stringify(ran)} != serve ${JSON.stringify(served.text)}`;
      }
      return { detail: '(greedy and seeded: run == serve)' };
    });

    await check(`schema ${tag}`, async () => {
      const items = prompts.map((p, i) =>
        i % 2 === 0
          ? { i, schema: SCHEMAS[(i / 2) % SCHEMAS.length], body: chatBody(p, { max_tokens: 64, response_format: { type: 'json_schema', json_schema: { name: `s${i}`, schema: SCHEMAS[(i / 2) % SCHEMAS.length] } } }) }
          : { i, body: chatBody(p) },
      );
      const replies = await Promise.all(items.map((it) => (it.i % 4 === 2 ? chatStream(base, it.body) : chat(base, it.body))));
      let constrained = 0;
      for (let k = 0; k < items.length; k++) {
        const it = items[k];
        const r = replies[k];
        if (!it.schema) {
          if (solo.length === prompts.length && r.text !== solo[it.i]) return `plain request ${it.i} beside schema requests: ${JSON.stringify(r.text)} != alone ${JSON.stringify(solo[it.i])}`;
          continue;
        }
        let value;
        try {
          value = JSON.parse(r.text);
        } catch {
          return `request ${it.i}: not JSON (finish ${r.finish}): ${JSON.stringify(r.text.slice(0, 200))}`;
        }
        const v = schemaViolation(it.schema, value);
        if (v) return `request ${it.i}: ${v} in ${r.text}`;
        constrained++;
      }
      return { detail: `(${constrained} constrained + ${items.length - constrained} plain, all at once)` };
    });

    await check(`errors ${tag}`, async () => {
      const cases = [
        ['malformed JSON', '{"model": "m", "messages": ['],
        ['unknown model', { ...chatBody('hello'), model: 'no-such-model' }],
        ['negative max_tokens', { ...chatBody('hello'), max_tokens: -1 }],
        ['invalid schema', { ...chatBody('hello'), response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'no-such-type' } } } }],
        ['empty messages', { model: 'm', messages: [] }],
      ];
      for (const [what, body] of cases) {
        const res = await post(`${base}/v1/chat/completions`, body);
        const text = await res.text();
        if (res.status < 400 || res.status >= 500) return `${what}: status ${res.status} (want 4xx): ${text.slice(0, 200)}`;
        let msg = '';
        try {
          msg = JSON.parse(text).error?.message ?? '';
        } catch {
          return `${what}: ${res.status} body is not JSON: ${text.slice(0, 200)}`;
        }
        if (!msg) return `${what}: ${res.status} without error.message`;
        const after = await chat(base, chatBody(prompts[1]));
        if (solo.length > 1 && after.text !== solo[1]) return `after ${what}: ${JSON.stringify(after.text)} != ${JSON.stringify(solo[1])}`;
      }
      return { detail: `(${cases.length} bad requests answered 4xx, the server kept serving)` };
    });

    await check(`abort ${tag}`, async () => {
      const ctl = new AbortController();
      const res = await post(`${base}/v1/chat/completions`, { ...chatBody(prompts[2], { max_tokens: 256 }), stream: true }, ctl.signal);
      if (res.status !== 200) return `stream: ${res.status}`;
      const reader = res.body.getReader();
      await reader.read();
      ctl.abort();
      await reader.cancel().catch(() => undefined);
      const deadline = Date.now() + 15_000;
      let status;
      for (;;) {
        status = await getJson(`${base}/v1/status`);
        if (status.running === 0 && status.waiting === 0) break;
        if (Date.now() > deadline) return `still ${status.running} running / ${status.waiting} waiting 15 s after the client left`;
        await new Promise((r) => setTimeout(r, 100));
      }
      const after = await chat(base, chatBody(prompts[1]));
      if (solo.length > 1 && after.text !== solo[1]) return `after the abort: ${JSON.stringify(after.text)} != ${JSON.stringify(solo[1])}`;
      return { detail: `(aborts counted: ${status.requests?.abort ?? '?'})` };
    });

    await check(`load ${tag}`, async () => {
      // Greedy rows take their argmax where the logits are; sampled rows are sampled there too (not with logprobs).
      const rate = async (sampled) => {
        const n = 32;
        const t0 = performance.now();
        const replies = await Promise.all(
          Array.from({ length: n }, (_, i) =>
            chat(base, chatBody(`${WORDS[i % 12]} ${i} ${WORDS[(i * 3) % 12]}`, { max_tokens: 32, ...(sampled ? { temperature: 0.8, seed: i } : {}) })),
          ),
        );
        const s = (performance.now() - t0) / 1000;
        const tokens = replies.reduce((a, r) => a + r.usage.completion_tokens, 0);
        return `${tokens} tokens in ${s.toFixed(2)} s = ${(tokens / s).toFixed(0)} tok/s`;
      };
      const greedy = await rate(false);
      const sampled = await rate(true);
      return { detail: `(32 concurrent requests: greedy ${greedy}; temperature 0.8 ${sampled})` };
    });
  } finally {
    await stopServer(srv);
    if (results.some((r) => r.kind === 'FAIL' && r.name.endsWith(tag))) info(`server log ${tag}`, `\n${tail(srv.log(), 20)}`);
  }
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const t0 = performance.now();
  for (const m of o.models) await runModel(m, o);
  const passed = results.filter((r) => r.kind === 'PASS').length;
  const failed = results.filter((r) => r.kind === 'FAIL').length;
  process.stdout.write(`${passed} passed, ${failed} failed (${((performance.now() - t0) / 1000).toFixed(1)} s)\n`);
  if (o.json) writeFileSync(o.json, `${JSON.stringify({ device: o.device, precision: o.precision, results }, null, 2)}\n`);
  process.exit(failed === 0 ? 0 : 1);
}

main().catch((err) => {
  process.stderr.write(`serve-checks: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(2);
});
