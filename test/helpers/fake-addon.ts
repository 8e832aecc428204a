// Stand-in native addons for loader tests: CommonJS files the loader can require (through
// RAPID_NATIVE_PATH / RAPID_NATIVE_CUDA_PATH) without a build or a GPU. Each records the
// loadModel options it was given, so tests can check what reached the native side.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { NATIVE_ABI } from '../../src/native/binding.js';
import type { NativeCudaInfo } from '../../src/native/types.js';

export const H200 = { index: 0, name: 'NVIDIA H200', totalBytes: 150_110_000_000, freeBytes: 149_000_000_000, computeCapability: '9.0' };

export interface FakeAddonSpec {
  name: string; // file name stem; also the addon's version string
  abi?: number; // default NATIVE_ABI
  cuda?: NativeCudaInfo; // default: the CPU-only build's answer
}

/** Writes `<dir>/<name>.cjs` and returns its path. */
export function writeFakeAddon(dir: string, spec: FakeAddonSpec): string {
  const path = join(dir, `${spec.name}.cjs`);
  const cuda = spec.cuda ?? { compiled: false, devices: [] };
  const onGpu = cuda.compiled && cuda.devices.length > 0;
  writeFileSync(
    path,
    `'use strict';
const calls = [];
const cuda = ${JSON.stringify(cuda)};
module.exports = {
  abi: ${spec.abi ?? NATIVE_ABI},
  version: ${JSON.stringify(spec.name)},
  calls,
  systemInfo: () => ({ simd: ['avx2', 'fma'], kernel: 'avx2', threads: 2, cuda }),
  architectures: () => ['FakeForCausalLM'],
  loadModel(dir, options) {
    calls.push({ dir, options });
    const gpu = ${onGpu} && options.device !== 'cpu';
    if (options.device === 'cuda' && !gpu) throw new Error('this rapid binary was built without CUDA');
    const info = {
      architecture: 'Fake', family: 'fake', vocabSize: 8, hiddenSize: 4, numLayers: 1, contextLength: 64,
      blockSize: 16, numBlocks: 4, kvBytes: 0, kvCacheDtype: 'f32', weightBytes: 0, quantization: 'none', precision: 'exact', threads: 2,
      device: gpu ? 'cuda' : 'cpu', deviceName: gpu ? cuda.devices[0].name : 'cpu',
    };
    return { info: () => info, step: async () => ({ rows: [], timings: { forwardMs: 0, sampleMs: 0, tokens: 0 } }), encodeImage: async () => { throw new Error('no vision'); }, close() {} };
  },
  inspectCheckpoint: () => [],
  convert() {},
  memoryBandwidth: () => 0,
};
`,
  );
  return path;
}
