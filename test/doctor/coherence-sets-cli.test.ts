// `rapid doctor --coherence MODEL --golden A,B --per-category` on the shipped model: one report per set
// (a golden subset and an independent subset with PNG and JPEG pictures), the hallucination count on
// single-shape items, and the exit code following the reports. Scores are whatever the shipped weights
// give; the gate itself is asserted by independent-gate.test.ts.
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Command } from 'commander';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { registerDoctor } from '../../src/cli/commands/doctor.js';
import { loadGoldenSet, type GoldenItem } from '../../src/doctor/coherence/golden-set.js';
import type { CoherenceReport } from '../../src/doctor/coherence/run-gate.js';

const root = resolve(import.meta.dirname, '..', '..');
const modelDir = join(root, 'models', 'tiny-vlm');
const ready = existsSync(join(modelDir, 'model.safetensors')) && existsSync(join(modelDir, 'independent', 'golden.jsonl'));

/** A copy of a few items of a set (and their images) under base/name. */
function subset(base: string, name: string, pick: (items: GoldenItem[]) => GoldenItem[]): string {
  const set = loadGoldenSet(join(modelDir, name));
  const dir = join(base, name);
  mkdirSync(dir, { recursive: true });
  const items = pick(set.items);
  writeFileSync(join(dir, 'golden.jsonl'), items.map((it) => JSON.stringify(it)).join('\n') + '\n');
  cpSync(join(set.dir, 'words.txt'), join(dir, 'words.txt'));
  for (const it of items) if (it.image) cpSync(join(modelDir, it.image), join(base, it.image));
  return dir;
}

async function doctor(args: string[]): Promise<{ code: number; out: string }> {
  process.exitCode = undefined;
  const program = new Command('rapid').exitOverride();
  registerDoctor(program);
  let out = '';
  const spy = vi.spyOn(process.stdout, 'write').mockImplementation((s: string | Uint8Array) => ((out += String(s)), true));
  const err = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
  try {
    await program.parseAsync(['node', 'rapid', 'doctor', ...args]);
  } finally {
    spy.mockRestore();
    err.mockRestore();
  }
  const code = (process.exitCode as number | undefined) ?? 0;
  process.exitCode = undefined;
  return { code, out };
}

describe.skipIf(!ready)('rapid doctor --coherence with several sets', () => {
  const base = mkdtempSync(join(tmpdir(), 'rapid-sets-'));
  afterAll(() => rmSync(base, { recursive: true, force: true }));
  const golden = ready ? subset(base, 'golden', (items) => items.filter((i) => i.category === 'fact').slice(0, 2)) : '';
  const independent = ready
    ? subset(base, 'independent', (items) => [
        items.find((i) => i.absent && i.image?.endsWith('.png'))!,
        items.find((i) => i.absent && i.image?.endsWith('.jpg'))!,
        items.find((i) => i.category === 'refusal' && !i.image)!,
      ])
    : '';

  it('--json gives one report per set; --per-category sets the rule; the exit code follows the reports', async () => {
    const { code, out } = await doctor(['--coherence', modelDir, '--golden', `${golden},${independent}`, '--concurrency', '1', '--precision', 'exact', '--per-category', '--json']);
    const reports = JSON.parse(out) as CoherenceReport[];
    expect(reports.map((r) => [r.goldenDir, r.perCategory, r.runs[0]!.total])).toEqual([
      [golden, true, 2],
      [independent, true, 3],
    ]);
    const run = reports[1]!.runs[0]!;
    expect(run.hallucinations).toBe(run.results.filter((r) => r.why.startsWith('names a shape not in the picture')).length);
    expect(code).toBe(reports.every((r) => r.ok) ? 0 : 1);
  }, 180_000);

  it('the text report names each set and the hallucination count', async () => {
    const { out } = await doctor(['--coherence', modelDir, '--golden', independent, '--concurrency', '1', '--precision', 'exact', '--per-category']);
    expect(out).toContain(`golden set ${independent}`);
    expect(out).toMatch(/concurrency {2}1: \d\/3 = [\d.]+% {2}\(.*; \d naming a shape not in the picture\)/);
    expect(out).toMatch(/threshold 95\.0% in every category, no shape named that is not in the picture, at every concurrency/);
  }, 180_000);
});
