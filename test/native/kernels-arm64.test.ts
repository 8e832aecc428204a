// The native kernel suite (native/test/kernels_test.cpp) cross-compiled for arm64 with Debian's
// aarch64 toolchain and run under qemu-aarch64: the NEON kernels against the double reference and
// the portable kernels, on an emulated CPU with dotprod (sdot) and on one without (plain NEON).
// Correctness only; qemu's speed says nothing about arm64's. Skips without the toolchain or qemu
// (.ci/run installs both where apt-get can).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildNativeSuite, kernelSuiteSources, runNativeSuite } from '../helpers/native-suite.js';

const CXX = 'aarch64-linux-gnu-g++';
const SYSROOT = '/usr/aarch64-linux-gnu'; // the dynamic loader and libstdc++ of the cross toolchain
const hasCross = spawnSync(CXX, ['--version']).status === 0;
const hasQemu = spawnSync('qemu-aarch64', ['--version']).status === 0;

describe.skipIf(!hasCross || !hasQemu)('native kernel suite on arm64 (qemu)', () => {
  let work = '';
  let exe = '';
  beforeAll(() => {
    work = mkdtempSync(join(tmpdir(), 'rapid-kernels-arm64-'));
    exe = buildNativeSuite('kernels_test', kernelSuiteSources(), work, CXX);
  }, 300_000);
  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  // qemu's "max" CPU has ARMv8.2 dotprod; the Cortex-A53 (Raspberry Pi 3) is ARMv8.0 without it.
  it.each([
    ['max', 'neon-dotprod'],
    ['cortex-a53', 'neon'],
  ])('passes every check on -cpu %s with the %s kernels', (cpu, kernels) => {
    const out = runNativeSuite(exe, ['qemu-aarch64', '-L', SYSROOT, '-cpu', cpu]);
    expect(out).toMatch(new RegExp(`^kernels: ${kernels}$`, 'm'));
  }, 180_000);
});
