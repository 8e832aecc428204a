// deploy/haproxy/haproxy.cfg, unmodified, in front of three real `rapid serve` replicas on loopback
// (tiny fixture, CLI child processes): 300 mixed requests. Affinity beats round robin on the prefix
// cache (same run, from /metrics); a `kill -9` fails only that replica's in-flight requests with
// clean errors and HAProxy routes around it within its check interval; a SIGTERM'd replica drains
// with no failed request. Skips where HAProxy or the native addon is missing (.ci/run installs haproxy).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const CONFIG = resolve(ROOT, 'deploy', 'haproxy', 'haproxy.cfg');
const FIXTURE = join(FIXTURE_ROOT, 'qwen2-q4');
const MODEL = 'qwen2-q4';
/** The fixture's end-of-sequence ids, banned so every request generates its max_tokens (steady load). */
const NO_EOS = { '1000': -100, '1002': -100 };
/** The config's check: inter 1s, fall 2 (then fastinter 500ms). Detection must land within this. */
const DETECT_BOUND_MS = 4000;

/** Debian puts it in /usr/sbin, which a non-root PATH may lack. */
const HAPROXY = ['haproxy', '/usr/sbin/haproxy'].find((bin) => spawnSync(bin, ['-v'], { stdio: 'ignore' }).status === 0);

interface Replica {
  name: string;
  addr: string;
  url: string;
  child: ChildProcess;
  log: () => string;
  exited: Promise<number | null>;
}

interface Outcome {
  id: string;
  start: number;
  end: number;
  ok: boolean;
  status: number;
  stream: boolean;
  /** 'http' (an error status with a JSON error body), 'cut' (a response ended early), 'closed' (no response). */
  failure?: 'http' | 'cut' | 'closed';
  errorCode?: string;
}

const children: ChildProcess[] = [];

function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
  });
}

function startReplica(name: string): Promise<Replica> {
  const args = ['serve', FIXTURE, '--port', '0', '--threads', '1', '--precision', 'exact', '--kv-cache-memory', '32MiB', '--block-size', '16', '--max-num-seqs', '16'];
  const child = spawn(process.execPath, [resolve(ROOT, 'bin/rapid.js'), ...args, '--served-model-name', MODEL, '--drain-delay', '2', '--shutdown-grace', '30'], { stdio: ['ignore', 'ignore', 'pipe'] });
  children.push(child);
  let err = '';
  child.stderr!.on('data', (d: Buffer) => void (err += d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`${name} did not start in 90 s:\n${err}`)), 90_000);
    const poll = setInterval(() => {
      const m = /serving .* on (http:\/\/([^\s/]+))\/v1/.exec(err);
      if (!m) return;
      clearInterval(poll);
      clearTimeout(timer);
      ok({ name, addr: m[2]!, url: m[1]!, child, log: () => err, exited });
    }, 50);
    void exited.then((code) => (clearInterval(poll), clearTimeout(timer), fail(new Error(`${name} exited with ${code}:\n${err}`))));
  });
}

async function startHaproxy(config: string, replicas: Replica[]): Promise<{ url: string; stats: string; child: ChildProcess; log: () => string }> {
  const [lb, stats] = [await freePort(), await freePort()];
  const env = { ...process.env, RAPID_LB_BIND: `127.0.0.1:${lb}`, RAPID_STATS_BIND: `127.0.0.1:${stats}`, RAPID_R1: replicas[0]!.addr, RAPID_R2: replicas[1]!.addr, RAPID_R3: replicas[2]!.addr };
  const child = spawn(HAPROXY!, ['-db', '-f', config], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  children.push(child);
  let err = '';
  child.stderr!.on('data', (d: Buffer) => void (err += d.toString()));
  const url = `http://127.0.0.1:${lb}`;
  for (let i = 0; i < 100; i++) {
    const r = await fetch(`${url}/health/ready`).catch(() => null);
    if (r?.status === 200) return { url, stats: `http://127.0.0.1:${stats}/stats;csv`, child, log: () => err };
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`haproxy did not start:\n${err}`);
}

/** HAProxy's own view of a server in the leastconn backend (UP, DOWN, ...). */
async function serverStatus(statsUrl: string, server: string): Promise<string> {
  const csv = await (await fetch(statsUrl)).text();
  const row = csv.split('\n').find((l) => l.startsWith(`rapid_leastconn,${server},`));
  return row?.split(',')[17] ?? 'missing'; // column 17: status
}

async function prefixCache(replicas: Replica[]): Promise<{ hits: number; queries: number }> {
  let hits = 0;
  let queries = 0;
  for (const r of replicas) {
    const m = await (await fetch(`${r.url}/metrics`)).text();
    hits += Number(/^rapid_prefix_cache_hits_total\{[^}]*\} (\d+)/m.exec(m)![1]);
    queries += Number(/^rapid_prefix_cache_queries_total\{[^}]*\} (\d+)/m.exec(m)![1]);
  }
  return { hits, queries };
}

