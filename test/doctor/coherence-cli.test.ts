// `rapid doctor --coherence MODEL` end to end on a small golden subset (a passing fact, image and
// JSON item, a failing item when the shipped model has one, and a fact whose expected answer is
// deliberately wrong so a failure always shows): the report's scores and per-category lines, the
// failure listing, --json, and the exit code against --min-score.
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Command } from 'commander';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { registerDoctor } from '../../src/cli/commands/doctor.js';
import { loadGoldenSet } from '../../src/doctor/coherence/golden-set.js';
import { scoreOutputs, type CoherenceReport } from '../../src/doctor/coherence/run-gate.js';

const root = resolve(import.meta.dirname, '..', '..');
const modelDir = join(root, 'models', 'tiny-vlm');
const refFile = join(root, 'test', 'fixtures', 'tiny-vlm', 'golden_reference_f32.json');
const ready = existsSync(join(modelDir, 'model.safetensors')) && existsSync(refFile);

/** A golden/ folder with a few items picked by their reference result; the schema comes from examples/. */
function subset(): { dir: string; ids: string[]; passed: number } {
  const set = loadGoldenSet(join(modelDir, 'golden'));
  const ref = JSON.parse(readFileSync(refFile, 'utf8')) as { outputs: Record<string, string> };
  const run = scoreOutputs(set, ref.outputs);
  const pick = (pred: (cat: string) => boolean, ok: boolean) => run.results.find((r) => pred(r.category) && r.ok === ok);
  const chosen = [
    pick((c) => c === 'fact', true),
    pick((c) => c.startsWith('image_'), true),
    pick((c) => c === 'json', true) ?? pick((c) => c === 'json', false),
    run.results.find((r) => !r.ok),
  ].filter((r, i, a) => r !== undefined && a.indexOf(r) === i);
  const base = mkdtempSync(join(tmpdir(), 'rapid-coherence-'));
  const golden = join(base, 'golden');
  mkdirSync(golden);
  const items = chosen.map((r) => set.items.find((it) => it.id === r!.id)!);
  const fact = items.find((it) => it.category === 'fact')!;
  items.push({ ...fact, id: 'x-wrong', expected: `${String(fact.expected)} and more` });
  writeFileSync(join(golden, 'golden.jsonl'), items.map((it) => JSON.stringify(it)).join('\n') + '\n');
  cpSync(join(set.dir, 'words.txt'), join(golden, 'words.txt'));
  for (const it of items) if (it.image) cpSync(join(modelDir, it.image), join(base, it.image));
  return { dir: golden, ids: items.map((it) => it.id), passed: chosen.filter((r) => r!.ok).length };
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

describe.skipIf(!ready)('rapid doctor --coherence', () => {
  const sub = ready ? subset() : { dir: '', ids: [], passed: 0 };
  const total = sub.ids.length;
  afterAll(() => rmSync(resolve(sub.dir, '..'), { recursive: true, force: true }));

  it('prints per-concurrency and per-category scores and the failures; exits 1 below --min-score', async () => {
    const pct = (sub.passed / total) * 100;
    const { code, out } = await doctor(['--coherence', modelDir, '--golden', sub.dir, '--concurrency', '1,4', '--precision', 'exact', '--min-score', '100']);
    expect(out).toContain(`concurrency  1: ${sub.passed}/${total} = ${pct.toFixed(1)}%`);
    expect(out).toContain(`concurrency  4: ${sub.passed}/${total} = ${pct.toFixed(1)}%`);
    expect(out).toMatch(/\(fact 1\/2, image \d\/\d, json \d\/1/);
    expect(code).toBe(1);
    expect(out).toContain('failures at concurrency 1:');
    expect(out).toMatch(/x-wrong \[fact\] wrong answer/);
    expect(out).toContain('FAILED: threshold 100.0% at every concurrency');
  }, 120_000);

  it('--json gives the report; a threshold at the measured score passes', async () => {
    const min = String(Math.floor((sub.passed / total) * 100));
    const { code, out } = await doctor(['--coherence', modelDir, '--golden', sub.dir, '--concurrency', '2', '--precision', 'exact', '--min-score', min, '--json']);
    const report = JSON.parse(out) as CoherenceReport;
    expect(report.runs.map((r) => [r.concurrency, r.passed, r.total])).toEqual([[2, sub.passed, total]]);
    expect(report.runs[0]!.results.map((r) => r.id)).toEqual(sub.ids);
    expect(report.ok).toBe(true);
    expect(code).toBe(0);
  }, 120_000);
});
