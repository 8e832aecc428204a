// Runs the CPU sampler suite (native/test/sampler_test.cpp): sample_token's shortcuts (partial sorts, the
// histogram bound on the nucleus, the radix sort of long nuclei, the in-place draw) against a plain
// restatement of its rules on spread, flat, peaked, tied and signed-zero logits; token_penalties.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '..', '..');
const src = join(root, 'native', 'src');
const work = mkdtempSync(join(tmpdir(), 'rapid-sampler-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const hasCompiler = spawnSync('g++', ['--version']).status === 0;

describe.skipIf(!hasCompiler)('CPU sampler suite', () => {
  it('builds warning-free and every token equals the plain rules', () => {
    const exe = join(work, 'sampler_test');
    const build = spawnSync(
      'g++',
      ['-O2', '-std=c++20', '-Wall', '-Wextra', '-Werror', '-pthread', `-I${src}`, join(root, 'native', 'test', 'sampler_test.cpp'),
        join(src, 'sampling', 'sampler.cpp'), join(src, 'layers', 'vec_math.cpp'), '-o', exe],
      { encoding: 'utf8' },
    );
    expect(build.status, build.stderr).toBe(0);
    const run = spawnSync(exe, [], { encoding: 'utf8', cwd: root });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toMatch(/\b\d+ passed, 0 failed\b/);
  }, 240_000);
});
