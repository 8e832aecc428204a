// Runs the native kernel suite (native/test/kernels_test.cpp): every weight format x precision x
// group size x bits against a double reference, batch invariance, the bit identity of the SIMD
// families, safetensors corruption cases, JSON, quantize round trips, the thread pool. It runs once
// per x86 kernel family this CPU has (RAPID_CPU_ISA=avx512 / avx2), each run also checking the
// portable kernels; the families the addon detects must be those /proc/cpuinfo reports.
import { describe, expect, it } from 'vitest';
import { hasCompiler, kernelSuiteSources, runNativeSuite, useNativeSuite, x86Families } from '../helpers/native-suite.js';

describe.skipIf(!hasCompiler)('native kernel suite', () => {
  const exe = useNativeSuite('kernels_test', kernelSuiteSources);

  it('builds warning-free and passes every check on the kernels picked at run time', () => {
    const out = runNativeSuite(exe());
    if (process.arch === 'x64') expect(out).toMatch(new RegExp(`^families: ${[...x86Families(), 'scalar'].join(' ')}$`, 'm'));
  }, 120_000);

  it.each(x86Families().map((f) => [f === 'avx512-vnni' ? 'avx512' : f, f]))('passes every check with RAPID_CPU_ISA=%s (%s)', (isa, family) => {
    const out = runNativeSuite(exe(), [], { RAPID_CPU_ISA: isa });
    expect(out).toMatch(new RegExp(`^kernels: ${family}$`, 'm'));
  }, 120_000);
});
