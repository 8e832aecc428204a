// Summary statistics of latency and throughput samples: linear-interpolated percentiles (numpy's
// default), mean, min, max. Empty sample sets give null figures rather than a misleading 0.

export interface Summary {
  count: number;
  mean: number | null;
  min: number | null;
  max: number | null;
  p50: number | null;
  p90: number | null;
  p99: number | null;
}

/** The p-th percentile (0..100) of sorted ascending values, interpolating between ranks. */
export function percentileSorted(sorted: readonly number[], p: number): number | null {
  if (sorted.length === 0) return null;
  if (p <= 0) return sorted[0]!;
  if (p >= 100) return sorted[sorted.length - 1]!;
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  const frac = rank - lo;
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * frac;
}

export function percentile(values: readonly number[], p: number): number | null {
  return percentileSorted([...values].sort((a, b) => a - b), p);
}

export function summarize(values: readonly number[]): Summary {
  const s = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (s.length === 0) return { count: 0, mean: null, min: null, max: null, p50: null, p90: null, p99: null };
  let sum = 0;
  for (const v of s) sum += v;
  return {
    count: s.length,
    mean: sum / s.length,
    min: s[0]!,
    max: s[s.length - 1]!,
    p50: percentileSorted(s, 50),
    p90: percentileSorted(s, 90),
    p99: percentileSorted(s, 99),
  };
}

export function mean(values: readonly number[]): number | null {
  if (values.length === 0) return null;
  let sum = 0;
  for (const v of values) sum += v;
  return sum / values.length;
}

/** Rounds for display and JSON: null stays null. */
export function round(x: number | null, digits = 1): number | null {
  if (x === null) return null;
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}
