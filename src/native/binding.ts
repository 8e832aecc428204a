// The only module that loads the native addon. Two variants exist: the CPU build (the default
// binary) and the CUDA build. The CUDA variant is tried first when a device is wanted, one is
// built and an NVIDIA driver looks present; every rejected candidate keeps its reason for doctor.
import { createRequire } from 'node:module';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { NativeAddon, NativeDevice, NativeVariant } from './types.js';

export type NativeSource = 'env' | 'prebuild' | 'build';

export interface NativeCandidate {
  path: string;
  source: NativeSource;
  variant: NativeVariant;
}

export interface NativeRejection extends NativeCandidate {
  reason: string;
}

export interface LoadedNative {
  addon: NativeAddon;
  path: string;
  source: NativeSource;
  variant: NativeVariant;
  /** The device asked for (--device, else RAPID_DEVICE, else auto) when the binary was chosen. */
  device: NativeDevice;
  /** Why the CUDA variant is not the one in use (absent when it is, or when it was never wanted). */
  note?: string;
  /** The NVIDIA driver file found at selection, or null (no GPU to speak of). */
  driver: string | null;
  rejected: NativeRejection[];
}

/** Where candidates come from and how the driver is detected; tests replace each part. */
export interface NativeSelectOptions {
  root?: string; // package root (default: this package)
  device?: NativeDevice; // already resolved (default: RAPID_DEVICE, else auto)
  env?: NodeJS.ProcessEnv; // RAPID_NATIVE_PATH, RAPID_NATIVE_CUDA_PATH, RAPID_DEVICE
  driverPaths?: readonly string[]; // files whose presence means an NVIDIA driver is loaded
}

/** The load order for one device request, and what was ruled out before loading anything. */
export interface NativePlan {
  device: NativeDevice;
  candidates: NativeCandidate[];
  rejected: NativeRejection[];
  /** The driver file found, or null. */
  driver: string | null;
  /** Why CUDA candidates are not tried first; absent when they are. */
  cudaSkipped?: string;
}

export const DEVICES: readonly NativeDevice[] = ['auto', 'cpu', 'cuda'];
export const NVIDIA_DRIVER_PATHS: readonly string[] = ['/proc/driver/nvidia/version', '/dev/nvidiactl'];
/** This machine's prebuild tuple, "<platform>-<arch>". */
const HOST = `${process.platform}-${process.arch}`;

/** Platforms with a published CUDA package (packages/<name> in the repository, built by scripts/release.mjs). */
export const CUDA_PACKAGE_PLATFORMS: readonly string[] = ['linux-x64'];

/** The optional npm package that carries the CUDA build for a platform: installed next to rapid, it is found. */
export function cudaPackageName(tuple = HOST): string {
  return `rapid-vlm-cuda-${tuple}`;
}

export const BUILD_CUDA_HINT = CUDA_PACKAGE_PLATFORMS.includes(HOST)
  ? `install the CUDA build next to rapid (\`npm install -g ${cudaPackageName()}\`, the same version) or build the CUDA variant with \`npm run build:cuda\` (needs the CUDA toolkit: nvcc)`
  : 'build the CUDA variant with `npm run build:cuda` (needs the CUDA toolkit: nvcc)';

const require = createRequire(import.meta.url);

/** Package root: two levels above dist/native (or src/native under vitest). */
export function packageRoot(): string {
  return resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
}

/** Checks a device name; `from` names where it came from in the error ("--device", "RAPID_DEVICE"). */
export function parseDevice(value: string, from = '--device'): NativeDevice {
  const v = value.trim().toLowerCase();
  if ((DEVICES as readonly string[]).includes(v)) return v as NativeDevice;
  throw new Error(`${from} must be auto, cpu or cuda, got "${value}"`);
}

/** The device asked for: the flag when given, else RAPID_DEVICE, else auto. */
export function resolveDevice(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): NativeDevice {
  if (flag !== undefined) return parseDevice(flag, '--device');
  const fromEnv = env.RAPID_DEVICE;
  if (fromEnv !== undefined && fromEnv.trim() !== '') return parseDevice(fromEnv, 'RAPID_DEVICE');
  return 'auto';
}

