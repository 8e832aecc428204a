// `node bench/run.js timeline FILE`: each kernel's cost inside the real chain of a decode step, from the records of
// a profiling build (`node scripts/build-cuda.mjs --timeline`, run with RAPID_CUDA_TIMELINE=FILE). A record is
// "enter release id": when block (0,0,0) reached its wait on the previous kernel, when the wait released (globaltimer
// ns) and the launch's shape. A kernel's cost is its release to the next kernel's release; steps are cut at the
// boundary kernel (by default the widest grid launched once per step, the LM head), and the figures are medians over the
// last steps that have the usual number of kernels.
import { existsSync, readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { median } from './median.js';
import { formatBlockMarks, parseBlockMarks, summarizeBlockMarks } from './timeline-blocks.js';

export interface TimelineRecord {
  enter: number; // ns, relative to the earliest record
  release: number;
  id: bigint; // grid x (16 bits) | y (8) | z (8) | block x (12) | dynamic shared memory / 16 (20)
}

export interface KernelCost {
  id: bigint;
  name: string;
  perStep: number; // launches of this shape in one step
  medianUs: number; // median cost of one launch
  totalUs: number; // sum over the step's launches of their median costs
  waitUs: number; // median time block (0,0,0) spent waiting on the previous kernel
}

export interface TimelineSummary {
  steps: number;
  kernelsPerStep: number;
  stepUs: number; // median, boundary release to boundary release
  kernels: KernelCost[]; // largest total first
}

/** Parses "enter release id" lines (decimal ns, decimal ns, hex id); blank lines are skipped. */
export function parseTimeline(text: string): TimelineRecord[] {
  const raw: { enter: bigint; release: bigint; id: bigint }[] = [];
  for (const [i, line] of text.split('\n').entries()) {
    const t = line.trim();
    if (!t) continue;
    const f = t.split(/\s+/);
    if (f.length !== 3 || !/^\d+$/.test(f[0]!) || !/^\d+$/.test(f[1]!) || !/^[0-9a-f]+$/i.test(f[2]!))
      throw new Error(`timeline line ${i + 1}: expected "enter release id", got "${t}"`);
    raw.push({ enter: BigInt(f[0]!), release: BigInt(f[1]!), id: BigInt(`0x${f[2]!}`) });
  }
  if (raw.length === 0) return [];
  // globaltimer counts ns since an epoch (beyond 2^53): keep offsets from the earliest record.
  const t0 = raw.reduce((m, r) => (r.enter < m ? r.enter : m), raw[0]!.enter);
  return raw
    .map((r) => ({ enter: Number(r.enter - t0), release: Number(r.release - t0), id: r.id }))
    .sort((a, b) => a.release - b.release);
}

export function kernelName(id: bigint): string {
  const gx = Number(id >> 48n), gy = Number((id >> 40n) & 0xffn), gz = Number((id >> 32n) & 0xffn);
  const block = Number((id >> 20n) & 0xfffn), smem = Number(id & 0xfffffn) * 16;
  return `grid ${gx}x${gy}x${gz} block ${block} smem ${smem}`;
}

/**
 * The kernel that ends each decode step: among kernels seen 10+ times, those launched once per step (the median
 * number of records between two of their launches is at least half the largest such median), the widest grid: the
 * LM head. A prefill in the trace launches its kernels once per layer, so its wider grids never qualify.
 */
export function stepBoundary(records: readonly TimelineRecord[]): bigint | undefined {
  const at = new Map<bigint, number[]>();
  records.forEach((r, i) => {
    const a = at.get(r.id);
    if (a) a.push(i);
    else at.set(r.id, [i]);
  });
  const gaps = new Map<bigint, number>();
  for (const [id, idx] of at) if (idx.length >= 10) gaps.set(id, median(idx.slice(1).map((v, k) => v - idx[k]!)));
  const widest = Math.max(0, ...gaps.values());
  let cut: bigint | undefined;
  for (const [id, gap] of gaps) if (2 * gap >= widest && (cut === undefined || id >> 48n > cut >> 48n)) cut = id;
  return cut;
}

/** Per-kernel costs over the last `lastSteps` whole steps, cut at `boundary` (default: stepBoundary). */
export function summarizeTimeline(records: readonly TimelineRecord[], lastSteps = 60, boundary?: bigint): TimelineSummary {
  const cut = boundary ?? stepBoundary(records);
  if (cut === undefined) throw new Error('timeline: no kernel ran 10 times; nothing repeats like a decode step');
  const at = records.flatMap((r, i) => (r.id === cut ? [i] : []));
  const segments: TimelineRecord[][] = [];
  for (let k = 0; k + 1 < at.length; ++k) segments.push(records.slice(at[k]! + 1, at[k + 1]! + 1));
  const lengths = new Map<number, number>();
  for (const s of segments) lengths.set(s.length, (lengths.get(s.length) ?? 0) + 1);
  let usual = 0;
  for (const [len, n] of lengths) if (n > (lengths.get(usual) ?? 0)) usual = len;
  // Whole steps of the usual shape, each with the step after it (its first release ends this step's last kernel).
  const steps: { s: TimelineRecord[]; next: TimelineRecord | undefined }[] = [];
  segments.forEach((s, k) => {
    if (s.length === usual) steps.push({ s, next: segments[k + 1]?.[0] });
  });
  const kept = steps.slice(-lastSteps);
  if (kept.length === 0) throw new Error('timeline: no whole step between two boundary kernels');
  const ids = kept[0]!.s.map((r) => r.id);
  const byId = new Map<bigint, { costs: number[]; waits: number[]; perStep: number }>();
  ids.forEach((id, p) => {
    const costs: number[] = [], waits: number[] = [];
    for (const { s, next } of kept) {
      if (s[p]!.id !== id) continue; // a step of the usual length but another order: skipped at this position
      const nextRelease = p + 1 < s.length ? s[p + 1]!.release : next?.release;
      if (nextRelease !== undefined) costs.push(nextRelease - s[p]!.release);
      waits.push(s[p]!.release - s[p]!.enter);
    }
    const e = byId.get(id) ?? { costs: [], waits: [], perStep: 0 };
    e.perStep += 1;
    e.costs.push(median(costs));
    e.waits.push(median(waits));
    byId.set(id, e);
  });
  const kernels: KernelCost[] = [...byId].map(([id, e]) => ({
    id,
    name: kernelName(id),
    perStep: e.perStep,
    medianUs: median(e.costs) / 1e3,
    totalUs: e.costs.reduce((a, b) => a + b, 0) / 1e3,
    waitUs: median(e.waits) / 1e3,
  }));
  kernels.sort((a, b) => b.totalUs - a.totalUs);
  const stepUs = median(kept.map(({ s }) => s[s.length - 1]!.release - s[0]!.release)) / 1e3;
  return { steps: kept.length, kernelsPerStep: usual, stepUs, kernels };
}

export function formatTimeline(t: TimelineSummary): string {
  const lines = [
    `${t.steps} steps of ${t.kernelsPerStep} kernels; first release to last release ${t.stepUs.toFixed(1)} us (median)`,
    `  ${'kernel'.padEnd(40)} ${'per step'.padStart(8)} ${'us each'.padStart(9)} ${'us/step'.padStart(9)} ${'wait us'.padStart(8)}`,
  ];
  for (const k of t.kernels)
    lines.push(
      `  ${k.name.padEnd(40)} ${String(k.perStep).padStart(8)} ${k.medianUs.toFixed(2).padStart(9)} ${k.totalUs.toFixed(1).padStart(9)} ${k.waitUs.toFixed(2).padStart(8)}`,
    );
  return lines.join('\n');
}

export async function main(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { steps: { type: 'string' }, boundary: { type: 'string' } },
  });
  const file = positionals[0];
  if (!file) {
    process.stderr.write('usage: node bench/run.js timeline FILE [--steps N] [--boundary HEX_ID]\n');
    return 1;
  }
  const steps = values.steps === undefined ? 60 : Number(values.steps);
  if (!Number.isInteger(steps) || steps < 1) throw new Error(`--steps: "${values.steps}" is not a positive integer`);
  if (values.boundary !== undefined && !/^(0x)?[0-9a-f]+$/i.test(values.boundary))
    throw new Error(`--boundary: "${values.boundary}" is not a hex kernel id`);
  const boundary = values.boundary === undefined ? undefined : BigInt(values.boundary.startsWith('0x') ? values.boundary : `0x${values.boundary}`);
  process.stdout.write(`${formatTimeline(summarizeTimeline(parseTimeline(readFileSync(file, 'utf8')), steps, boundary))}\n`);
  const blocks = `${file}.blocks`;
  if (existsSync(blocks)) process.stdout.write(`${formatBlockMarks(summarizeBlockMarks(parseBlockMarks(readFileSync(blocks, 'utf8'))))}\n`);
  return 0;
}
