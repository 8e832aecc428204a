// Runs the native kernel suite (native/test/kernels_test.cpp): every weight format x precision x
// group size x bits against a double reference, on the AVX2 and the portable kernels, batch
// invariance, safetensors corruption cases, JSON, quantize round trips, the thread pool.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '..', '..');
const src = join(root, 'native', 'src');
const work = mkdtempSync(join(tmpdir(), 'rapid-kernels-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const hasCompiler = spawnSync('g++', ['--version']).status === 0;

const sources = (dir: string) => readdirSync(join(src, dir)).filter((f) => f.endsWith('.cpp')).map((f) => join(src, dir, f));

describe.skipIf(!hasCompiler)('native kernel suite', () => {
  it('builds warning-free and passes every check', () => {
    const exe = join(work, 'kernels_test');
    const build = spawnSync(
      'g++',
      ['-O2', '-std=c++20', '-Wall', '-Wextra', '-Werror', '-pthread', `-I${src}`, join(root, 'native', 'test', 'kernels_test.cpp'),
        ...sources('format'), ...sources('quant'), ...sources('cpu'), '-o', exe],
      { encoding: 'utf8' },
    );
    expect(build.status, build.stderr).toBe(0);
    const run = spawnSync(exe, [], { encoding: 'utf8', cwd: root });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toMatch(/\b\d+ passed, 0 failed\b/);
  }, 240_000);
});
