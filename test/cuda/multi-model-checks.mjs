#!/usr/bin/env node
// Several models behind one `rapid serve` on a GPU: the pool's byte budget against what the device
// really holds. Imports only node: builtins (global fetch). Checks:
//   single   each model alone (`rapid serve MODEL --device D`): its greedy answers, the reference;
//   pool     `rapid serve A B --max-loaded-bytes X` with X fitting one model: A, B, A, B... answers
//            equal the single servers', each request evicting the other model;
//   freed    after each eviction the GPU's used memory (nvidia-smi) is back within --slack of what it
//            was with the other model alone (the evicted engine's weights and KV pool are released);
//   status   /v1/status names every loaded engine's device.
// Usage: node test/cuda/multi-model-checks.mjs [--device cuda|cpu] [--model DIR --model DIR]
//          [--kv 256MiB] [--rounds 3] [--slack-mib 64]
// Prints one PASS/FAIL/INFO line per check, then 'N passed, M failed'; exits 1 on any failure.
import { spawn, execFileSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const arg = (name, dflt) => {
  const all = process.argv.flatMap((a, i) => (a === name ? [process.argv[i + 1]] : []));
  return all.length > 0 ? all : dflt;
};
const device = arg('--device', ['cuda'])[0];
const models = arg('--model', [join(ROOT, 'test/fixtures/models/qwen2-q4'), join(ROOT, 'test/fixtures/models/gemma3-q4')]);
const kv = arg('--kv', ['256MiB'])[0];
const rounds = Number(arg('--rounds', ['3'])[0]);
const slackMiB = Number(arg('--slack-mib', ['64'])[0]);
const KV_BYTES = Number(/^(\d+)MiB$/.exec(kv)?.[1] ?? NaN) * 1024 ** 2;
const PROMPTS = ['river stone cloud', 'seven silver gardens'];
let passed = 0;
let failed = 0;
const report = (ok, name, detail = '') => {
  ok === null ? console.log(`INFO ${name} ${detail}`) : ok ? (passed++, console.log(`PASS ${name} ${detail}`)) : (failed++, console.log(`FAIL ${name} ${detail}`));
};

function serve(args) {
  const child = spawn(process.execPath, [join(ROOT, 'bin/rapid.js'), 'serve', '--port', '0', '--device', device, '--kv-cache-memory', kv, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  return new Promise((ok, fail) => {
    const t = setTimeout(() => (child.kill(), fail(new Error(`no start in 180 s:\n${err}`))), 180_000);
    child.stderr.on('data', (d) => {
      err += d;
      const m = /serving .* on (http:\/\/[^\s]+)\/v1/.exec(err);
      if (m) (clearTimeout(t), ok({ url: m[1], child, log: () => err }));
    });
    child.on('exit', (code) => (clearTimeout(t), fail(new Error(`exited ${code}:\n${err}`))));
  });
}

async function answer(url, model, prompt) {
  const r = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, messages: [{ role: 'user', content: prompt }], temperature: 0, max_tokens: 16 }) });
  const j = await r.json();
  if (r.status !== 200) throw new Error(`${model}: ${r.status} ${JSON.stringify(j)}`);
  return j.choices[0].message.content;
}

const gpuUsedMiB = () => (device === 'cuda' ? Number(execFileSync('nvidia-smi', ['--query-gpu=memory.used', '--format=csv,noheader,nounits']).toString().split('\n')[0]) : NaN);
const weightBytes = (dir) => readdirSync(dir).filter((f) => f.endsWith('.safetensors')).reduce((s, f) => s + statSync(join(dir, f)).size, 0);
const stop = (s) => new Promise((r) => (s.child.once('exit', r), s.child.kill('SIGTERM')));

const names = models.map((m) => basename(m));
const expected = new Map();
for (const [i, m] of models.entries()) {
  const s = await serve([m]);
  for (const p of PROMPTS) expected.set(`${names[i]} ${p}`, await answer(s.url, names[i], p));
  await stop(s);
}
report(null, 'single', `${expected.size} reference answers on ${device}`);

// Room for the larger model alone: every switch evicts the other.
const estimates = models.map((m) => weightBytes(m) + KV_BYTES);
const budget = Math.max(...estimates) + (1 << 20);
const baseline = gpuUsedMiB();
const s = await serve([...models, '--max-loaded-bytes', String(budget)]);
const alone = new Map();
try {
  for (let r = 0; r < rounds; r++) {
    for (const [i, name] of names.entries()) {
      for (const p of PROMPTS) {
        const got = await answer(s.url, name, p);
        const want = expected.get(`${name} ${p}`);
        report(got === want, 'pool', `round ${r} ${name} "${p}"${got === want ? '' : `: ${JSON.stringify(got)} != ${JSON.stringify(want)}`}`);
      }
      const used = gpuUsedMiB();
      if (!Number.isNaN(used)) {
        if (r === 0) alone.set(name, used);
        else report(Math.abs(used - alone.get(name)) <= slackMiB, 'freed', `${name} loaded alone: ${used} MiB used (round 0: ${alone.get(name)} MiB, before the server: ${baseline} MiB)`);
      }
      const status = await (await fetch(`${s.url}/v1/status`)).json();
      report(status.engines.length === 1 && status.engines[0].model === name, 'status', `loaded: ${status.engines.map((e) => e.model).join(', ')}`);
    }
  }
  report(null, 'log', s.log().split('\n').filter((l) => /loaded|evicting/.test(l)).slice(0, 6).join(' | '));
} finally {
  await stop(s);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed > 0 ? 1 : 0);
