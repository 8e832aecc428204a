// Command-line pieces the bench entry points (bench:cpu, bench:cuda, bench:moe, bench:vision, gemma4) share.
/** parseArgs options of the random-weight decode benches (bench:moe, gemma4), as their USAGE lists them. */
export const DECODE_BENCH_ARGS = {
  steps: { type: 'string' },
  prompt: { type: 'string' },
  threads: { type: 'string' },
  precision: { type: 'string' },
  dir: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** `--name` as an integer >= `min` (`dflt` when absent). */
export function intOption(v: string | undefined, name: string, dflt: number, min: 0 | 1 = 1): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be a ${min === 1 ? 'positive' : 'non-negative'} integer, got ${v}`);
  return n;
}

export function precisionOption(v: string | undefined): 'fast' | 'exact' {
  const precision = v ?? 'fast';
  if (precision !== 'fast' && precision !== 'exact') throw new Error(`--precision must be fast or exact, got ${precision}`);
  return precision;
}

/** How a decode bench picks tokens: temperature 0 = greedy; topP 1 = no nucleus truncation. */
export interface BenchSampling {
  temperature: number;
  topP: number;
}

/** --temperature and --top-p: a number >= 0 (absent: 0, greedy) and one in (0, 1] (absent: 1, off). */
export function samplingOptions(temperature: string | undefined, topP: string | undefined): BenchSampling {
  const t = Number(temperature ?? 0);
  if (!Number.isFinite(t) || t < 0) throw new Error(`--temperature must be a number >= 0, got ${String(temperature)}`);
  const p = Number(topP ?? 1);
  if (!(p > 0 && p <= 1)) throw new Error(`--top-p must be a number in (0, 1], got ${String(topP)}`);
  return { temperature: t, topP: p };
}

/** The stderr line naming the checkpoint, its size and whether it was cached (`t0`: when ensuring it began). */
export function reportCheckpoint(ck: { dir: string; bytes: number; cached: boolean }, t0: number): void {
  process.stderr.write(`checkpoint ${ck.dir} (${(ck.bytes / 2 ** 30).toFixed(2)} GiB, ${ck.cached ? 'cached' : `generated in ${((performance.now() - t0) / 1000).toFixed(1)} s`})\n`);
}
