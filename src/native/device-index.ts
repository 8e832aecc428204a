// `cuda:N`: one GPU of several. rapid's native runtime uses the CUDA runtime's device 0, so a GPU
// is chosen by what the process sees: CUDA_VISIBLE_DEVICES narrowed to the N-th visible GPU (set
// before the runtime initialises, or in an engine child's environment). Nothing else changes.
import type { NativeDevice } from './types.js';

/** A --device value: a kind, or cuda:N. */
export type DeviceFlag = NativeDevice | `cuda:${number}`;

/** "cuda:2" -> cuda, 2; "cpu" -> cpu, null. */
export function splitDeviceFlag(flag: DeviceFlag): { kind: NativeDevice; index: number | null } {
  const m = /^cuda:(\d+)$/.exec(flag);
  return m ? { kind: 'cuda', index: Number(m[1]) } : { kind: flag as NativeDevice, index: null };
}

/** The CUDA_VISIBLE_DEVICES that leaves only GPU `index` of those visible under `env`. */
export function visibleDeviceFor(index: number, env: NodeJS.ProcessEnv = process.env): string {
  const current = env.CUDA_VISIBLE_DEVICES?.trim();
  if (!current) return String(index);
  const list = current.split(',').map((s) => s.trim()).filter((s) => s.length > 0);
  if (index >= list.length) throw new Error(`cuda:${index}: only ${list.length} GPU${list.length === 1 ? ' is' : 's are'} visible (CUDA_VISIBLE_DEVICES=${current}); the index counts those, from 0`);
  return list[index]!;
}

/**
 * The device kind to load on; a cuda:N flag first narrows this process (and the engine children it
 * starts) to that GPU. Call before the addon loads.
 */
export function useDevice(flag: DeviceFlag | undefined, env: NodeJS.ProcessEnv = process.env): NativeDevice | undefined {
  if (flag === undefined) return undefined;
  const { kind, index } = splitDeviceFlag(flag);
  if (index !== null) env.CUDA_VISIBLE_DEVICES = visibleDeviceFor(index, env);
  return kind;
}