/** A long per-session prefix (several KV blocks) and a short question: what prefix caching is for. */
function sessionText(tag: string, s: number): string {
  const words = Array.from({ length: 90 }, (_, i) => `w${(s * 7919 + i * 31) % 997}`).join(' ');
  return `You are assistant ${tag}-${s}. Background: ${words}.`;
}

/** Request i of a mixed workload: chat and completions, streamed or not, keyed by header or body field. */
async function send(url: string, tag: string, i: number, sessions: number): Promise<Outcome> {
  const s = i % sessions;
  const id = `${tag}-${i}`;
  const kind = i % 4;
  const stream = kind === 1 || kind === 3;
  const question = `Question ${Math.floor(i / sessions)}?`;
  const headers: Record<string, string> = { 'content-type': 'application/json', 'x-request-id': id };
  const key = `${tag}-session-${s}`;
  if (kind === 1 || kind === 3) headers['x-session-id'] = key;
  const common = { model: MODEL, max_tokens: 24, logit_bias: NO_EOS, stream, ...(kind === 0 || kind === 2 ? { prompt_cache_key: key } : {}) };
  const body =
    kind < 2 ? { ...common, messages: [{ role: 'system', content: sessionText(tag, s) }, { role: 'user', content: question }] } : { ...common, prompt: `${sessionText(tag, s)}\n${question}` };
  const path = kind < 2 ? '/v1/chat/completions' : '/v1/completions';
  const start = performance.now();
  let res: Response;
  try {
    res = await fetch(`${url}${path}`, { method: 'POST', headers, body: JSON.stringify(body), signal: AbortSignal.timeout(60_000) });
  } catch (err) {
    // The connection closed with no response at all.
    return { id, start, end: performance.now(), ok: false, status: 0, stream, failure: 'closed', errorCode: String((err as Error).cause ?? err) };
  }
  const base = { id, start, status: res.status, stream };
  if (res.status !== 200) {
    const text = await res.text();
    let code: string | undefined;
    try {
      code = (JSON.parse(text) as { error: { code: string } }).error.code;
    } catch {
      code = `not JSON: ${text.slice(0, 80)}`;
    }
    return { ...base, end: performance.now(), ok: false, failure: 'http', errorCode: code };
  }
  try {
    const text = await res.text();
    const complete = stream ? text.includes('data: [DONE]') : (JSON.parse(text) as { usage: { completion_tokens: number } }).usage.completion_tokens === 24;
    return { ...base, end: performance.now(), ok: complete, ...(complete ? {} : { failure: 'cut' as const }) };
  } catch {
    return { ...base, end: performance.now(), ok: false, failure: 'cut' };
  }
}

/** n requests, `concurrency` at a time, in order; `onDone` sees each completion count. */
async function workload(url: string, tag: string, n: number, sessions: number, concurrency: number, onDone: (done: number) => void = () => undefined): Promise<Outcome[]> {
  const out: Outcome[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) {
        const o = await send(url, tag, next++, sessions);
        out.push(o);
        onDone(out.length);
      }
    }),
  );
  return out;
}

