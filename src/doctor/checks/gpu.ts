// GPU backends: NVIDIA (driver and devices, via nvidia-smi or /proc/driver/nvidia) on Linux and
// Metal on macOS. This build computes on the CPU; the finding says what a GPU backend would find.
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import type { CheckResult } from '../types.js';

export interface GpuDevice {
  name: string;
  memoryMiB: number;
  driver: string;
}

function run(cmd: string, args: string[], timeoutMs: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: timeoutMs, windowsHide: true }, (err, stdout) => resolve(err ? undefined : stdout));
  });
}

export async function nvidiaDevices(timeoutMs = 5000): Promise<{ devices: GpuDevice[]; driver?: string; smi: boolean }> {
  const out = await run('nvidia-smi', ['--query-gpu=name,memory.total,driver_version', '--format=csv,noheader,nounits'], timeoutMs);
  if (out !== undefined) {
    const devices = out
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((l) => {
        const [name, mem, driver] = l.split(',').map((s) => s.trim());
        return { name, memoryMiB: Number(mem), driver };
      });
    return { devices, driver: devices[0]?.driver, smi: true };
  }
  const proc = '/proc/driver/nvidia/version';
  if (existsSync(proc)) {
    const m = /Kernel Module\s+([\d.]+)/.exec(readFileSync(proc, 'utf8'));
    return { devices: [], driver: m?.[1] ?? 'unknown', smi: false };
  }
  return { devices: [], smi: false };
}

export async function checkGpu(platform: string = process.platform): Promise<CheckResult> {
  const base = { id: 'gpu', title: 'GPU backends' };
  if (platform === 'darwin') {
    return { ...base, status: 'ok', finding: process.arch === 'arm64' ? 'Apple GPU (Metal): the Metal backend is planned; rapid runs on the CPU' : 'Intel Mac: no GPU backend; rapid runs on the CPU', details: { metal: 'planned' } };
  }
  const nv = await nvidiaDevices();
  const details = { cuda: { driver: nv.driver ?? null, devices: nv.devices, nvidiaSmi: nv.smi } };
  if (nv.devices.length) {
    const list = nv.devices.map((d) => `${d.name} (${(d.memoryMiB / 1024).toFixed(0)} GiB)`).join(', ');
    return { ...base, status: 'ok', finding: `CUDA: driver ${nv.driver}, ${nv.devices.length} device${nv.devices.length > 1 ? 's' : ''}: ${list}; this build runs on the CPU (no CUDA backend yet)`, details };
  }
  if (nv.driver) {
    return { ...base, status: 'warn', finding: `NVIDIA driver ${nv.driver} is loaded but nvidia-smi is missing or lists no device`, fix: 'install the NVIDIA utilities (nvidia-smi) and check the GPU is visible (in containers: --gpus all)', details };
  }
  return { ...base, status: 'ok', finding: 'no GPU found (no NVIDIA driver); rapid runs on the CPU', details };
}
