// `node bench/run.js engine-process`: what running the engine in a child process costs. Two servers
// on the same checkpoint in the same run, in-process (--engine-process inline) and child, each
// asked for greedy completions over HTTP at 1 and 16 concurrent sequences; rounds alternate which
// goes first. Reports aggregate output tok/s of each, the child/inline ratio per round and its
// spread, and the time a killed child takes to serve again (model load inside it stated apart).
import { readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { packageRoot } from '../native/binding.js';
import { median } from './median.js';

interface Level {
  concurrency: number;
  inline: number[];
  child: number[];
  ratios: number[];
  /** CPU ms per generated token (all processes of the server, the bench client included). */
  inlineCpu: number[];
  childCpu: number[];
}

/** CPU time of this process (ms). */
const selfCpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

/** CPU time of another process (ms, 10 ms resolution): utime + stime of /proc/PID/stat. */
function procCpuMs(pid: number | null): number {
  if (pid === null) return 0;
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) * 10; // clock ticks of 10 ms (USER_HZ 100)
  } catch {
    return 0;
  }
}

/** Aggregate output tok/s of `concurrency` greedy completions, and the CPU ms per token they cost. */
async function batch(url: string, concurrency: number, tokens: number, round: number, cpuMs: () => number = selfCpuMs): Promise<{ tokS: number; cpuPerToken: number }> {
  const cpu0 = cpuMs();
  const started = performance.now();
  const outs = await Promise.all(
    Array.from({ length: concurrency }, async (_, i) => {
      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', prompt: `round ${round} request ${i}: the river stone`, temperature: 0, max_tokens: tokens }),
      });
      if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
      const body = (await res.json()) as { usage: { completion_tokens: number } };
      return body.usage.completion_tokens;
    }),
  );
  const wallS = (performance.now() - started) / 1000;
  const total = outs.reduce((a, b) => a + b, 0);
  return { tokS: total / wallS, cpuPerToken: (cpuMs() - cpu0) / total };
}

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      model: { type: 'string', default: join(packageRoot(), 'test', 'fixtures', 'models', 'qwen2-f32') },
      rounds: { type: 'string', default: '3' },
      tokens: { type: 'string', default: '64' },
      threads: { type: 'string' },
      levels: { type: 'string', default: '1,16' },
      'kv-cache-memory': { type: 'string', default: String(64 << 20) },
    },
  });
  const { startServer } = await import('../app/start-server.js');
  const rounds = Number(values.rounds);
  const tokens = Number(values.tokens);
  const opts = {
    port: 0,
    servedModelName: 'm',
    maxNumSeqs: 16,
    kvCacheMemory: Number(values['kv-cache-memory']),
    ...(values.threads !== undefined ? { threads: Number(values.threads) } : {}),
  };
  const inline = await startServer(values.model, opts);
  const child = await startServer(values.model, { ...opts, engineProcess: 'child' });
  try {
    for (const s of [inline, child]) await batch(s.url, 4, 8, -1); // warm-up
    const levels: Level[] = values.levels.split(',').map(Number).map((concurrency) => ({ concurrency, inline: [], child: [], ratios: [], inlineCpu: [], childCpu: [] }));
    const childCpuMs = () => selfCpuMs() + procCpuMs(child.engine.pid);
    for (let r = 0; r < rounds; r++) {
      for (const lv of levels) {
        const order = r % 2 === 0 ? (['inline', 'child'] as const) : (['child', 'inline'] as const);
        const got: Record<string, { tokS: number; cpuPerToken: number }> = {};
        for (const mode of order) got[mode] = await (mode === 'inline' ? batch(inline.url, lv.concurrency, tokens, r) : batch(child.url, lv.concurrency, tokens, r, childCpuMs));
        lv.inline.push(got.inline!.tokS);
        lv.child.push(got.child!.tokS);
        lv.ratios.push(got.child!.tokS / got.inline!.tokS);
        lv.inlineCpu.push(got.inline!.cpuPerToken);
        lv.childCpu.push(got.child!.cpuPerToken);
      }
    }
    // Restart: a real SIGKILL of the child, then poll /health until it serves again.
    const pid = child.engine.pid;
    const restart = { totalMs: NaN, startMs: NaN, loadMs: NaN };
    if (pid !== null) {
      const t0 = performance.now();
      process.kill(pid, 'SIGKILL');
      for (;;) {
        await new Promise((res) => setTimeout(res, 10));
        const h = await fetch(`${child.url}/health`);
        if (h.status === 200 && child.engine.pid !== pid) break;
      }
      restart.totalMs = performance.now() - t0;
      const t = child.engine.lastRestart;
      restart.startMs = t?.startMs ?? NaN;
      restart.loadMs = t?.loadMs ?? NaN;
    }
    const f = (x: number) => x.toFixed(1);
    console.log(`engine process cost on ${values.model} (${cpus().length} cores, load ${loadavg()[0]!.toFixed(2)}; ${rounds} rounds of ${tokens} tokens per sequence, greedy)`);
    for (const lv of levels) {
      const lo = Math.min(...lv.ratios);
      const hi = Math.max(...lv.ratios);
      console.log(
        `  ${String(lv.concurrency).padStart(2)} seq: inline ${f(median(lv.inline))} tok/s [${lv.inline.map(f).join(', ')}], ` +
          `child ${f(median(lv.child))} tok/s [${lv.child.map(f).join(', ')}]; child/inline median ${median(lv.ratios).toFixed(3)} (rounds ${lv.ratios.map((x) => x.toFixed(3)).join(', ')}; spread ${lo.toFixed(3)}..${hi.toFixed(3)})`,
      );
      const c = (x: number) => x.toFixed(3);
      console.log(
        `         CPU ms per token (server processes + client): inline ${c(median(lv.inlineCpu))} [${lv.inlineCpu.map(c).join(', ')}], child ${c(median(lv.childCpu))} [${lv.childCpu.map(c).join(', ')}]; child/inline ${(median(lv.childCpu) / median(lv.inlineCpu)).toFixed(3)}`,
      );
    }
    console.log(`  restart after SIGKILL: /health 200 again in ${restart.totalMs.toFixed(0)} ms; the new child started in ${restart.startMs.toFixed(0)} ms, ${restart.loadMs.toFixed(0)} ms of it loading the model`);
    return 0;
  } finally {
    await Promise.all([inline.close(1000), child.close(1000)]);
  }
}
