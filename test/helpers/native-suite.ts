// The standalone native test programs (native/test/<name>.cpp, each printing 'N passed, M failed' and exiting
// non-zero on a failure): built with g++ (warnings as errors) and run from the repository root. The suites
// under test/native share this; a cross compiler and an emulator (qemu) run the same programs for another
// architecture. Each source compiles to an object cached by its inputs (source, the headers it reaches,
// flags, compiler), so suites sharing the kernels compile them once, the missing ones in parallel (make -j).
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { afterAll, beforeAll, expect } from 'vitest';
import { osCpuFlags } from '../../src/doctor/checks/cpu-features.js';

export const ROOT = resolve(import.meta.dirname, '..', '..');
export const NATIVE_SRC = join(ROOT, 'native', 'src');
export const hasCompiler = spawnSync('g++', ['--version']).status === 0;

const FLAGS = ['-O2', '-std=c++20', '-Wall', '-Wextra', '-Werror', '-pthread', `-I${NATIVE_SRC}`];
// Objects keyed by everything that goes into them; survives between runs (tmpdir), written atomically.
const OBJECT_CACHE = join(tmpdir(), 'rapid-native-test-objects');

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
  // cpu/ also holds the ops backend, which calls into layers/: link what its headers name too.
  const units = [...nativeSources('format'), ...nativeSources('quant'), ...nativeSources('cpu')];
  return [...units, ...sourceClosure(units)];
}

/** The headers a file includes with quotes, found as the compiler does: beside it first, then under -I native/src. */
const quoteIncludes = (file: string): string[] =>
  [...readFileSync(file, 'utf8').matchAll(/^\s*#include\s+"([^"]+)"/gm)]
    .map((m) => [join(dirname(file), m[1]!), join(NATIVE_SRC, m[1]!)].find((h) => existsSync(h)))
    .filter((h) => h !== undefined);

/** Headers a file reaches through quoted includes, transitively (sorted). */
const closures = new Map<string, string[]>();
export function headerClosure(file: string): string[] {
  let hit = closures.get(file);
  if (hit === undefined) {
    const seen = new Set<string>();
    const walk = (f: string) => {
      for (const h of quoteIncludes(f)) {
        if (seen.has(h)) continue;
        seen.add(h);
        walk(h);
      }
    };
    walk(file);
    hit = [...seen].sort();
    closures.set(file, hit);
  }
  return hit;
}

/**
 * The .cpp files `units` need: for each header they reach (transitively), the files that implement it
 * (dir/name.cpp and dir/name_*.cpp, e.g. cpu/kernels_x86.cpp), and theirs in turn; `units` themselves excluded.
 */
export function sourceClosure(units: string[]): string[] {
  const out = new Set<string>(units);
  const todo = [...units];
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
  return [...out].filter((u) => !units.includes(u)).sort();
}

const compilerIds = new Map<string, string>();
function objectKey(cxx: string, unit: string, flags: string[]): string {
  let id = compilerIds.get(cxx);
  if (id === undefined) compilerIds.set(cxx, (id = `${cxx}\0${spawnSync(cxx, ['--version'], { encoding: 'utf8' }).stdout ?? ''}`));
  const h = createHash('sha256').update(id).update(flags.join(' ')).update(unit).update(readFileSync(unit));
  for (const header of headerClosure(unit)) h.update(header).update(readFileSync(header));
  return h.digest('hex').slice(0, 32);
}

/** Compiles each unit to its cached object (the missing ones in parallel, make -j) and returns the objects. */
function compileObjects(units: string[], cxx: string, flags: string[]): string[] {
  mkdirSync(OBJECT_CACHE, { recursive: true });
  const objects = units.map((u) => join(OBJECT_CACHE, `${basename(u, '.cpp')}-${objectKey(cxx, u, flags)}.o`));
  const missing = objects.map((o, i) => [o, units[i]!] as const).filter(([o]) => !existsSync(o));
  if (missing.length === 0) return objects;
  // Written under a temporary name and renamed: a concurrent build never links half an object.
  const q = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;
  const rules = missing.map(([o, u]) => `${o}:\n\t@${q(cxx)} ${flags.map(q).join(' ')} -c ${q(u)} -o $@.$$$$.tmp && mv -f $@.$$$$.tmp $@\n`);
  const work = mkdtempSync(join(tmpdir(), 'rapid-native-make-'));
  try {
    writeFileSync(join(work, 'Makefile'), `all: ${missing.map(([o]) => o).join(' ')}\n${rules.join('')}`);
    const make = spawnSync('make', ['-k', `-j${availableParallelism()}`, '-f', join(work, 'Makefile')], { encoding: 'utf8', cwd: ROOT });
    expect(make.status, make.stdout + make.stderr).toBe(0);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return objects;
}

/**
 * Builds native/test/<program>.cpp with `sources` into `dir` with `cxx` (and `extraFlags`, e.g. -mavx2),
 * expecting a warning-free build.
 */
export function buildNativeSuite(program: string, sources: string[], dir: string, cxx = 'g++', extraFlags: string[] = []): string {
  const exe = join(dir, program);
  const objects = compileObjects([join(ROOT, 'native', 'test', `${program}.cpp`), ...sources], cxx, [...FLAGS, ...extraFlags]);
  const link = spawnSync(cxx, ['-pthread', ...objects, '-o', exe], { encoding: 'utf8' });
  expect(link.status, link.stderr).toBe(0);
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
  const run = spawnSync(cmd!, args, { encoding: 'utf8', cwd: ROOT, env: { ...process.env, ...env } });
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