/** The first driver file that exists (an NVIDIA kernel module is loaded), or null. */
export function nvidiaDriverPresent(paths: readonly string[] = NVIDIA_DRIVER_PATHS): string | null {
  return paths.find((p) => existsSync(p)) ?? null;
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

/** Prebuilds of one directory that match this Node, and the rejected ones (`nodeOnly`: skip other files silently). */
function scanPrebuildDir(dir: string, variant: NativeVariant, rejected: NativeRejection[], nodeOnly = false): NativeCandidate[] {
  const found: NativeCandidate[] = [];
  for (const file of readdirSync(dir)) {
    if (nodeOnly && !file.endsWith('.node')) continue;
    const path = join(dir, file);
    const mismatch = prebuildTagsMatch(file);
    if (mismatch) rejected.push({ path, source: 'prebuild', variant, reason: mismatch });
    else found.push({ path, source: 'prebuild', variant });
  }
  return found;
}

/** Prebuilds, then the local build; a local build newer than every prebuild is a fresh compile and wins. */
function withLocalBuild(prebuilds: NativeCandidate[], local: string, variant: NativeVariant, rejected: NativeRejection[]): NativeCandidate[] {
  if (!existsSync(local)) return prebuilds;
  const localNewer = prebuilds.every((p) => statSync(local).mtimeMs > statSync(p.path).mtimeMs);
  if (localNewer && prebuilds.length > 0) {
    for (const p of prebuilds) rejected.push({ ...p, reason: `older than the local build ${local}` });
    return [{ path: local, source: 'build', variant }];
  }
  return [...prebuilds, { path: local, source: 'build', variant }];
}

/** CPU-variant candidates in preference order (RAPID_NATIVE_PATH, prebuilds/<platform>-<arch>, build/Release). */
export function nativeCandidates(root = packageRoot(), env: NodeJS.ProcessEnv = process.env): { candidates: NativeCandidate[]; rejected: NativeRejection[] } {
  const candidates: NativeCandidate[] = [];
  const rejected: NativeRejection[] = [];
  if (env.RAPID_NATIVE_PATH) candidates.push({ path: resolve(env.RAPID_NATIVE_PATH), source: 'env', variant: 'cpu' });
  const prebuildRoot = join(root, 'prebuilds');
  const prebuilds: NativeCandidate[] = [];
  if (existsSync(prebuildRoot)) {
    for (const dir of readdirSync(prebuildRoot)) {
      const full = join(prebuildRoot, dir);
      if (!statSync(full).isDirectory()) continue;
      if (dir !== HOST) {
        for (const file of readdirSync(full)) rejected.push({ path: join(full, file), source: 'prebuild', variant: 'cpu', reason: `built for ${dir}, this machine is ${HOST}` });
        continue;
      }
      prebuilds.push(...scanPrebuildDir(full, 'cpu', rejected));
    }
  }
  candidates.push(...withLocalBuild(prebuilds, join(root, 'build', 'Release', 'rapid_native.node'), 'cpu', rejected));
  return { candidates, rejected };
}

/** The CUDA package's folder as Node resolves a dependency of the package at `root` (a sibling in a global or project install). */
function cudaPackageDir(root: string): string | undefined {
  try {
    return dirname(createRequire(join(root, 'package.json')).resolve(`${cudaPackageName()}/package.json`));
  } catch {
    return undefined;
  }
}

/** CUDA-variant candidates (RAPID_NATIVE_CUDA_PATH, the rapid-vlm-cuda-<platform>-<arch> package, build/cuda). */
export function cudaCandidates(root = packageRoot(), env: NodeJS.ProcessEnv = process.env): { candidates: NativeCandidate[]; rejected: NativeRejection[] } {
  const candidates: NativeCandidate[] = [];
  const rejected: NativeRejection[] = [];
  if (env.RAPID_NATIVE_CUDA_PATH) candidates.push({ path: resolve(env.RAPID_NATIVE_CUDA_PATH), source: 'env', variant: 'cuda' });
  const dir = cudaPackageDir(root);
  const prebuilds = dir ? scanPrebuildDir(dir, 'cuda', rejected, true) : [];
  candidates.push(...withLocalBuild(prebuilds, join(root, 'build', 'cuda', 'rapid_native.node'), 'cuda', rejected));
  return { candidates, rejected };
}

/** Where a CUDA build was looked for, for messages. */
function cudaPlaces(): string {
  return `RAPID_NATIVE_CUDA_PATH, the ${cudaPackageName()} package, build/cuda/rapid_native.node`;
}

/**
 * The load order for a device request. auto: CUDA first when built and a driver is present, then
 * CPU; cpu: CPU first; cuda: CUDA only. The CUDA variant runs on the CPU too, so it stays a last
 * resort when no CPU build loads.
 */
export function planNative(opts: NativeSelectOptions = {}): NativePlan {
  const env = opts.env ?? process.env;
  const root = opts.root ?? packageRoot();
  const device = opts.device ?? resolveDevice(undefined, env);
  const cpu = nativeCandidates(root, env);
  const cuda = cudaCandidates(root, env);
  const rejected = [...cuda.rejected, ...cpu.rejected];
  const driver = nvidiaDriverPresent(opts.driverPaths);
  const noBuild = `no CUDA build found (looked for ${cudaPlaces()})`;
  const probed = opts.driverPaths ?? NVIDIA_DRIVER_PATHS;
  const noDriver = `no NVIDIA driver found (${probed.join(' and ')} ${probed.length === 1 ? 'does' : 'do'} not exist)`;
  const missing = [...(cuda.candidates.length === 0 ? [noBuild] : []), ...(driver ? [] : [noDriver])];
  const cudaSkipped = device === 'cpu' ? 'device cpu was requested' : missing.length ? missing.join('; ') : undefined;
  if (device === 'cuda') return { device, candidates: cudaSkipped ? [] : cuda.candidates, rejected, driver, cudaSkipped };
  const candidates = cudaSkipped ? [...cpu.candidates, ...cuda.candidates] : [...cuda.candidates, ...cpu.candidates];
  return { device, candidates, rejected, driver, cudaSkipped };
}

/** Why the CUDA variant is not the one loaded (undefined when it is and was wanted, or device is cpu). */
export function selectionNote(plan: NativePlan, loaded: NativeCandidate, rejected: readonly NativeRejection[]): string | undefined {
  if (plan.device === 'cpu') return loaded.variant === 'cuda' ? 'no CPU build loaded; the CUDA build runs on the CPU' : undefined;
  if (loaded.variant === 'cuda') return plan.cudaSkipped ? `${plan.cudaSkipped}; no CPU build loaded, so the CUDA build runs on the CPU` : undefined;
  if (plan.cudaSkipped) return plan.cudaSkipped;
  const failed = rejected.filter((r) => r.variant === 'cuda').map((r) => `${r.path}: ${r.reason}`);
  return `the CUDA build did not load (${failed.join('; ')}); using the CPU build`;
}

/** The error for device cuda when no CUDA build can be used: what is missing and how to get it. */
function cudaUnavailable(plan: NativePlan, rejected: readonly NativeRejection[]): Error {
  const failed = rejected.filter((r) => r.variant === 'cuda').map((r) => `  - ${r.path}: ${r.reason}`);
  const fixes = [
    ...(plan.driver ? [] : ['install the NVIDIA driver (in containers: --gpus all)']),
    ...(plan.cudaSkipped === undefined || /no CUDA build/.test(plan.cudaSkipped) ? [BUILD_CUDA_HINT] : []),
    'or run on the CPU with --device cpu',
  ];
  return new Error(`--device cuda: ${plan.cudaSkipped ?? 'no CUDA build loaded'}.\n${failed.length ? `${failed.join('\n')}\n` : ''}Fix: ${fixes.join('; ')}.`);
}

export const NATIVE_ABI = 6;

let cached: LoadedNative | undefined;

/**
 * Loads the addon once per process; the first call's device (else RAPID_DEVICE, else auto) picks
 * the variant, so --device must reach the first call. Throws with every rejection when nothing loads.
 */
export function loadNative(opts: { device?: NativeDevice } = {}): LoadedNative {
  if (!cached) {
    cached = loadNativeFrom(packageRoot(), { device: opts.device });
    return cached;
  }
  if (opts.device === 'cuda' && cached.variant !== 'cuda') {
    throw new Error(`--device cuda: this process already loaded the CPU build ${cached.path} (${cached.note ?? `device ${cached.device}`}); pass --device cuda before the first model loads`);
  }
  return cached;
}

/** Tries each candidate of the plan in order (uncached; tests point it at fake package roots). */
export function loadNativeFrom(root: string, opts: Omit<NativeSelectOptions, 'root'> = {}): LoadedNative {
  const plan = planNative({ ...opts, root });
  const rejected = [...plan.rejected];
  for (const c of plan.candidates) {
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
    const note = selectionNote(plan, c, rejected);
    return { addon, path: c.path, source: c.source, variant: c.variant, device: plan.device, ...(note ? { note } : {}), driver: plan.driver, rejected };
  }
  if (plan.device === 'cuda') throw cudaUnavailable(plan, rejected);
  const lines = rejected.map((r) => `  - ${r.path}: ${r.reason}`);
  throw new Error(
    `No usable native binary for ${process.platform}-${process.arch} (Node ${process.version}).\n` +
      (lines.length ? `${lines.join('\n')}\n` : '  no prebuild for this platform and no local build\n') +
      'Build it from source with `npm run build:native` (needs python3, make and a C++20 compiler).',
  );
}
