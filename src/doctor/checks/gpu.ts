// GPU: which addon variant the loader picks (CUDA or CPU) and why, the CUDA devices it sees (name,
// memory, compute capability, driver), or, with the CPU build, what nvidia-smi reports. Metal on macOS.
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { BUILD_CUDA_HINT } from '../../native/binding.js';
import type { NativeCudaDevice, NativeDevice } from '../../native/types.js';
import type { NativeProbe } from '../native-probe.js';
import type { CheckResult } from '../types.js';

export interface GpuDevice {
  name: string;
  memoryMiB: number;
  driver: string;
}

export interface NvidiaSmiInfo {
  devices: GpuDevice[];
  driver?: string;
  smi: boolean;
}

export interface GpuCheckInput {
  probe: NativeProbe;
  /** The device rapid would ask for (RAPID_DEVICE, else auto). */
  requested: NativeDevice;
  /** RAPID_DEVICE holds something other than auto, cpu or cuda. */
  deviceError?: string;
  platform?: string;
  arch?: string;
  /** What the OS reports about NVIDIA GPUs when the CUDA build did not list them (tests pass a fake). */
  nvidia?: () => Promise<NvidiaSmiInfo>;
}

function run(cmd: string, args: string[], timeoutMs: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: timeoutMs, windowsHide: true }, (err, stdout) => resolve(err ? undefined : stdout));
  });
}

export async function nvidiaDevices(timeoutMs = 5000): Promise<NvidiaSmiInfo> {
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

const GIB = 1024 ** 3;

/** "cuda:0 NVIDIA H200, 139.8 GiB (138.9 GiB free), compute 9.0" */
export function describeCudaDevice(d: NativeCudaDevice): string {
  return `cuda:${d.index} ${d.name}, ${(d.totalBytes / GIB).toFixed(1)} GiB (${(d.freeBytes / GIB).toFixed(1)} GiB free), compute ${d.computeCapability}`;
}

function describeSmi(nv: NvidiaSmiInfo): string {
  const list = nv.devices.map((d) => `${d.name} (${(d.memoryMiB / 1024).toFixed(0)} GiB)`).join(', ');
  const driver = nv.driver ? `driver ${nv.driver}` : 'driver version unknown';
  return nv.devices.length ? `${list}, ${driver}` : `NVIDIA ${driver} (no device listed)`;
}

function variantLabel(probe: NativeProbe): string {
  const l = probe.loaded;
  return l ? `${l.variant === 'cuda' ? 'CUDA' : 'CPU'} build ${l.path}` : 'no native binary';
}

export async function checkGpu(input: GpuCheckInput): Promise<CheckResult> {
  const base = { id: 'gpu', title: 'GPU' };
  const { probe, requested } = input;
  const platform = input.platform ?? process.platform;
  if (input.deviceError) {
    return { ...base, status: 'fail', finding: input.deviceError, fix: 'set RAPID_DEVICE to auto, cpu or cuda, or unset it', details: { requested: null } };
  }
  if (platform === 'darwin') {
    const arm = (input.arch ?? process.arch) === 'arm64';
    return { ...base, status: 'ok', finding: arm ? 'Apple GPU (Metal): the Metal backend is planned; rapid runs on the CPU' : 'Intel Mac: no GPU backend; rapid runs on the CPU', details: { metal: 'planned' } };
  }
  const l = probe.loaded;
  const cuda = l?.systemInfo.cuda;
  const details: Record<string, unknown> = {
    variant: l?.variant ?? null,
    path: l?.path ?? null,
    requested,
    driverFile: probe.driver ?? null,
    note: probe.note ?? null,
    cuda: cuda ?? null,
  };
  const cudaWanted = requested === 'cuda';
  const notCuda = cudaWanted ? 'fail' : 'warn';

  if (l?.variant === 'cuda' && cuda?.compiled) {
    const versions = [cuda.driverVersion ? `driver ${cuda.driverVersion}` : '', cuda.runtimeVersion ? `CUDA runtime ${cuda.runtimeVersion}` : ''].filter(Boolean).join(', ');
    if (cuda.devices.length > 0) {
      const where = requested === 'cpu' ? 'models run on the CPU (device cpu requested)' : 'models run on the GPU, text decoders (Gemma 4, Qwen3-MoE and Qwen3-VL-MoE included) and image towers alike (--device cpu to opt out; a model the GPU cannot run says why)';
      return { ...base, status: 'ok', finding: `${variantLabel(probe)}: ${cuda.devices.map(describeCudaDevice).join('; ')}${versions ? `; ${versions}` : ''}; ${where}`, details };
    }
    if (!probe.driver && !cudaWanted) {
      // No driver at all: a CPU machine that has only the CUDA build, which runs on the CPU too.
      return { ...base, status: 'ok', finding: `no NVIDIA GPU found; the ${variantLabel(probe)} loaded${probe.note ? ` (${probe.note})` : ''}; models run on the CPU`, details };
    }
    return {
      ...base,
      status: notCuda,
      finding: `${variantLabel(probe)} loaded but sees no usable GPU (${cuda.error ?? 'no CUDA device'})${versions ? `; ${versions}` : ''}; models run on the CPU`,
      fix: 'check the NVIDIA driver with `nvidia-smi` (in containers: --gpus all); a driver older than the CUDA runtime cannot run it',
      details,
    };
  }

  // The CPU build (or none): the OS says whether a GPU is there that rapid does not use.
  const nv = await (input.nvidia ?? nvidiaDevices)();
  details.nvidiaSmi = nv;
  const gpuPresent = nv.devices.length > 0 || nv.driver !== undefined || !!probe.driver;
  const why = probe.note ? ` (${probe.note})` : '';
  if (!l) {
    return { ...base, status: 'warn', finding: `no native binary loaded (see Native binary)${gpuPresent ? `; ${describeSmi(nv)}` : '; no NVIDIA GPU found'}`, fix: 'fix the native binary first', details };
  }
  if (!gpuPresent) {
    const finding = `no NVIDIA GPU found; the ${variantLabel(probe)} loaded${why}; models run on the CPU`;
    if (cudaWanted) return { ...base, status: 'fail', finding, fix: 'RAPID_DEVICE=cuda needs an NVIDIA GPU and driver: install the driver (in containers: --gpus all) or unset RAPID_DEVICE', details };
    return { ...base, status: 'ok', finding, details };
  }
  if (requested === 'cpu') {
    return { ...base, status: 'ok', finding: `${describeSmi(nv)}; the ${variantLabel(probe)} loaded because device cpu was requested (RAPID_DEVICE=cpu); models run on the CPU`, details };
  }
  const noBuild = probe.note !== undefined && /no CUDA build/.test(probe.note);
  return {
    ...base,
    status: notCuda,
    finding: `${describeSmi(nv)}; but the ${variantLabel(probe)} loaded${why}; models run on the CPU`,
    fix: noBuild ? BUILD_CUDA_HINT : 'rebuild the CUDA variant with `npm run build:cuda`, or set RAPID_NATIVE_CUDA_PATH to a working one (the load error is above)',
    details,
  };
}
