// Runs the CPU backend op suite (native/test/cpu_ops_test.cpp): the ops of backend/ops.h that are more than a
// wrapper of an existing kernel (pooling taps, gather/scatter/transpose, per-head RMSNorm, strided and 2-D RoPE,
// GQA segment attention), each against a naive loop: the reference the CUDA backend's ops are compared with.
import { join } from 'node:path';
import { describe, it } from 'vitest';
import { buildAndRunNativeSuite, hasCompiler, ROOT, sourceClosure } from '../helpers/native-suite.js';

describe.skipIf(!hasCompiler)('CPU backend op suite', () => {
  it('builds warning-free and every op matches its naive loop', () => {
    buildAndRunNativeSuite('cpu_ops_test', sourceClosure([join(ROOT, 'native', 'test', 'cpu_ops_test.cpp')]));
  }, 600_000);
});
