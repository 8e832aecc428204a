// Runs the native MoE block suite (native/test/moe_test.cpp): the router with Qwen's and Gemma 4's options,
// every expert layout (saved fused, hub transposed fused, per-expert, MLX SwitchLinear 4-bit) against a
// double reference, SiLU and gelu_tanh experts, bitwise batch invariance (Exact and Fast), the
// read-once counters and the load errors. Skips without g++.
import { join } from 'node:path';
import { describe, it } from 'vitest';
import { buildAndRunNativeSuite, hasCompiler, kernelSuiteSources, NATIVE_SRC } from '../helpers/native-suite.js';

describe.skipIf(!hasCompiler)('native MoE block', () => {
  it('builds warning-free and passes every check', () => {
    // kernelSuiteSources brings cpu/ and what its ops backend calls in layers/ (vec_math among them): one of each.
    const units = [...['moe', 'linear', 'vec_math'].map((f) => join(NATIVE_SRC, 'layers', `${f}.cpp`)), ...kernelSuiteSources()];
    buildAndRunNativeSuite('moe_test', [...new Set(units)]);
  }, 300_000);
});
