// The only module that loads the native addon. It prefers a matching prebuild, falls back to a
// local build, and records why every other candidate was rejected so `rapid doctor` can say so.
import { createRequire } from 'node:module';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { NativeAddon } from './types.js';

export type NativeSource = 'env' | 'prebuild' | 'build';

export interface NativeCandidate {
  path: string;
  source: NativeSource;
}

export interface NativeRejection extends NativeCandidate {
  reason: string;
}

export interface LoadedNative {
  addon: NativeAddon;
  path: string;
  source: NativeSource;
  rejected: NativeRejection[];
}

const require = createRequire(import.meta.url);

/** Package root: two levels above dist/native (or src/native under vitest). */
export function packageRoot(): string {
  return resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
}

/** Checks the tags of a prebuildify file name ("rapid-vlm.glibc.node", "node.abi115.node"). */
function prebuildTagsMatch(file: string): string | null {
  if (!file.endsWith('.node')) return 'not a .node file';
  const tags = file.slice(0, -'.node'.length).split('.');
  // Node-API builds carry no ABI tag; an abiNNN tag pins one Node major's ABI.
  const abi = tags.find((t) => /^abi\d+$/.test(t));
  if (abi && !tags.includes('napi') && abi !== `abi${process.versions.modules}`) {
    return `built for Node ABI ${abi.slice(3)}, this Node has ABI ${process.versions.modules}`;
  }
  const runtime = tags.find((t) => t === 'electron' || t === 'node-webkit');
  if (runtime) return `built for ${runtime}, not Node`;
  const libc = tags.find((t) => t === 'glibc' || t === 'musl');
  if (libc && process.platform === 'linux') {
    const report = process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined;
    const hostLibc = report?.header?.glibcVersionRuntime ? 'glibc' : 'musl';
    if (libc !== hostLibc) return `built for ${libc}, this system uses ${hostLibc}`;
  }
  return null;
}

/** Every candidate binary in preference order, plus the ones rejected before loading. */
export function nativeCandidates(root = packageRoot()): { candidates: NativeCandidate[]; rejected: NativeRejection[] } {
  const candidates: NativeCandidate[] = [];
  const rejected: NativeRejection[] = [];
  const env = process.env.RAPID_NATIVE_PATH;
  if (env) candidates.push({ path: resolve(env), source: 'env' });

  const tuple = `${process.platform}-${process.arch}`;
  const prebuildRoot = join(root, 'prebuilds');
  const prebuilds: NativeCandidate[] = [];
  if (existsSync(prebuildRoot)) {
    for (const dir of readdirSync(prebuildRoot)) {
      const full = join(prebuildRoot, dir);
      if (!statSync(full).isDirectory()) continue;
      for (const file of readdirSync(full)) {
        const path = join(full, file);
        if (dir !== tuple) {
          rejected.push({ path, source: 'prebuild', reason: `built for ${dir}, this machine is ${tuple}` });
          continue;
        }
        const mismatch = prebuildTagsMatch(file);
        if (mismatch) rejected.push({ path, source: 'prebuild', reason: mismatch });
        else prebuilds.push({ path, source: 'prebuild' });
      }
    }
  }
  const local = join(root, 'build', 'Release', 'rapid_native.node');
  const localBuilt = existsSync(local);
  // A local build newer than the prebuild is a developer's fresh compile: use it, and say so.
  const localNewer = localBuilt && prebuilds.every((p) => statSync(local).mtimeMs > statSync(p.path).mtimeMs);
  if (localBuilt && localNewer && prebuilds.length > 0) {
    for (const p of prebuilds) rejected.push({ ...p, reason: `older than the local build ${local}` });
    candidates.push({ path: local, source: 'build' });
  } else {
    candidates.push(...prebuilds);
    if (localBuilt) candidates.push({ path: local, source: 'build' });
  }
  return { candidates, rejected };
}

export const NATIVE_ABI = 3;

let cached: LoadedNative | undefined;

/** Loads the addon once per process; throws with every rejection reason when nothing loads. */
export function loadNative(): LoadedNative {
  cached ??= loadNativeFrom(packageRoot());
  return cached;
}

/** Tries each candidate under `root` in order (uncached; tests point it at fake package roots). */
export function loadNativeFrom(root: string): LoadedNative {
  const { candidates, rejected } = nativeCandidates(root);
  for (const c of candidates) {
    let addon: NativeAddon & { abi?: number };
    try {
      addon = require(c.path) as NativeAddon & { abi?: number };
    } catch (err) {
      rejected.push({ ...c, reason: `failed to load: ${(err as Error).message.split('\n')[0]}` });
      continue;
    }
    if (addon.abi !== NATIVE_ABI) {
      rejected.push({ ...c, reason: `addon ABI ${String(addon.abi)} does not match this package's ${NATIVE_ABI}` });
      continue;
    }
    return { addon, path: c.path, source: c.source, rejected };
  }
  const lines = rejected.map((r) => `  - ${r.path}: ${r.reason}`);
  throw new Error(
    `No usable native binary for ${process.platform}-${process.arch} (Node ${process.version}).\n` +
      (lines.length ? `${lines.join('\n')}\n` : '  no prebuild for this platform and no local build\n') +
      'Build it from source with `npm run build:native` (needs python3, make and a C++20 compiler).',
  );
}
