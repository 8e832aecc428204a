// Where a loaded model runs (CPU or a CUDA device), in the one shape `rapid run --json`,
// /v1/status and the `rapid serve` banner report it.
import type { NativeModelInfo } from '../native/types.js';

export interface ModelDevice {
  kind: 'cpu' | 'cuda';
  name: string;
  /** Why the CPU runs a model that could have gone to the GPU (device auto). */
  note?: string;
}

export type DeviceInfo = Pick<NativeModelInfo, 'device' | 'deviceName' | 'deviceNote'>;

export function modelDevice(info: DeviceInfo): ModelDevice {
  return { kind: info.device, name: info.deviceName, ...(info.deviceNote ? { note: info.deviceNote } : {}) };
}

/** "on NVIDIA H200 (CUDA)" or "on the CPU, 16 threads". */
export function describeDevice(info: DeviceInfo & Pick<NativeModelInfo, 'threads'>): string {
  return info.device === 'cuda' ? `on ${info.deviceName} (CUDA)` : `on the CPU, ${info.threads} threads`;
}
