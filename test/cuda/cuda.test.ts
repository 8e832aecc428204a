// Runs the CUDA correctness harness (test/cuda/cuda-checks.mjs) when a CUDA variant binary is built and
// an NVIDIA driver is present; elsewhere (CI has no GPU) it is skipped with the reason.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cudaAddonPath, cudaSkipReason, ROOT } from './gpu.js';

describe.skipIf(cudaSkipReason !== '')(`CUDA backend checks${cudaSkipReason ? ` (skipped: ${cudaSkipReason})` : ''}`, () => {
  it('parity, batch invariance, CPU agreement and error paths pass on the GPU', () => {
    const r = spawnSync(process.execPath, [join(ROOT, 'test', 'cuda', 'cuda-checks.mjs'), '--addon', cudaAddonPath!], {
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
