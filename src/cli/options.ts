// Option parsers shared by subcommands: each rejects bad input with a message naming the flag.
import { InvalidArgumentError, Option } from 'commander';
import { parseDevice } from '../native/binding.js';
import type { KvCacheDtype, NativeDevice } from '../native/types.js';
import { type DeviceFlag } from '../native/device-index.js';

export function parseIntOption(flag: string): (value: string) => number {
  return (value: string) => {
    if (!/^-?\d+$/.test(value.trim())) throw new InvalidArgumentError(`${flag} expects an integer, got "${value}"`);
    return Number.parseInt(value, 10);
  };
}

export function parseFloatOption(flag: string): (value: string) => number {
  return (value: string) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n)) throw new InvalidArgumentError(`${flag} expects a number, got "${value}"`);
    return n;
  };
}

/** --precision, checked in each command's action (the message is the same everywhere). */
export function checkPrecision(value: string | undefined): void {
  if (value !== 'exact' && value !== 'fast') throw new Error(`--precision must be exact or fast, got "${value}"`);
}

export const DEVICE_HELP = 'auto (an NVIDIA GPU when present and the CUDA build is installed), cpu, cuda, or cuda:N (GPU N of those visible) (default: $RAPID_DEVICE, else auto)';

/** --device auto|cpu|cuda|cuda:N: checked while parsing, before anything loads the addon. */
export function parseDeviceOption(value: string): DeviceFlag {
  const indexed = /^\s*cuda:(\d{1,3})\s*$/i.exec(value);
  if (indexed) return `cuda:${Number(indexed[1])}`;
  try {
    return parseDevice(value, '--device');
  } catch {
    throw new InvalidArgumentError(`--device must be auto, cpu, cuda or cuda:N, got "${value}"`);
  }
}

export { useDevice } from '../native/device-index.js';

const KV_CACHE_DTYPES: readonly KvCacheDtype[] = ['f32', 'f16', 'bf16', 'int8'];

/** --kv-cache-dtype, one definition for serve, run, chat and bench (`prefix` e.g. 'in-process model: '). */
export function kvCacheDtypeOption(prefix = ''): Option {
  return new Option(
    '--kv-cache-dtype <type>',
    `${prefix}KV cache element type: f32, f16, bf16 or int8 (default: f16 on the CPU, bf16 on CUDA; f32 with --precision exact; see docs/kv-cache.md)`,
  ).argParser((value: string): KvCacheDtype => {
    const t = KV_CACHE_DTYPES.find((d) => d === value);
    if (t === undefined) throw new InvalidArgumentError(`--kv-cache-dtype must be f32, f16, bf16 or int8, got "${value}"`);
    return t;
  });
}
