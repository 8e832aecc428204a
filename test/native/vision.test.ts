// Runs the native vision suite (native/test/vision_test.cpp): every VLM fixture's tower + projector
// (Qwen2.5-VL, Qwen3-VL with DeepStack, Gemma 3 SigLIP; HF and MLX layouts, a quantized tower)
// against transformers' features, plus the encoder's input validation. Skips without g++ or fixtures.
// Builds only what the towers use (the include closure of vision/ and the test), with the native suites'
// object cache (test/helpers/native-suite.ts).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildNativeSuite, hasCompiler, headerClosure } from '../helpers/native-suite.js';

const root = resolve(import.meta.dirname, '..', '..');
const src = join(root, 'native', 'src');
const fixtures = join(root, 'test', 'fixtures', 'vlm');

// Model dirs whose checkpoint has a vision tower and a reference to compare with.
const visionDirs = existsSync(fixtures)
  ? readdirSync(fixtures).filter((d) => {
      const dir = join(fixtures, d);
      if (!existsSync(join(dir, 'reference.json')) || !existsSync(join(dir, 'model.safetensors'))) return false;
      if (!existsSync(join(dir, 'config.json'))) return false;
      const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { vision_config?: unknown };
      return cfg.vision_config !== undefined;
    })
  : [];

/**
 * The sources the test binary needs besides the test: every vision/*.cpp, and for each header they and the
 * test reach the .cpp files that implement it (dir/name.cpp and dir/name_*.cpp, e.g. cpu/kernels_x86.cpp).
 */
function sources(): string[] {
  const test = join(root, 'native', 'test', 'vision_test.cpp');
  const out = new Set<string>([test]);
  for (const f of readdirSync(join(src, 'vision'))) if (f.endsWith('.cpp')) out.add(join(src, 'vision', f));
  const todo = [...out];
  for (let f = todo.pop(); f !== undefined; f = todo.pop()) {
    for (const h of headerClosure(f)) {
      const stem = basename(h).replace(/\.h$/, '');
      for (const c of readdirSync(dirname(h))) {
        const p = join(dirname(h), c);
        if (c.endsWith('.cpp') && (c === `${stem}.cpp` || c.startsWith(`${stem}_`)) && !out.has(p)) {
          out.add(p);
          todo.push(p);
        }
      }
    }
  }
  return [...out].filter((u) => u !== test).sort();
}

const work = mkdtempSync(join(tmpdir(), 'rapid-vision-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe.skipIf(!hasCompiler || visionDirs.length === 0)('native vision encoders vs transformers', () => {
  it('builds warning-free and matches every fixture tower', () => {
    const exe = buildNativeSuite('vision_test', sources(), work, 'g++', process.arch === 'x64' ? ['-mavx2', '-mfma', '-mf16c'] : []);
    const run = spawnSync(exe, [fixtures], { encoding: 'utf8', cwd: root });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    const m = /(\d+) vision models, (\d+) passed, 0 failed/.exec(run.stdout);
    expect(m, run.stdout).not.toBeNull();
    expect(Number(m![1])).toBe(visionDirs.length);
    // Every image of every fixture was compared.
    expect(run.stdout).toMatch(/rel err/);
  }, 900_000);
});
