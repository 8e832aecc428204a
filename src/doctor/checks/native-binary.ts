// The native addon, as found by the child-process probe: which binary, from where, and why the
// others were rejected.
import type { NativeProbe } from '../native-probe.js';
import type { CheckResult } from '../types.js';

const SOURCE_LABEL = { env: 'RAPID_NATIVE_PATH', prebuild: 'prebuild', build: 'local build' } as const;

export function checkNativeBinary(probe: NativeProbe): CheckResult {
  const rejected = probe.rejected.map((r) => ({ path: r.path, source: r.source, reason: r.reason }));
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
  const details = { loaded: { path: l.path, source: l.source, version: l.version }, rejected };
  const envRejected = probe.rejected.find((r) => r.source === 'env');
  if (envRejected) {
    return {
      ...base,
      status: 'warn',
      finding: `RAPID_NATIVE_PATH=${envRejected.path} was rejected (${envRejected.reason}); fell back to the ${SOURCE_LABEL[l.source]} ${l.path}`,
      fix: 'unset RAPID_NATIVE_PATH or point it at a working rapid_native.node',
      details,
    };
  }
  const others = rejected.length ? `; ${rejected.length} other candidate${rejected.length > 1 ? 's' : ''} rejected (${rejected.map((r) => r.reason).join('; ')})` : '';
  return { ...base, status: 'ok', finding: `${SOURCE_LABEL[l.source]} ${l.path} (addon ${l.version}), loaded in a child process${others}`, details };
}
