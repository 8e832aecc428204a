// Runs the tiled-codes suite (native/test/tiled_codes_test.cpp): the host repack of MLX codes into the CUDA
// tensor-core path's layout (codes, and scales with biases), against its definition, threaded and not. No GPU needed.
import { join } from 'node:path';
import { describe, it } from 'vitest';
import { buildAndRunNativeSuite, hasCompiler, NATIVE_SRC } from '../helpers/native-suite.js';

describe.skipIf(!hasCompiler)('tiled codes suite', () => {
  it('builds warning-free and every word is where the layout says', () => {
    buildAndRunNativeSuite('tiled_codes_test', [join(NATIVE_SRC, 'cuda', 'tiled_codes.cpp')]);
  }, 120_000);
});
