// Runs the CUDA correctness harness (test/cuda/cuda-checks.mjs) when a CUDA variant binary is built and
// an NVIDIA driver is present; elsewhere (CI has no GPU) it is skipped with the reason.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '..', '..');

function cudaBinary(): string | undefined {
  const local = join(ROOT, 'build', 'cuda', 'rapid_native.node');
  if (existsSync(local)) return local;
  const pre = join(ROOT, 'prebuilds', 'linux-x64-cuda');
  const file = existsSync(pre) ? readdirSync(pre).find((f) => f.endsWith('.node')) : undefined;
  return file ? join(pre, file) : undefined;
}

const binary = cudaBinary();
const driver = existsSync('/proc/driver/nvidia/version') || existsSync('/dev/nvidiactl');
const reason = !binary
  ? 'no CUDA variant binary (build/cuda/rapid_native.node or prebuilds/linux-x64-cuda/*.node)'
  : !driver
    ? 'no NVIDIA driver (/proc/driver/nvidia/version, /dev/nvidiactl)'
    : '';

describe.skipIf(reason !== '')(`CUDA backend checks${reason ? ` (skipped: ${reason})` : ''}`, () => {
  it('parity, batch invariance, CPU agreement and error paths pass on the GPU', () => {
    const r = spawnSync(process.execPath, [join(ROOT, 'test', 'cuda', 'cuda-checks.mjs'), '--addon', binary!], {
      encoding: 'utf8',
      timeout: 1_800_000,
      maxBuffer: 64 << 20,
    });
    const out = `${r.stdout}${r.stderr}`;
    console.log(out.split('\n').filter((l) => /^(FAIL|SKIP)|passed,/.test(l)).join('\n'));
    expect(out).toMatch(/\d+ passed, 0 failed/);
    expect(r.status, out.slice(-4000)).toBe(0);
  }, 1_900_000);
});
