// Runs the RoPE-epilogue row order suite (native/test/rope_rows_test.cpp): the q/k row permutation the CUDA
// decoder applies at load so the tensor-core matmul can rotate each pair in one thread. No GPU needed.
import { join } from 'node:path';
import { describe, it } from 'vitest';
import { buildAndRunNativeSuite, hasCompiler, NATIVE_SRC } from '../helpers/native-suite.js';

describe.skipIf(!hasCompiler)('RoPE-epilogue row order suite', () => {
  it('builds warning-free and puts each rotate-half pair in tile rows g and g + 8', () => {
    buildAndRunNativeSuite('rope_rows_test', [join(NATIVE_SRC, 'cuda', 'rope_rows.cpp')]);
  }, 120_000);
});
