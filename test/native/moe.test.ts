// Runs the native MoE block suite (native/test/moe_test.cpp): the router with Qwen's and Gemma 4's options,
// every expert layout (saved fused, hub transposed fused, per-expert, MLX SwitchLinear 4-bit) against a
// double reference, SiLU and gelu_tanh experts, bitwise batch invariance (Exact and Fast), the
// read-once counters and the load errors. Skips without g++.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '..', '..');
const src = join(root, 'native', 'src');
const work = mkdtempSync(join(tmpdir(), 'rapid-moe-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const hasCompiler = spawnSync('g++', ['--version']).status === 0;

const sources = (dir: string) => readdirSync(join(src, dir)).filter((f) => f.endsWith('.cpp')).map((f) => join(src, dir, f));

describe.skipIf(!hasCompiler)('native MoE block', () => {
  it('builds warning-free and passes every check', () => {
    const exe = join(work, 'moe_test');
    const build = spawnSync(
      'g++',
      ['-O2', '-std=c++20', '-Wall', '-Wextra', '-Werror', '-pthread', `-I${src}`, join(root, 'native', 'test', 'moe_test.cpp'),
        ...['moe', 'linear', 'vec_math'].map((f) => join(src, 'layers', `${f}.cpp`)), ...sources('format'), ...sources('quant'), ...sources('cpu'), '-o', exe],
      { encoding: 'utf8' },
    );
    expect(build.status, build.stderr).toBe(0);
    const run = spawnSync(exe, [], { encoding: 'utf8', cwd: root });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toMatch(/\b\d+ passed, 0 failed\b/);
  }, 300_000);
});
