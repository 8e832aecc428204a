// The standalone native test programs (native/test/<name>.cpp, each printing 'N passed, M failed' and exiting
// non-zero on a failure): built with g++ (warnings as errors) in a fresh temporary folder and run from the
// repository root. The suites under test/native share this; a cross compiler and an emulator (qemu) run
// the same programs for another architecture.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, expect } from 'vitest';
import { osCpuFlags } from '../../src/doctor/checks/cpu-features.js';

export const ROOT = resolve(import.meta.dirname, '..', '..');
export const NATIVE_SRC = join(ROOT, 'native', 'src');
export const hasCompiler = spawnSync('g++', ['--version']).status === 0;

/** The x86 families the OS says this CPU can run, best first, as the addon names them. */
export function x86Families(): string[] {
  if (process.arch !== 'x64') return [];
  const f = new Set(osCpuFlags());
  const out: string[] = [];
  if (['avx2', 'fma', 'f16c', 'avx512f', 'avx512bw', 'avx512vl', 'avx512_vnni'].every((x) => f.has(x))) out.push('avx512-vnni');
  if (['avx2', 'fma', 'f16c'].every((x) => f.has(x))) out.push('avx2');
  return out;
}

/** Every .cpp file of native/src/<dir>. */
export function nativeSources(dir: string): string[] {
  return readdirSync(join(NATIVE_SRC, dir))
    .filter((f) => f.endsWith('.cpp'))
    .map((f) => join(NATIVE_SRC, dir, f));
}

/** The sources of the kernel suite (native/test/kernels_test.cpp): formats, quantization, CPU kernels. */
export function kernelSuiteSources(): string[] {
  return [...nativeSources('format'), ...nativeSources('quant'), ...nativeSources('cpu')];
}

/** Builds native/test/<program>.cpp with `sources` into `dir` with `cxx`, expecting a warning-free build. */
export function buildNativeSuite(program: string, sources: string[], dir: string, cxx = 'g++'): string {
  const exe = join(dir, program);
  const build = spawnSync(
    cxx,
    ['-O2', '-std=c++20', '-Wall', '-Wextra', '-Werror', '-pthread', `-I${NATIVE_SRC}`, join(ROOT, 'native', 'test', `${program}.cpp`), ...sources, '-o', exe],
    { encoding: 'utf8' },
  );
  expect(build.status, build.stderr).toBe(0);
  return exe;
}

/** Builds native/test/<program>.cpp before the enclosing describe's tests (removed after them); the getter
 *  returns the executable. */
export function useNativeSuite(program: string, sources: () => string[]): () => string {
  let work = '';
  let exe = '';
  beforeAll(() => {
    work = mkdtempSync(join(tmpdir(), `rapid-${program}-`));
    exe = buildNativeSuite(program, sources(), work);
  }, 240_000);
  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });
  return () => exe;
}

/**
 * Runs a built suite (through `runner`, e.g. an emulator's command line) and expects no failed check;
 * returns its output. `env` adds variables (e.g. RAPID_CPU_ISA) to this process's environment.
 */
export function runNativeSuite(exe: string, runner: string[] = [], env: Record<string, string> = {}): string {
  const [cmd, ...args] = [...runner, exe];
  const run = spawnSync(cmd, args, { encoding: 'utf8', cwd: ROOT, env: { ...process.env, ...env } });
  expect(run.status, run.stdout + run.stderr).toBe(0);
  expect(run.stdout).toMatch(/\b\d+ passed, 0 failed\b/);
  return run.stdout;
}

/** Builds native/test/<program>.cpp with `sources` and expects a clean build and a run with no failed check. */
export function buildAndRunNativeSuite(program: string, sources: string[]): void {
  const work = mkdtempSync(join(tmpdir(), `rapid-${program}-`));
  try {
    runNativeSuite(buildNativeSuite(program, sources, work));
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
