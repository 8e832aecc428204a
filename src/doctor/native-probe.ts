// Loads each candidate native binary in a child process first, in the loader's order (the same
// CUDA-or-CPU variant choice), so a binary that crashes or hangs on load (wrong CPU, broken
// build) cannot take doctor down with it.
import { spawn } from 'node:child_process';
import { NATIVE_ABI, planNative, selectionNote, type NativeCandidate, type NativePlan, type NativeRejection, type NativeSelectOptions } from '../native/binding.js';
import type { NativeDevice, NativeSystemInfo } from '../native/types.js';

export interface NativeProbe {
  loaded?: NativeCandidate & { version: string; systemInfo: NativeSystemInfo };
  rejected: NativeRejection[];
  candidates: NativeCandidate[];
  /** The device the variant was chosen for (RAPID_DEVICE, else auto). */
  device?: NativeDevice;
  /** The NVIDIA driver file found, or null; absent when the probe did not look. */
  driver?: string | null;
  /** Why the CUDA variant is not the one loaded (see binding.selectionNote). */
  note?: string;
}

// CommonJS, run with `node -e`: argv[1] is the JSON list of paths, argv[2] the expected ABI.
// Each attempt is announced before it starts, so the parent can tell which binary killed it.
const CHILD = `
const paths = JSON.parse(process.argv[1]);
const abi = Number(process.argv[2]);
const say = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
for (const path of paths) {
  say({ try: path });
  let addon;
  try {
    addon = require(path);
  } catch (err) {
    say({ rejected: path, reason: 'failed to load: ' + String(err && err.message || err).split('\\n')[0] });
    continue;
  }
  if (addon.abi !== abi) {
    say({ rejected: path, reason: 'addon ABI ' + String(addon.abi) + ' does not match this package\\'s ' + abi });
    continue;
  }
  let info;
  try {
    info = addon.systemInfo();
  } catch (err) {
    say({ rejected: path, reason: 'systemInfo() threw: ' + String(err && err.message || err) });
    continue;
  }
  say({ ok: path, version: String(addon.version), systemInfo: info });
  process.exit(0);
}
say({ none: true });
`;

interface ChildLine {
  try?: string;
  rejected?: string;
  reason?: string;
  ok?: string;
  version?: string;
  systemInfo?: NativeSystemInfo;
  none?: boolean;
}

function runChild(paths: string[], timeoutMs: number): Promise<{ lines: ChildLine[]; code: number | null; signal: NodeJS.Signals | null; timedOut: boolean; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['-e', CHILD, JSON.stringify(paths), String(NATIVE_ABI)], { stdio: ['ignore', 'pipe', 'pipe'], env: process.env });
    let out = '';
    let stderr = '';
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const lines = out
        .split('\n')
        .filter(Boolean)
        .flatMap((l) => {
          try {
            return [JSON.parse(l) as ChildLine];
          } catch {
            return [];
          }
        });
      resolve({ lines, code, signal, timedOut, stderr });
    });
  });
}

/** Probes the candidates of the loader's plan (default: this package, RAPID_DEVICE) in child processes. */
export async function probeNative(opts: Pick<NativeSelectOptions, 'root' | 'device' | 'env' | 'driverPaths'> & { timeoutMs?: number } = {}): Promise<NativeProbe> {
  const plan: NativePlan = planNative(opts);
  const { candidates, device, driver } = plan;
  const rejected = [...plan.rejected];
  const done = (loaded?: NativeProbe['loaded']): NativeProbe => {
    const note = loaded ? selectionNote(plan, loaded, rejected) : plan.cudaSkipped;
    return { ...(loaded ? { loaded } : {}), rejected, candidates, device, driver, ...(note ? { note } : {}) };
  };
  const bySource = new Map(candidates.map((c) => [c.path, c]));
  let pending = candidates.map((c) => c.path);
  // Each crash removes the culprit and restarts with the rest: at most one child per candidate.
  while (pending.length) {
    const r = await runChild(pending, opts.timeoutMs ?? 20_000);
    let current: string | undefined;
    for (const line of r.lines) {
      if (line.try) current = line.try;
      if (line.rejected) {
        rejected.push({ ...(bySource.get(line.rejected) as NativeCandidate), reason: line.reason ?? 'rejected' });
        current = undefined;
      }
      if (line.ok && line.systemInfo) {
        const c = bySource.get(line.ok) as NativeCandidate;
        return done({ ...c, version: line.version ?? '?', systemInfo: line.systemInfo });
      }
      if (line.none) return done();
    }
    if (!current) {
      // The child died before trying anything (e.g. node itself failed): report and stop.
      const why = r.timedOut ? 'timed out' : `exited with ${r.signal ?? r.code}: ${r.stderr.trim().split('\n').pop() ?? ''}`;
      for (const p of pending) rejected.push({ ...(bySource.get(p) as NativeCandidate), reason: `probe process ${why}` });
      return done();
    }
    const how = r.timedOut ? `hung for more than ${Math.round((opts.timeoutMs ?? 20_000) / 1000)} s while loading` : `crashed the process while loading (${r.signal ?? `exit code ${r.code}`})`;
    rejected.push({ ...(bySource.get(current) as NativeCandidate), reason: how });
    pending = pending.slice(pending.indexOf(current) + 1);
  }
  return done();
}
