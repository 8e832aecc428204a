// Runs the step-ahead policy suite (native/test/ahead_policy_test.cpp): when the CUDA decoder enqueues the next
// decode step before the host has this one's tokens, on scripted miss / gap / step histories. No GPU needed.
import { describe, it } from 'vitest';
import { buildAndRunNativeSuite, hasCompiler } from '../helpers/native-suite.js';

describe.skipIf(!hasCompiler)('step-ahead policy suite', () => {
  it('builds warning-free and runs ahead only while misses cost less than the gap it hides', () => {
    buildAndRunNativeSuite('ahead_policy_test', []);
  }, 120_000);
});
