// Whether this machine can run the CUDA variant: its binary (local build or the CUDA package's) and an NVIDIA driver.
// The GPU suites skip with `cudaSkipReason` elsewhere (CI has no GPU).
import { existsSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';

export const ROOT = resolve(import.meta.dirname, '..', '..');

function cudaBinary(): string | undefined {
  const local = join(ROOT, 'build', 'cuda', 'rapid_native.node');
  if (existsSync(local)) return local;
  const pre = join(ROOT, 'packages', 'rapid-vlm-cuda-linux-x64');
  const file = existsSync(pre) ? readdirSync(pre).find((f) => f.endsWith('.node')) : undefined;
  return file ? join(pre, file) : undefined;
}

export const cudaAddonPath = cudaBinary();
const driver = existsSync('/proc/driver/nvidia/version') || existsSync('/dev/nvidiactl');

/** Why the GPU suites skip here, or '' when they run. */
export const cudaSkipReason = !cudaAddonPath
  ? 'no CUDA variant binary (build/cuda/rapid_native.node or packages/rapid-vlm-cuda-linux-x64/*.node)'
  : !driver
    ? 'no NVIDIA driver (/proc/driver/nvidia/version, /dev/nvidiactl)'
    : '';
