// `rapid serve` over real HTTP through test/cuda/serve-checks.mjs (a bare-node script, so the GPU machine can
// run it too): on the CPU here, and on CUDA where a GPU and the CUDA variant are present (skipped elsewhere).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { nativeAvailable } from '../helpers/addon.js';
import { cudaSkipReason, ROOT } from './gpu.js';

function serveChecks(args: string[]): { out: string; status: number | null } {
  const r = spawnSync(process.execPath, [join(ROOT, 'test', 'cuda', 'serve-checks.mjs'), ...args], {
    encoding: 'utf8',
    timeout: 600_000,
    maxBuffer: 64 << 20,
  });
  return { out: `${r.stdout}${r.stderr}`, status: r.status };
}

describe.skipIf(!nativeAvailable())('rapid serve over HTTP (serve-checks.mjs) on the CPU', () => {
  it('starts, answers chat/stream/schema requests batch-invariantly, rejects bad ones with 4xx and survives aborts', () => {
    const { out, status } = serveChecks(['--device', 'cpu', '--model', join(ROOT, 'test', 'fixtures', 'models', 'qwen2-q4'), '--requests', '4', '--threads', '2']);
    for (const check of ['start', 'chat', 'stream', 'batch', 'seeded', 'schema', 'errors', 'abort', 'load', 'run']) expect(out).toMatch(new RegExp(`^PASS ${check} qwen2-q4 \\[cpu, fast\\]`, 'm'));
    expect(out).toMatch(/10 passed, 0 failed/);
    expect(status, out.slice(-4000)).toBe(0);
  }, 660_000);

  it('reports a server that cannot start as a FAIL line with its log, not a hang', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rapid-serve-checks-'));
    try {
      writeFileSync(join(dir, 'config.json'), JSON.stringify({ architectures: ['NoSuchForCausalLM'], model_type: 'no-such-family' }));
      const { out, status } = serveChecks(['--device', 'cpu', '--model', dir]);
      expect(status).toBe(1);
      expect(out).toMatch(/^FAIL start \S+ \[cpu, fast\] rapid serve exited \(1\) before serving:/m);
      expect(out).toMatch(/0 passed, 1 failed/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 660_000);
});

describe.skipIf(cudaSkipReason !== '')(`rapid serve over HTTP on CUDA${cudaSkipReason ? ` (skipped: ${cudaSkipReason})` : ''}`, () => {
  it('passes every serve check on the GPU', () => {
    const { out, status } = serveChecks(['--device', 'cuda']);
    console.log(out.split('\n').filter((l) => /^(FAIL|INFO)|passed,/.test(l)).join('\n'));
    expect(out).toMatch(/\d+ passed, 0 failed/);
    expect(status, out.slice(-4000)).toBe(0);
  }, 660_000);
});
