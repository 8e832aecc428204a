// The standalone native test programs (native/test/<name>.cpp, each printing 'N passed, M failed' and exiting
// non-zero on a failure): built with g++ (warnings as errors) in a fresh temporary folder and run from the
// repository root. The suites under test/native share this.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { expect } from 'vitest';

export const ROOT = resolve(import.meta.dirname, '..', '..');
export const NATIVE_SRC = join(ROOT, 'native', 'src');
export const hasCompiler = spawnSync('g++', ['--version']).status === 0;

/** Every .cpp file of native/src/<dir>. */
export function nativeSources(dir: string): string[] {
  return readdirSync(join(NATIVE_SRC, dir))
    .filter((f) => f.endsWith('.cpp'))
    .map((f) => join(NATIVE_SRC, dir, f));
}

/** Builds native/test/<program>.cpp with `sources` and expects a clean build and a run with no failed check. */
export function buildAndRunNativeSuite(program: string, sources: string[]): void {
  const work = mkdtempSync(join(tmpdir(), `rapid-${program}-`));
  try {
    const exe = join(work, program);
    const build = spawnSync(
      'g++',
      ['-O2', '-std=c++20', '-Wall', '-Wextra', '-Werror', '-pthread', `-I${NATIVE_SRC}`, join(ROOT, 'native', 'test', `${program}.cpp`), ...sources, '-o', exe],
      { encoding: 'utf8' },
    );
    expect(build.status, build.stderr).toBe(0);
    const run = spawnSync(exe, [], { encoding: 'utf8', cwd: ROOT });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toMatch(/\b\d+ passed, 0 failed\b/);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
