import { describe, expect, it } from 'vitest';
import { kernelName, parseTimeline, stepBoundary, summarizeTimeline } from '../../src/bench/timeline.js';

// A kernel id as timeline.cuh packs it.
const id = (gx: number, block: number, smem: number): bigint => (BigInt(gx) << 48n) | (BigInt(block) << 20n) | BigInt(smem / 16);

// Steps of [embed, (qkv, attn) x 2, head]: fixed costs in ns after each release, with globaltimer-sized timestamps.
function synthetic(steps: number): string {
  const base = 1_764_000_000_000_000_000n;
  const step: [bigint, number][] = [
    [id(1, 256, 0), 2000],
    [id(160, 256, 12416), 5000],
    [id(1, 128, 135808), 9000],
    [id(160, 256, 12416), 5400],
    [id(1, 128, 135808), 9400],
    [id(1187, 256, 12416), 88000],
  ];
  const lines: string[] = [];
  let t = 0n;
  for (let s = 0; s < steps; ++s)
    for (const [k, cost] of step) {
      lines.push(`${base + t - 700n} ${base + t} ${k.toString(16)}`);
      t += BigInt(cost);
    }
  return lines.join('\n');
}

describe('timeline', () => {
  it('names a kernel from its packed id', () => {
    expect(kernelName(id(172, 256, 94720))).toBe('grid 172x0x0 block 256 smem 94720');
  });

  it('gives each kernel its release-to-release cost inside the step', () => {
    const t = summarizeTimeline(parseTimeline(synthetic(20)), 10);
    expect(t.steps).toBe(10);
    expect(t.kernelsPerStep).toBe(6);
    expect(t.stepUs).toBeCloseTo((2000 + 5000 + 9000 + 5400 + 9400) / 1e3, 6);
    const byName = new Map(t.kernels.map((k) => [k.name, k]));
    const head = byName.get('grid 1187x0x0 block 256 smem 12416')!;
    expect(head.perStep).toBe(1);
    expect(head.totalUs).toBeCloseTo(88, 6);
    const qkv = byName.get('grid 160x0x0 block 256 smem 12416')!;
    expect(qkv.perStep).toBe(2);
    expect(qkv.totalUs).toBeCloseTo(10.4, 6);
    expect(qkv.medianUs).toBeCloseTo(5.2, 6);
    expect(qkv.waitUs).toBeCloseTo(0.7, 6);
    expect(t.kernels[0]!.name).toBe(head.name); // largest per-step total first
  });

  it('skips steps of another length and keeps the last ones', () => {
    const lines = synthetic(12).split('\n');
    lines.splice(6 * 5 + 2, 1); // one kernel of step 5 missing: that step is left out
    const t = summarizeTimeline(parseTimeline(lines.join('\n')), 60);
    expect(t.steps).toBe(10); // 11 steps between 12 heads, less the short one
    expect(summarizeTimeline(parseTimeline(lines.join('\n')), 4).steps).toBe(4);
  });

  it('cuts steps at the head even when a prefill in the trace launched wider grids once per layer', () => {
    const prefill = id(32768, 256, 0);
    const base = 1_763_000_000_000_000_000n;
    const pre = Array.from({ length: 24 }, (_, k) => `${base + BigInt(k) * 1000n} ${base + BigInt(k) * 1000n + 50n} ${(k % 2 ? id(64, 256, 0) : prefill).toString(16)}`);
    const records = parseTimeline([...pre, synthetic(20)].join('\n'));
    expect(stepBoundary(records)).toBe(id(1187, 256, 12416));
    const t = summarizeTimeline(records, 10);
    expect(t.kernelsPerStep).toBe(6);
    expect(t.kernels.some((k) => k.id === prefill)).toBe(false);
  });

  it('says what is wrong with a malformed line', () => {
    expect(() => parseTimeline('12 34\n')).toThrow(/line 1: expected "enter release id"/);
  });
});
