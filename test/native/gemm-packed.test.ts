// Runs the packed dense GEMM suite (native/test/gemm_packed_test.cpp): each kernel family this CPU has
// against a double reference, and bitwise identity across families, row counts and thread counts.
// The suite itself forces every family in turn; it also runs once under each RAPID_CPU_ISA pick.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildNativeSuite, hasCompiler, kernelSuiteSources, runNativeSuite } from '../helpers/native-suite.js';

describe.skipIf(!hasCompiler)('packed dense GEMM suite', () => {
  let work = '';
  let exe = '';
  beforeAll(() => {
    work = mkdtempSync(join(tmpdir(), 'rapid-gemm-packed-'));
    exe = buildNativeSuite('gemm_packed_test', kernelSuiteSources(), work);
  }, 400_000);
  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('matches the double reference with the same bits on every kernel family', () => {
    const out = runNativeSuite(exe);
    expect(out).toMatch(/^packed identity: \d+ comparisons$/m);
  }, 120_000);

  it.each(process.arch === 'x64' ? ['avx2', 'avx512'] : [])('passes with RAPID_CPU_ISA=%s', (isa) => {
    runNativeSuite(exe, [], { RAPID_CPU_ISA: isa });
  }, 120_000);
});
