// CPU features: what the addon detected (systemInfo) or, without an addon, what the OS reports;
// and whether the kernels in use match the CPU.
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import type { NativeSystemInfo } from '../../native/types.js';
import type { CheckResult } from '../types.js';

/** Feature flags from /proc/cpuinfo, normalised to the addon's names (avx2, fma, f16c, avx512f, neon). */
export function osCpuFlags(): string[] {
  try {
    const info = readFileSync('/proc/cpuinfo', 'utf8');
    const line = /^(flags|Features)\s*:\s*(.*)$/m.exec(info);
    const flags = new Set((line?.[2] ?? '').split(/\s+/));
    if (flags.has('asimd')) flags.add('neon');
    return ['avx2', 'fma', 'f16c', 'avx512f', 'avx512bw', 'avx512vl', 'avx512_vnni', 'avx_vnni', 'neon', 'asimddp'].filter((f) => flags.has(f));
  } catch {
    return process.arch === 'arm64' ? ['neon'] : [];
  }
}

/** What the x86 finding says about AVX-512: the VNNI kernels in use, or why the AVX2 ones run. */
function avx512Note(kernel: string | undefined, avx512: boolean, vnni: boolean): string {
  if (kernel === 'avx512-vnni') return '; rapid uses its AVX-512 VNNI kernels';
  if (!avx512) return '; no AVX-512 (not needed)';
  if (!vnni) return '; AVX-512 without VNNI (rapid uses its AVX2 kernels)';
  if (kernel === 'avx2') return '; AVX-512 VNNI present but the AVX2 kernels run (RAPID_CPU_ISA=avx2?)';
  return '; AVX-512 VNNI present';
}

export function checkCpuFeatures(sys: NativeSystemInfo | undefined, arch: string = process.arch): CheckResult {
  const simd = sys?.simd ?? osCpuFlags();
  const model = cpus()[0]?.model?.trim() ?? 'unknown CPU';
  const from = sys ? `kernels: ${sys.kernel}${sys.decodeKernels ? `; decode: ${sys.decodeKernels}` : ''}` : 'from the OS (native binary not loaded)';
  const has = (f: string) => simd.some((s) => s.toLowerCase() === f);
  const avx512 = simd.some((s) => s.toLowerCase().startsWith('avx512'));
  const list = simd.length ? simd.join(', ') : 'none detected';
  const base = { id: 'cpu', title: 'CPU features', details: { model, simd, kernel: sys?.kernel, avx512 } };
  if (arch === 'x64') {
    if (!has('avx2') || !has('fma')) {
      return { ...base, status: 'warn', finding: `${model}: ${list}; no AVX2/FMA, so rapid uses its portable kernels (several times slower) (${from})`, fix: 'use a CPU with AVX2 and FMA (Intel Haswell / AMD Zen or newer) for usable speed' };
    }
    if (sys && sys.kernel === 'generic') {
      return { ...base, status: 'warn', finding: `${model}: the CPU has AVX2 but the addon runs its generic kernels`, fix: 'rebuild the addon on this machine (`npm run build:native`) or install a prebuild with AVX2 kernels' };
    }
    const note = avx512Note(sys?.kernel, avx512, has('avx512_vnni'));
    return { ...base, status: 'ok', finding: `${model}: ${list} (${from})${note}` };
  }
  if (arch === 'arm64') {
    if (sys && sys.kernel === 'scalar') return { ...base, status: 'warn', finding: `${model}: NEON available but the addon runs its portable kernels`, fix: 'unset RAPID_NO_SIMD (it forces them), or reinstall rapid (its arm64 build has NEON kernels)' };
    // Without ARMv8.2 dotprod the int8 fast path runs widening multiplies instead of sdot.
    const dot = sys && !has('asimddp') ? '; no dot product instructions (ARMv8.2 dotprod), so the int8 path uses plain NEON' : '';
    return { ...base, status: 'ok', finding: `${model}: ${simd.length ? list : 'NEON'} (${from})${dot}` };
  }
  return { ...base, status: 'warn', finding: `${model} (${arch}): no SIMD kernels for this architecture`, fix: 'expect slow generation; x86-64 with AVX2 or arm64 is recommended' };
}
