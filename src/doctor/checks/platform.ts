// Platform and architecture: which prebuilds apply and which kernels rapid has for this CPU.
import { release } from 'node:os';
import type { CheckResult } from '../types.js';

function libc(): string | undefined {
  if (process.platform !== 'linux') return undefined;
  const header = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header;
  return header?.glibcVersionRuntime ? `glibc ${header.glibcVersionRuntime}` : 'musl';
}

export function checkPlatform(platform: string = process.platform, arch: string = process.arch): CheckResult {
  const c = platform === 'linux' ? libc() : undefined;
  const tuple = `${platform}-${arch}`;
  const base = { id: 'platform', title: 'Platform', details: { platform, arch, libc: c, kernel: release() } };
  const desc = `${tuple}${c ? ` (${c})` : ''}, kernel ${release()}`;
  if ((platform === 'linux' || platform === 'darwin') && (arch === 'x64' || arch === 'arm64')) {
    const note = platform === 'darwin' ? '; CPU backend only (Metal is planned)' : '';
    return { ...base, status: 'ok', finding: `${desc}${note}` };
  }
  if (platform === 'win32') {
    return { ...base, status: 'warn', finding: `${desc}: Windows is untested`, fix: 'run rapid under WSL2 (Linux x64) for a supported setup' };
  }
  return { ...base, status: 'warn', finding: `${desc}: no prebuilt binary and untested`, fix: 'build from source with `npm run build:native`; report problems upstream' };
}