describe.skipIf(HAPROXY === undefined || !nativeAvailable())('HAProxy in front of three rapid replicas (deploy/haproxy)', () => {
  let replicas: Replica[] = [];
  let affinity: Awaited<ReturnType<typeof startHaproxy>>;
  let roundRobin: Awaited<ReturnType<typeof startHaproxy>>;

  beforeAll(async () => {
    replicas = await Promise.all(['r1', 'r2', 'r3'].map(startReplica));
    affinity = await startHaproxy(CONFIG, replicas);
    // The baseline: the same config with the hash replaced by round robin.
    const dir = mkdtempSync(join(tmpdir(), 'rapid-haproxy-'));
    const rr = readFileSync(CONFIG, 'utf8').replace('balance hash var(txn.affinity)', 'balance roundrobin').replace(/^\s*hash-(type|balance-factor) .*$/gm, '');
    expect(rr).toContain('balance roundrobin');
    writeFileSync(join(dir, 'roundrobin.cfg'), rr);
    roundRobin = await startHaproxy(join(dir, 'roundrobin.cfg'), replicas);
  }, 180_000);

  afterAll(() => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  });

  it('300 requests: affinity beats round robin, a kill -9 fails only in-flight requests, a SIGTERM drains cleanly', async () => {
    // 1. Prefix-cache hit rate, affinity vs round robin: the same workload shape, fresh session prefixes each.
    const before = await prefixCache(replicas);
    const a = await workload(affinity.url, 'aff', 75, 8, 4);
    const mid = await prefixCache(replicas);
    const b = await workload(roundRobin.url, 'rr', 75, 8, 4);
    const after = await prefixCache(replicas);
    expect([...a, ...b].filter((o) => !o.ok)).toEqual([]);
    console.log(`phase 1: ${a.length + b.length} ok`);
    const affinityRate = (mid.hits - before.hits) / (mid.queries - before.queries);
    const rrRate = (after.hits - mid.hits) / (after.queries - mid.queries);
    console.log(`prefix-cache hit rate: affinity ${affinityRate.toFixed(3)}, round robin ${rrRate.toFixed(3)}`);
    expect(affinityRate).toBeGreaterThan(rrRate + 0.05);

    // 2. kill -9 one replica a third of the way into 120 requests.
    const victim = replicas[1]!;
    let killedAt = 0;
    let deadAt = Infinity;
    void victim.exited.then(() => (deadAt = performance.now()));
    const killing = workload(affinity.url, 'kill', 120, 12, 8, (done) => {
      if (done === 40 && killedAt === 0) {
        killedAt = performance.now();
        victim.child.kill('SIGKILL');
      }
    });
    let detectedMs = -1;
    for (;;) {
      if (killedAt > 0 && (await serverStatus(affinity.stats, victim.name)).startsWith('DOWN')) {
        detectedMs = performance.now() - killedAt;
        break;
      }
      if (killedAt > 0 && performance.now() - killedAt > 15_000) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const killed = await killing;
    console.log(`HAProxy marked ${victim.name} DOWN ${Math.round(detectedMs)} ms after kill -9`);
    expect(detectedMs).toBeGreaterThanOrEqual(0);
    expect(detectedMs).toBeLessThan(DETECT_BOUND_MS);
    const failed = killed.filter((o) => !o.ok);
    const survivorsLog = replicas.filter((r) => r !== victim).map((r) => r.log()).join('');
    console.log(`kill -9: ${failed.length} of 120 failed: ${failed.map((o) => `${o.id} ${o.failure}${o.errorCode ? ` ${o.errorCode}` : ''}`).join(', ')}`);
    for (const o of failed) {
      // In flight when the replica died, and not one a surviving replica was serving.
      expect(o.start, `${o.id} started after the replica was gone`).toBeLessThan(deadAt);
      expect(o.end, `${o.id} ended before the kill`).toBeGreaterThanOrEqual(killedAt);
      expect(survivorsLog).not.toContain(`id=${o.id} `);
      // Clean: HAProxy's JSON 502 before any byte came back; once the replica's 200 has gone out (streams),
      // the response ends early and the client's read (or fetch itself, when the cut follows the
      // headers at once) fails. Nothing hangs: each request is bounded at 60 s.
      if (o.failure === 'http') expect(o.status === 502 ? o.errorCode : `${o.status} ${o.errorCode}`).toBe('upstream_failed');
    }
    expect(failed.length).toBeLessThanOrEqual(16); // at most the victim's --max-num-seqs
    // Every request that started once the replica was gone succeeded: refused connections are retried elsewhere.
    expect(killed.filter((o) => o.start >= deadAt && !o.ok)).toEqual([]);
    expect(killed.filter((o) => o.start >= deadAt).length).toBeGreaterThan(40);
    expect(await victim.exited).toBe(null); // killed by a signal

    // 3. Rolling restart of another replica: SIGTERM mid-load drains with no failure.
    const leaving = replicas[0]!;
    let termAt = 0;
    const rolling = workload(affinity.url, 'roll', 30, 6, 6, (done) => {
      if (done === 6 && termAt === 0) {
        termAt = performance.now();
        leaving.child.kill('SIGTERM');
      }
    });
    const rolled = await rolling;
    expect(rolled.filter((o) => !o.ok)).toEqual([]);
    expect(await leaving.exited).toBe(0);
    expect(leaving.log()).toMatch(/SIGTERM: \/health\/ready is 503/);
    // Total: 75 + 75 + 120 + 30 requests.
    expect(a.length + b.length + killed.length + rolled.length).toBe(300);
  }, 400_000);
});
