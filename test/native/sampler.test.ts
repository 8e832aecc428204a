// Runs the CPU sampler suite (native/test/sampler_test.cpp): sample_token's shortcut (a log-weight histogram,
// only the bins a cut or the draw lands in sorted) against a plain restatement of its fixed-point rules on
// spread, flat, peaked, tied and signed-zero logits; token_penalties.
import { join } from 'node:path';
import { describe, it } from 'vitest';
import { buildAndRunNativeSuite, hasCompiler, NATIVE_SRC } from '../helpers/native-suite.js';

describe.skipIf(!hasCompiler)('CPU sampler suite', () => {
  it('builds warning-free and every token equals the plain rules', () => {
    buildAndRunNativeSuite('sampler_test', [join(NATIVE_SRC, 'sampling', 'sampler.cpp'), join(NATIVE_SRC, 'sampling', 'rank_draw.cpp'), join(NATIVE_SRC, 'layers', 'vec_math.cpp')]);
  }, 240_000);
});
