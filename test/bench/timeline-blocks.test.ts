import { describe, expect, it } from 'vitest';
import { formatBlockMarks, parseBlockMarks, summarizeBlockMarks } from '../../src/bench/timeline-blocks.js';

// An id as timeline.cuh's block_flush packs it.
const id = (tag: number, groups: number, blocks: number, block: number): string =>
  ((BigInt(tag) << 56n) | (BigInt(groups) << 32n) | (BigInt(blocks) << 16n) | BigInt(block)).toString(16);

const base = 1_764_000_000_000_000_000n;
// One record: marks as ns offsets from `release` (null: unmarked), globaltimer-sized.
function rec(release: number, offs: (number | null)[], tag: number, groups: number, blocks: number, block: number): string {
  const m = offs.map((o) => (o === null ? '0' : String(base + BigInt(release + o))));
  return `${m.join(' ')} ${id(tag, groups, blocks, block)}`;
}

// Launches of a 4-block matmul (32 groups) 40 us apart, block b staging 200·b ns later; between them a 3-block
// attention launch whose block 2 merges (tag 4); a 4-block matmul with 172 groups is another kind.
function synthetic(launches: number): string {
  const lines: string[] = [];
  for (let l = 0; l < launches; ++l) {
    const r = l * 40_000;
    for (let b = 0; b < 4; ++b) lines.push(rec(r, [-3000, b === 3 ? 400 : 0, 1000 + 200 * b, 3000 + 200 * b, 3500 + 200 * b], 1, 32, 4, b));
    for (let b = 0; b < 3; ++b)
      lines.push(rec(r + 10_000, [-2000, 0, 1500, 2000, b === 2 ? 4000 : 2000], b === 2 ? 4 : 3, 0, 3, b));
    for (let b = 0; b < 4; ++b) lines.push(rec(r + 20_000, [-1000, 0, 500, 2500, 3000], 1, 172, 4, b));
  }
  return lines.join('\n');
}

describe('timeline block marks', () => {
  it('summarizes each launch kind\'s phases after its release', () => {
    const kinds = summarizeBlockMarks(parseBlockMarks(synthetic(6)));
    expect(kinds.map((k) => `${k.kind}/${k.blocks}/${k.groups}`)).toEqual(['attention/3/0', 'matmul/4/32', 'matmul/4/172']);
    const mm = kinds[1]!;
    expect(mm.launches).toBe(6);
    expect(mm.reporting).toBe(4);
    const phase = new Map(mm.phases.map((p) => [p.mark, p]));
    expect(phase.get('start')!.p50Us).toBeCloseTo(-3, 6);
    expect(phase.get('released')!.maxUs).toBeCloseTo(0.4, 6); // the block that passed its wait late
    expect(phase.get('x staged')!.p50Us).toBeCloseTo(1.3, 6); // median of 1.0, 1.2, 1.4, 1.6
    expect(phase.get('x staged')!.maxUs).toBeCloseTo(1.6, 6);
    expect(phase.get('end')!.maxUs).toBeCloseTo(4.1, 6);
    const attn = kinds[0]!;
    expect(attn.launches).toBe(6); // the merging block (tag 4) is part of its launch
    expect(attn.reporting).toBe(3);
    expect(attn.phases.find((p) => p.mark === 'end')!.maxUs).toBeCloseTo(4, 6);
    expect(attn.phases.find((p) => p.mark === 'end')!.p50Us).toBeCloseTo(2, 6);
    expect(formatBlockMarks(kinds)).toMatch(/matmul 4 blocks 172 groups +6 launches {2}start -1\.00\/-1\.00/);
  });

  it('keeps only the last launches of a kind', () => {
    const kinds = summarizeBlockMarks(parseBlockMarks(synthetic(10)), 3);
    expect(kinds.every((k) => k.launches === 3)).toBe(true);
  });

  it('says what is wrong with a malformed line', () => {
    expect(() => parseBlockMarks('1 2 3 4 5\n')).toThrow(/line 1: expected "m0 m1 m2 m3 m4 id"/);
  });
});
