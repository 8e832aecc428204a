// Runs native/test/fused_matmul_test.cpp: the fused decode matmuls (q/k/v in one pass, gate/up with
// their activation) give exactly the bits of separate matmuls, and the owned-slice row split covers
// every row once, on every x86 kernel family this CPU has (and the portable kernels).
import { describe, expect, it } from 'vitest';
import { hasCompiler, kernelSuiteSources, runNativeSuite, useNativeSuite, x86Families } from '../helpers/native-suite.js';

describe.skipIf(!hasCompiler)('fused decode matmuls', () => {
  const exe = useNativeSuite('fused_matmul_test', kernelSuiteSources);

  it('match separate matmuls on the kernels picked at run time', () => {
    expect(runNativeSuite(exe())).toMatch(/^kernels: /m);
  }, 120_000);

  it.each(x86Families())('match separate matmuls with the %s kernels', (family) => {
    const isa = family === 'avx512-vnni' ? 'avx512' : family;
    expect(runNativeSuite(exe(), [], { RAPID_CPU_ISA: isa })).toMatch(new RegExp(`^kernels: ${family}$`, 'm'));
  }, 120_000);
});
