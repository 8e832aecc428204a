// Reads the JSON header of a .safetensors file (8-byte little-endian length, then JSON) without
// touching the tensor data, so `models info` works without the native addon.
import { openSync, readSync, closeSync, fstatSync } from 'node:fs';

export interface TensorHeader {
  name: string;
  dtype: string;
  shape: number[];
  bytes: number;
}

const MAX_HEADER = 100 * 1024 * 1024;

export function readSafetensorsHeader(path: string): { tensors: TensorHeader[]; metadata: Record<string, string> } {
  const fd = openSync(path, 'r');
  try {
    const size = fstatSync(fd).size;
    const lenBuf = Buffer.alloc(8);
    if (readSync(fd, lenBuf, 0, 8, 0) !== 8) throw new Error(`${path}: shorter than a safetensors header`);
    const len = Number(lenBuf.readBigUInt64LE(0));
    if (len <= 0 || len > MAX_HEADER || 8 + len > size) throw new Error(`${path}: invalid safetensors header length ${len} (file is ${size} bytes)`);
    const buf = Buffer.alloc(len);
    readSync(fd, buf, 0, len, 8);
    const json = JSON.parse(buf.toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] } | Record<string, string>>;
    const tensors: TensorHeader[] = [];
    let metadata: Record<string, string> = {};
    for (const [name, v] of Object.entries(json)) {
      if (name === '__metadata__') {
        metadata = v as Record<string, string>;
        continue;
      }
      const t = v as { dtype: string; shape: number[]; data_offsets: [number, number] };
      tensors.push({ name, dtype: t.dtype, shape: t.shape, bytes: t.data_offsets[1] - t.data_offsets[0] });
    }
    return { tensors, metadata };
  } finally {
    closeSync(fd);
  }
}
