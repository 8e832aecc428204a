// Serving benchmark: aggregate decode throughput of the continuous-batching engine at several
// concurrency levels on the random-weight Qwen2.5-0.5B-shaped 4-bit checkpoint (prompt 128 /
// output 128 by default), with time-to-first-token and inter-token latency p50/p99. It drives the
// Engine in-process (HTTP adds nothing measurable at these rates); prompts are token ids.
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { Engine } from '../engine/engine.js';
import { resolveSamplingParams } from '../engine/sampling-params.js';
import { loadNative } from '../native/binding.js';
import { ensureRandomCheckpoint } from './random-checkpoint.js';

export interface ServingLevel {
  concurrency: number;
  requests: number;
  generatedTokens: number;
  wallS: number;
  /** Generated tokens / wall time of the whole level (prefill included). */
  outputTokS: number;
  /** Tokens generated while every request was decoding / that window (llama-batched-bench's S_TG). */
  decodeTokS: number;
  ttftMs: { p50: number; p99: number };
  itlMs: { p50: number; p99: number };
  steps: number;
  meanRowsPerStep: number;
}

function pct(xs: number[], p: number): number {
  if (xs.length === 0) return 0;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

const round = (x: number) => Math.round(x * 10) / 10;

export async function runLevel(engine: Engine, concurrency: number, promptTokens: number, genTokens: number, vocab: number, salt: number): Promise<ServingLevel> {
  let s = (salt * 2654435761) >>> 0;
  const rnd = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0), s);
  const params = resolveSamplingParams({ temperature: 0, maxTokens: genTokens }, { maxTokens: genTokens });
  const steps0 = engine.stats().steps;
  const t0 = performance.now();
  const ttft: number[] = [];
  const itl: number[] = [];
  const firstAt: number[] = [];
  const doneAt: number[] = [];
  const tokenTimes: number[] = [];
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      const promptIds = Array.from({ length: promptTokens }, () => 10 + (rnd() % (vocab - 20)));
      const start = performance.now();
      let last = 0;
      for await (const ev of engine.generate({ promptIds, params })) {
        const now = performance.now();
        if (ev.type === 'delta') {
          tokenTimes.push(now);
          if (last === 0) {
            ttft.push(now - start);
            firstAt.push(now);
          } else itl.push(now - last);
          last = now;
        } else doneAt.push(now);
      }
    }),
  );
  const wall = performance.now() - t0;
  const allDecoding = Math.max(...firstAt);
  const end = Math.max(...doneAt);
  const inWindow = tokenTimes.filter((t) => t > allDecoding && t <= end).length;
  const steps = engine.stats().steps - steps0;
  return {
    concurrency,
    requests: concurrency,
    generatedTokens: tokenTimes.length,
    wallS: Math.round(wall / 100) / 10,
    outputTokS: round((tokenTimes.length / wall) * 1000),
    decodeTokS: end > allDecoding ? round((inWindow / (end - allDecoding)) * 1000) : 0,
    ttftMs: { p50: round(pct(ttft, 50)), p99: round(pct(ttft, 99)) },
    itlMs: { p50: round(pct(itl, 50)), p99: round(pct(itl, 99)) },
    steps,
    meanRowsPerStep: round((tokenTimes.length + concurrency * Math.ceil(promptTokens / 512)) / Math.max(1, steps)),
  };
}

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      threads: { type: 'string' },
      prompt: { type: 'string' },
      gen: { type: 'string' },
      levels: { type: 'string' },
      precision: { type: 'string' },
      'max-batched-tokens': { type: 'string' },
      json: { type: 'boolean' },
    },
  });
  const threads = Number(values.threads ?? 2);
  const promptTokens = Number(values.prompt ?? 128);
  const genTokens = Number(values.gen ?? 128);
  const levels = (values.levels ?? '1,2,4,8,16').split(',').map(Number);
  const precision = (values.precision ?? 'fast') as 'exact' | 'fast';
  const ckpt = ensureRandomCheckpoint();
  const native = loadNative();
  const maxC = Math.max(...levels);
  // f32 K and V of 24 layers x 2 KV heads x 64 dims per token, doubled for slack.
  const kvBytesPerToken = 24 * 2 * 2 * 64 * 4;
  const kvCacheBytes = Math.max(64 << 20, maxC * (promptTokens + genTokens + 32) * kvBytesPerToken * 2);
  const model = native.addon.loadModel(ckpt.dir, { threads, precision, kvCacheBytes });
  const info = model.info();
  const engine = new Engine({
    model,
    // One visible character per token, so every token yields a delta to time.
    newTextStream: () => ({ push: () => '.', flush: () => '' }),
    stopTokenIds: [],
    maxNumSeqs: maxC,
    maxBatchedTokens: Number(values['max-batched-tokens'] ?? 512),
    enablePrefixCache: false,
    stepTimeoutMs: 600_000,
  });
  const load0 = loadavg()[0]!;
  // Warm-up: page in the weights, size scratch buffers.
  await runLevel(engine, 1, 16, 4, info.vocabSize, 999);
  const results: ServingLevel[] = [];
  for (const c of levels) {
    const r = await runLevel(engine, c, promptTokens, genTokens, info.vocabSize, c);
    results.push(r);
    if (!values.json) {
      process.stderr.write(
        `c=${String(c).padStart(2)}  decode ${String(r.decodeTokS).padStart(6)} tok/s  output ${String(r.outputTokS).padStart(6)} tok/s  ` +
          `TTFT p50 ${r.ttftMs.p50} ms p99 ${r.ttftMs.p99} ms  ITL p50 ${r.itlMs.p50} ms p99 ${r.itlMs.p99} ms  (${r.wallS}s, ${r.steps} steps)\n`,
      );
    }
  }
  const report = {
    date: new Date().toISOString(),
    cpu: cpus()[0]?.model ?? 'unknown',
    load: { start: load0, end: loadavg()[0]! },
    binary: native.path,
    checkpoint: ckpt.dir,
    model: { family: info.family, quantization: info.quantization, threads: info.threads, precision: info.precision, blockSize: info.blockSize, numBlocks: info.numBlocks },
    options: { promptTokens, genTokens, levels, maxBatchedTokens: Number(values['max-batched-tokens'] ?? 512) },
    levels: results,
  };
  process.stdout.write(`${JSON.stringify(report, null, values.json ? 0 : 2)}\n`);
  model.close();
  return 0;
}
