// The native addon, as found by the child-process probe: which binary and variant (CPU or CUDA),
// from where, and why the others were rejected.
import type { NativeCandidate } from '../../native/binding.js';
import type { NativeProbe } from '../native-probe.js';
import type { CheckResult } from '../types.js';

/** "RAPID_NATIVE_CUDA_PATH", "CPU prebuild", "CUDA local build", ... */
function sourceLabel(c: Pick<NativeCandidate, 'source' | 'variant'>): string {
  if (c.source === 'env') return c.variant === 'cuda' ? 'RAPID_NATIVE_CUDA_PATH' : 'RAPID_NATIVE_PATH';
  return `${c.variant === 'cuda' ? 'CUDA' : 'CPU'} ${c.source === 'prebuild' ? 'prebuild' : 'local build'}`;
}

export function checkNativeBinary(probe: NativeProbe): CheckResult {
  const rejected = probe.rejected.map((r) => ({ path: r.path, source: r.source, variant: r.variant, reason: r.reason }));
  const base = { id: 'native', title: 'Native binary' };
  if (!probe.loaded) {
    const why = rejected.length ? rejected.map((r) => `${r.path}: ${r.reason}`).join('; ') : 'no prebuild for this platform and no local build';
    return {
      ...base,
      status: 'fail',
      finding: `no usable native binary for ${process.platform}-${process.arch} (${why})`,
      fix: 'build it from source with `npm run build:native` (needs python3, make and a C++20 compiler), or reinstall rapid',
      details: { loaded: null, rejected },
    };
  }
  const l = probe.loaded;
  const details = { loaded: { path: l.path, source: l.source, variant: l.variant, version: l.version }, rejected };
  const envRejected = probe.rejected.find((r) => r.source === 'env');
  if (envRejected) {
    return {
      ...base,
      status: 'warn',
      finding: `${sourceLabel(envRejected)}=${envRejected.path} was rejected (${envRejected.reason}); fell back to the ${sourceLabel(l)} ${l.path}`,
      fix: `unset ${sourceLabel(envRejected)} or point it at a working rapid_native.node`,
      details,
    };
  }
  const others = rejected.length ? `; ${rejected.length} other candidate${rejected.length > 1 ? 's' : ''} rejected (${rejected.map((r) => r.reason).join('; ')})` : '';
  return { ...base, status: 'ok', finding: `${sourceLabel(l)} ${l.path} (addon ${l.version}), loaded in a child process${others}`, details };
}
