// Runs the native kernel suite (native/test/kernels_test.cpp): every weight format x precision x
// group size x bits against a double reference, on the AVX2 and the portable kernels, batch
// invariance, safetensors corruption cases, JSON, quantize round trips, the thread pool.
import { describe, it } from 'vitest';
import { buildAndRunNativeSuite, hasCompiler, kernelSuiteSources } from '../helpers/native-suite.js';

describe.skipIf(!hasCompiler)('native kernel suite', () => {
  it('builds warning-free and passes every check', () => {
    buildAndRunNativeSuite('kernels_test', kernelSuiteSources());
  }, 240_000);
});
