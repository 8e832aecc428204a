// Runs every check and collects the report. Checks never throw: a check that breaks reports
// itself as failed, so one problem never hides the others.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { hubCacheDir, type Env } from '../models/hub-env.js';
import { packageRoot, resolveDevice } from '../native/binding.js';
import type { NativeDevice } from '../native/types.js';
import { checkCacheIntegrity } from './checks/cache-integrity.js';
import { checkCpuFeatures } from './checks/cpu-features.js';
import { checkDisk } from './checks/disk.js';
import { checkGpu } from './checks/gpu.js';
import { checkMemory } from './checks/memory.js';
import { checkNativeBinary } from './checks/native-binary.js';
import { checkNodeVersion } from './checks/node-version.js';
import { checkPlatform } from './checks/platform.js';
import { checkPort, DEFAULT_PORT } from './checks/port.js';
import { checkSmokeTest } from './checks/smoke-test.js';
import { checkThreads } from './checks/threads.js';
import { probeNative, type NativeProbe } from './native-probe.js';
import type { CheckResult, DoctorReport } from './types.js';

export interface DoctorOptions {
  model?: string; // adds the load-and-generate smoke test
  port?: number;
  threads?: number;
  env?: Env;
  nativeRoot?: string; // package root to probe (tests)
  driverPaths?: readonly string[]; // NVIDIA driver files to look for (tests)
  probeTimeoutMs?: number;
}

async function guarded(id: string, title: string, fn: () => CheckResult | Promise<CheckResult>): Promise<CheckResult> {
  try {
    return await fn();
  } catch (err) {
    return { id, title, status: 'fail', finding: `the check itself failed: ${(err as Error).message}`, fix: 'report this as a rapid bug' };
  }
}

function rapidVersion(): string {
  try {
    return (JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

export async function runDoctor(opts: DoctorOptions = {}): Promise<DoctorReport> {
  const env = opts.env ?? process.env;
  const cacheDir = hubCacheDir(env);
  const checks: CheckResult[] = [];
  checks.push(await guarded('node', 'Node.js', () => checkNodeVersion()));
  checks.push(await guarded('platform', 'Platform', () => checkPlatform()));
  let requested: NativeDevice = 'auto';
  let deviceError: string | undefined;
  try {
    requested = resolveDevice(undefined, env);
  } catch (err) {
    deviceError = (err as Error).message;
  }
  let probe: NativeProbe = { rejected: [], candidates: [] };
  checks.push(
    await guarded('native', 'Native binary', async () => {
      // device cuda is probed as auto: the native check still finds a binary, the GPU check says why not CUDA.
      probe = await probeNative({ root: opts.nativeRoot, timeoutMs: opts.probeTimeoutMs, device: requested === 'cuda' ? 'auto' : requested, driverPaths: opts.driverPaths });
      return checkNativeBinary(probe);
    }),
  );
  const sys = probe.loaded?.systemInfo;
  checks.push(await guarded('cpu', 'CPU features', () => checkCpuFeatures(sys)));
  checks.push(await guarded('threads', 'Threads', () => checkThreads(sys)));
  checks.push(await guarded('gpu', 'GPU', () => checkGpu({ probe, requested, deviceError })));
  checks.push(await guarded('memory', 'Memory', () => checkMemory()));
  checks.push(await guarded('disk', 'Disk (model cache)', () => checkDisk(cacheDir)));
  checks.push(await guarded('cache', 'Cache integrity', () => checkCacheIntegrity(cacheDir)));
  checks.push(await guarded('port', `Port ${opts.port ?? DEFAULT_PORT}`, () => checkPort(opts.port ?? DEFAULT_PORT)));
  if (opts.model) {
    const spec = opts.model;
    checks.push(await guarded('model', 'Model smoke test', () => checkSmokeTest(spec, probe, { env, threads: opts.threads })));
  }
  const summary = { ok: 0, warn: 0, fail: 0 };
  for (const c of checks) summary[c.status]++;
  return { rapidVersion: rapidVersion(), checks, summary, ok: summary.fail === 0 };
}
