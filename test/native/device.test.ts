// Device selection in the native addon: the CPU variant refuses CUDA with a clear message; the CUDA
// variant (built by `npm run build:cuda`, as CI does where nvcc exists) loads on a machine without a
// GPU, reports why it has no device, falls back to the CPU under 'auto' and gives the CPU's tokens.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { NativeAddon } from '../../src/native/types.js';
import { addon, nativeAvailable } from '../helpers/addon.js';
import { FIXTURE_ROOT } from '../helpers/fixtures.js';
import { runSequences } from '../helpers/runner.js';

const FIXTURE = join(FIXTURE_ROOT, 'qwen2-q4');
const CUDA_VARIANT = resolve(import.meta.dirname, '..', '..', 'build', 'cuda', 'rapid_native.node');
const hasGpuDriver = existsSync('/proc/driver/nvidia/version') || existsSync('/dev/nvidiactl');

const PROMPTS = [
  { id: 'a', prompt: [1, 2, 3, 4, 5, 6, 7, 8, 9], maxTokens: 6 },
  { id: 'b', prompt: [40, 41, 42], maxTokens: 6, startStep: 2 },
];

async function greedyTokens(a: NativeAddon, device: 'auto' | 'cpu'): Promise<Map<string, number[]>> {
  const m = a.loadModel(FIXTURE, { kvCacheBytes: 8 << 20, device });
  try {
    const out = await runSequences(m, PROMPTS);
    return new Map([...out].map(([id, o]) => [id, o.tokens]));
  } finally {
    m.close();
  }
}

describe.skipIf(!nativeAvailable())('CPU variant', () => {
  it('reports that CUDA is not compiled in', () => {
    const cuda = addon().systemInfo().cuda;
    if (cuda.compiled) return; // RAPID_NATIVE_PATH may point at the CUDA variant
    expect(cuda.devices).toEqual([]);
    expect(cuda.error).toMatch(/built without CUDA.*npm run build:cuda/);
  });

  it("device 'cuda' fails saying why; 'auto' and 'cpu' run on the CPU", () => {
    if (addon().systemInfo().cuda.compiled) return;
    expect(() => addon().loadModel(FIXTURE, { kvCacheBytes: 8 << 20, device: 'cuda' })).toThrow(/device cuda: .*built without CUDA/);
    for (const device of ['auto', 'cpu'] as const) {
      const m = addon().loadModel(FIXTURE, { kvCacheBytes: 8 << 20, device });
      expect(m.info().device).toBe('cpu');
      m.close();
    }
  });

  it('rejects an unknown device name', () => {
    expect(() => addon().loadModel(FIXTURE, { device: 'gpu' as 'cuda' })).toThrow(/device must be 'auto', 'cpu' or 'cuda'/);
  });

  it('rejects a KV budget, thread count or block size that is not a positive whole number', () => {
    // 2 << 30 is -2^31 in JS: it used to fall back to the default budget silently
    expect(() => addon().loadModel(FIXTURE, { kvCacheBytes: 2 << 30 })).toThrow(/options\.kvCacheBytes must be a whole number of at least 1, got -2147483648/);
    expect(() => addon().loadModel(FIXTURE, { kvCacheBytes: 0 })).toThrow(/options\.kvCacheBytes must be/);
    expect(() => addon().loadModel(FIXTURE, { kvCacheBytes: 1.5e6 + 0.5 })).toThrow(/options\.kvCacheBytes must be/);
    expect(() => addon().loadModel(FIXTURE, { kvCacheBytes: Number.NaN })).toThrow(/options\.kvCacheBytes must be/);
    expect(() => addon().loadModel(FIXTURE, { threads: -1 })).toThrow(/options\.threads must be a whole number of at least 0, got -1/);
    expect(() => addon().loadModel(FIXTURE, { blockSize: 0 })).toThrow(/options\.blockSize must be/);
    const m = addon().loadModel(FIXTURE, { kvCacheBytes: 2 * 2 ** 30, threads: 1 });
    m.close();
  });
});

describe.skipIf(!existsSync(CUDA_VARIANT) || hasGpuDriver || !nativeAvailable())('CUDA variant without a GPU', () => {
  const cudaAddon = (): NativeAddon => createRequire(import.meta.url)(CUDA_VARIANT) as NativeAddon;

  it('loads, says it has CUDA and no device', () => {
    const a = cudaAddon();
    expect(a.abi).toBe(addon().abi);
    const cuda = a.systemInfo().cuda;
    expect(cuda.compiled).toBe(true);
    expect(cuda.devices).toEqual([]);
    expect(cuda.error).toMatch(/CUDA device/);
    expect(cuda.runtimeVersion).toMatch(/^\d+\.\d+$/);
  });

  it("falls back to the CPU under 'auto' with the reason, refuses 'cuda'", async () => {
    const a = cudaAddon();
    expect(() => a.loadModel(FIXTURE, { kvCacheBytes: 8 << 20, device: 'cuda' })).toThrow(/device cuda: .*CUDA device/);
    const m = a.loadModel(FIXTURE, { kvCacheBytes: 8 << 20, device: 'auto' });
    expect(m.info().device).toBe('cpu');
    expect(m.info().deviceNote).toMatch(/CUDA not used: .*CUDA device/);
    m.close();
    // Same runtime on the CPU: the same greedy tokens as the CPU variant.
    expect(await greedyTokens(a, 'auto')).toEqual(await greedyTokens(addon(), 'cpu'));
  });
});
