// `node bench/run.js data-parallel`: what --data-parallel N buys. Two servers on the same checkpoint
// in the same run: one engine process, and N behind one endpoint (engine i on GPU i with --device
// cuda, all on the CPU with --device cpu). Each gets `concurrency` greedy completions per engine at
// once; rounds alternate which goes first. Reports aggregate output tok/s of each and the ratio per
// round with its spread. On a GPU host with N GPUs the issue asks for >= 1.9x at N=2, 64 per GPU.
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { packageRoot } from '../native/binding.js';
import type { DeviceFlag } from '../native/device-index.js';
import { median } from './median.js';

/** Aggregate output tok/s of `n` concurrent greedy completions (no end token: each runs to `tokens`). */
async function batch(url: string, n: number, tokens: number, round: number, eos: Record<string, number>): Promise<number> {
  const started = performance.now();
  const outs = await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', prompt: `round ${round} request ${i}: the river stone`, temperature: 0, max_tokens: tokens, logit_bias: eos }),
      });
      if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
      return ((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens;
    }),
  );
  return outs.reduce((a, b) => a + b, 0) / ((performance.now() - started) / 1000);
}

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      model: { type: 'string', default: join(packageRoot(), 'test', 'fixtures', 'models', 'qwen2-f32') },
      engines: { type: 'string', default: '2' },
      device: { type: 'string', default: 'cpu' },
      rounds: { type: 'string', default: '3' },
      tokens: { type: 'string', default: '64' },
      concurrency: { type: 'string', default: '16' },
      threads: { type: 'string' },
      'kv-cache-memory': { type: 'string' },
      // Comma-separated end-token ids to ban, so every sequence runs to --tokens.
      'ban-tokens': { type: 'string', default: '' },
    },
  });
  const { startServer } = await import('../app/start-server.js');
  const engines = Number(values.engines);
  const rounds = Number(values.rounds);
  const tokens = Number(values.tokens);
  const perEngine = Number(values.concurrency);
  const eos = Object.fromEntries(values['ban-tokens'].split(',').filter(Boolean).map((t) => [t, -100]));
  const opts = {
    port: 0,
    servedModelName: 'm',
    maxNumSeqs: perEngine,
    device: values.device as DeviceFlag,
    engineProcess: 'child' as const,
    ...(values['kv-cache-memory'] !== undefined ? { kvCacheMemory: Number(values['kv-cache-memory']) } : {}),
    ...(values.threads !== undefined ? { threads: Number(values.threads) } : {}),
  };
  const one = await startServer(values.model, opts);
  const many = await startServer(values.model, { ...opts, dataParallel: engines });
  try {
    for (const s of [one, many]) await batch(s.url, 4, 8, -1, eos); // warm-up
    const single: number[] = [];
    const multi: number[] = [];
    const ratios: number[] = [];
    for (let r = 0; r < rounds; r++) {
      const got: Record<string, number> = {};
      for (const mode of r % 2 === 0 ? ['one', 'many'] : ['many', 'one']) {
        got[mode] = mode === 'one' ? await batch(one.url, perEngine, tokens, r, eos) : await batch(many.url, perEngine * engines, tokens, r, eos);
      }
      single.push(got.one!);
      multi.push(got.many!);
      ratios.push(got.many! / got.one!);
    }
    const f = (x: number) => x.toFixed(1);
    console.log(`data parallel on ${values.model}, --device ${values.device} (${cpus().length} cores, load ${loadavg()[0]!.toFixed(2)}; ${rounds} rounds, ${perEngine} sequences per engine, ${tokens} tokens each, greedy)`);
    console.log(`  1 engine:  ${f(median(single))} tok/s [${single.map(f).join(', ')}]`);
    console.log(`  ${engines} engines: ${f(median(multi))} tok/s [${multi.map(f).join(', ')}]`);
    console.log(`  ${engines} engines / 1: median ${median(ratios).toFixed(3)} (rounds ${ratios.map((x) => x.toFixed(3)).join(', ')}; spread ${Math.min(...ratios).toFixed(3)}..${Math.max(...ratios).toFixed(3)})`);
    return 0;
  } finally {
    await Promise.all([one.close(1000), many.close(1000)]);
  }
}
