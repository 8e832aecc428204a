// Reads the JSON header of a .safetensors file (8-byte little-endian length, then JSON) without
// touching the tensor data, so `models info` works without the native addon. Strict: every entry's
// dtype, shape and byte range are checked against the file, so native code never maps a lie.
import { openSync, readSync, closeSync, fstatSync } from 'node:fs';
import { basename } from 'node:path';
import { CHECKPOINT_LIMITS } from './checkpoint-limits.js';
import { InvalidCheckpointError } from './errors.js';

export interface TensorHeader {
  name: string;
  dtype: string;
  shape: number[];
  bytes: number;
  file: string; // base name of the file holding it
}

/** Bytes per element of the dtypes safetensors defines (and native/src/tensor/dtype.h reads). */
export const DTYPE_BYTES: Record<string, number> = {
  F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1, U64: 8, U32: 4, U16: 2, U8: 1, BOOL: 1,
};

export function readSafetensorsHeader(path: string): { tensors: TensorHeader[]; metadata: Record<string, string> } {
  const file = basename(path);
  const fail = (what: string): never => {
    throw new InvalidCheckpointError(`${file}: ${what}`);
  };
  const fd = openSync(path, 'r');
  try {
    const size = fstatSync(fd).size;
    const lenBuf = Buffer.alloc(8);
    if (readSync(fd, lenBuf, 0, 8, 0) !== 8) fail(`truncated: ${size} bytes, shorter than a safetensors header`);
    const len = Number(lenBuf.readBigUInt64LE(0));
    if (len < 2 || len > CHECKPOINT_LIMITS.maxHeaderBytes || 8 + len > size)
      fail(`invalid safetensors header length ${len} (file is ${size} bytes: truncated or not a safetensors file)`);
    const buf = Buffer.alloc(len);
    readSync(fd, buf, 0, len, 8);
    let json: unknown;
    try {
      json = JSON.parse(buf.toString('utf8'));
    } catch (err) {
      fail(`header is not valid JSON (${(err as Error).message})`);
    }
    if (!json || typeof json !== 'object' || Array.isArray(json)) fail('header is not a JSON object');
    const dataSize = size - 8 - len;
    const tensors: TensorHeader[] = [];
    const spans: { b: number; e: number; name: string }[] = [];
    let metadata: Record<string, string> = {};
    for (const [name, v] of Object.entries(json as Record<string, unknown>)) {
      if (name === '__metadata__') {
        if (v && typeof v === 'object') metadata = v as Record<string, string>;
        continue;
      }
      const bad = (what: string): never => fail(`tensor ${name}: ${what}`);
      const t = v as { dtype?: unknown; shape?: unknown; data_offsets?: unknown } | null;
      if (!t || typeof t !== 'object') bad('entry is not an object');
      const { dtype, shape, data_offsets: off } = t as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
      if (typeof dtype !== 'string' || DTYPE_BYTES[dtype] === undefined) bad(`unknown dtype ${JSON.stringify(dtype)}`);
      if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && (d as number) >= 0)) bad(`shape ${JSON.stringify(shape)} is not a list of non-negative integers`);
      if (!Array.isArray(off) || off.length !== 2 || !off.every((d) => Number.isSafeInteger(d) && (d as number) >= 0)) bad('data_offsets must be [begin, end] non-negative integers');
      const [b, e] = off as [number, number];
      const numel = (shape as number[]).reduce((a, d) => a * d, 1);
      const want = numel * (DTYPE_BYTES[dtype as string] as number);
      if (e < b) bad(`data_offsets end ${e} < begin ${b}`);
      if (e > dataSize) bad(`data_offsets [${b}, ${e}] point past the end of the data (${dataSize} bytes): truncated file?`);
      if (e - b !== want) bad(`data_offsets span ${e - b} bytes but shape ${JSON.stringify(shape)} × ${dtype} needs ${want}`);
      tensors.push({ name, dtype: dtype as string, shape: shape as number[], bytes: e - b, file });
      if (e > b) spans.push({ b, e, name });
    }
    spans.sort((x, y) => x.b - y.b);
    let far: { e: number; name: string } | undefined; // the span reaching furthest so far
    for (const cur of spans) {
      if (far && cur.b < far.e) fail(`tensors ${far.name} and ${cur.name} overlap`);
      if (!far || cur.e > far.e) far = cur;
    }
    return { tensors, metadata };
  } finally {
    closeSync(fd);
  }
}
