// The per-block phase marks of a profiling build (`node scripts/build-cuda.mjs --timeline`, file FILE.blocks next to
// the timeline FILE): thread 0 of every block of the one-token matmul, attention and MoE kernels writes, at its end,
// when it started, when its wait on the previous kernel released, and when it finished each phase. Per launch kind,
// the phases' times after the launch's release (its earliest block's) show where a kernel's cost goes: the wait,
// staging x, the weight walk, the epilogue, and how far the slowest block trails the median one. A launch of more
// blocks than fit at once (the LM head) runs in waves: its later blocks start after the release, and its figures are
// rougher.
import { median } from './median.js';

/** Phase names of each tag (timeline.cuh's TL_FLUSH tags): marks 0..4. */
const PHASES: Record<number, { kind: string; marks: string[] }> = {
  1: { kind: 'matmul', marks: ['start', 'released', 'x staged', 'walked', 'end'] },
  2: { kind: 'glu', marks: ['start', 'released', 'x staged', 'walked', 'end'] },
  3: { kind: 'attention', marks: ['start', 'released', 'keys done', 'counted', 'end'] },
  4: { kind: 'moe select', marks: ['start', 'released', 'routed', 'tiles cut', 'end'] },
  5: { kind: 'moe gate/up', marks: ['start', 'released', 'x staged', 'walked', 'end'] },
  6: { kind: 'moe down', marks: ['start', 'released', 'x staged', 'walked', 'end'] },
};

export interface BlockRecord {
  marks: (number | undefined)[]; // ns relative to the earliest mark; undefined: not reached
  tag: number;
  groups: number; // matmul: the weight's K groups (tells launches of one grid apart); attention: 0
  blocks: number; // blocks in the launch's grid
  block: number; // this block's linear index
}

/** Parses "m0 m1 m2 m3 m4 idhex" lines (globaltimer ns, 0 = unmarked; id = tag << 56 | groups << 32 | blocks << 16 | block). */
export function parseBlockMarks(text: string): BlockRecord[] {
  const raw: { marks: bigint[]; id: bigint }[] = [];
  for (const [i, line] of text.split('\n').entries()) {
    const t = line.trim();
    if (!t) continue;
    const f = t.split(/\s+/);
    if (f.length !== 6 || !f.slice(0, 5).every((v) => /^\d+$/.test(v)) || !/^[0-9a-f]+$/i.test(f[5]!))
      throw new Error(`block marks line ${i + 1}: expected "m0 m1 m2 m3 m4 id", got "${t}"`);
    raw.push({ marks: f.slice(0, 5).map((v) => BigInt(v)), id: BigInt(`0x${f[5]!}`) });
  }
  let t0: bigint | undefined;
  for (const r of raw) for (const m of r.marks) if (m !== 0n && (t0 === undefined || m < t0)) t0 = m;
  return raw.map((r) => {
    // Tag 4 is an attention block that also merged its token's partitions: the same launch as tag 3.
    const tag = Number(r.id >> 56n);
    return {
      marks: r.marks.map((m) => (m === 0n || t0 === undefined ? undefined : Number(m - t0))),
      tag: tag === 4 ? 3 : tag,
      groups: Number((r.id >> 32n) & 0xffffn),
      blocks: Number((r.id >> 16n) & 0xffffn),
      block: Number(r.id & 0xffffn),
    };
  });
}

export interface PhaseTimes {
  mark: string;
  p50Us: number; // median block, median over launches
  maxUs: number; // slowest block, median over launches
}

export interface LaunchKind {
  kind: string;
  groups: number; // matmul: K groups of the weight; attention: 0
  blocks: number; // grid size
  launches: number; // launches summarized
  reporting: number; // blocks that wrote marks per launch (median; attention blocks without keys write none)
  phases: PhaseTimes[];
}

// Blocks of one launch pass their wait within a few microseconds of each other (the H200's 3B head, in waves: gaps up to
// 5.4 us); launches of one kind, grid and K are a layer apart (20 us and more). A longer gap in the sorted release
// marks starts a new launch.
const LAUNCH_GAP_NS = 10000;

/** Groups the records into launches (per tag and grid) and summarizes the last `lastLaunches` of each. */
export function summarizeBlockMarks(records: readonly BlockRecord[], lastLaunches = 200): LaunchKind[] {
  const byKind = new Map<string, BlockRecord[]>();
  for (const r of records) {
    if (r.marks[1] === undefined || !PHASES[r.tag]) continue;
    const key = `${r.tag}/${r.blocks}/${r.groups}`;
    const list = byKind.get(key) ?? [];
    list.push(r);
    byKind.set(key, list);
  }
  const out: LaunchKind[] = [];
  for (const list of byKind.values()) {
    list.sort((a, b) => a.marks[1]! - b.marks[1]!);
    const launches: BlockRecord[][] = [];
    let cur: BlockRecord[] = [];
    for (const r of list) {
      const last = cur[cur.length - 1];
      if (last && (r.marks[1]! - last.marks[1]! > LAUNCH_GAP_NS || cur.length === r.blocks)) {
        launches.push(cur);
        cur = [];
      }
      cur.push(r);
    }
    if (cur.length) launches.push(cur);
    const kept = launches.slice(-lastLaunches);
    const { tag, blocks, groups } = list[0]!;
    const names = PHASES[tag]!.marks;
    const phases = names.map((mark, k) => {
      const p50: number[] = [], max: number[] = [];
      for (const l of kept) {
        const release = l[0]!.marks[1]!; // a launch's records are in release order (list was sorted)
        const at = l.flatMap((r) => (r.marks[k] === undefined ? [] : [r.marks[k]! - release]));
        if (at.length === 0) continue;
        p50.push(median(at));
        max.push(Math.max(...at));
      }
      return { mark, p50Us: median(p50) / 1e3, maxUs: median(max) / 1e3 };
    });
    out.push({ kind: PHASES[tag]!.kind, groups, blocks, launches: kept.length, reporting: median(kept.map((l) => l.length)), phases });
  }
  // The launch kinds of a step in a stable order: by tag, then grid size.
  return out.sort((a, b) => a.kind.localeCompare(b.kind) || a.blocks - b.blocks || a.groups - b.groups);
}

export function formatBlockMarks(kinds: readonly LaunchKind[]): string {
  const lines = ['per-block phases, us after the launch\'s release (median block / slowest block, medians over launches):'];
  for (const k of kinds) {
    const phases = k.phases
      .filter((p) => Number.isFinite(p.p50Us))
      .map((p) => `${p.mark} ${p.p50Us.toFixed(2)}/${p.maxUs.toFixed(2)}`)
      .join('  ');
    const name = `${k.kind} ${k.blocks} blocks${k.groups ? ` ${k.groups} groups` : ''}`;
    lines.push(`  ${name.padEnd(32)} ${`${k.launches} launches`.padStart(13)}  ${phases}`);
  }
  return lines.join('\n');
}
