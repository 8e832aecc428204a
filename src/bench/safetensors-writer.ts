// Minimal streaming safetensors writer: the header is computed from declared shapes, then each
// tensor is generated chunk by chunk straight to disk, so memory stays bounded by one chunk.
import { closeSync, openSync, writeSync } from 'node:fs';

export type SafetensorsDType = 'U32' | 'BF16' | 'F16' | 'F32';

const DTYPE_BYTES: Record<SafetensorsDType, number> = { U32: 4, BF16: 2, F16: 2, F32: 4 };

export interface TensorSpec {
  name: string;
  dtype: SafetensorsDType;
  shape: number[];
  /** Fills `chunk` with the bytes of this tensor that start at `byteOffset` (chunk-aligned to 8). */
  fill(chunk: Buffer, byteOffset: number): void;
}

export function tensorBytes(t: Pick<TensorSpec, 'dtype' | 'shape'>): number {
  return t.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[t.dtype];
}

const CHUNK_BYTES = 8 << 20;

/** Writes `tensors` in order to `path`; returns the total file size in bytes. */
export function writeSafetensors(path: string, tensors: TensorSpec[], metadata: Record<string, string> = {}): number {
  const header: Record<string, unknown> = { __metadata__: { format: 'pt', ...metadata } };
  let offset = 0;
  for (const t of tensors) {
    const n = tensorBytes(t);
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + n] };
    offset += n;
  }
  let json = JSON.stringify(header);
  // The data section must start 8-byte aligned; the format pads the header with spaces.
  json += ' '.repeat((8 - ((8 + Buffer.byteLength(json)) % 8)) % 8);
  const headerBytes = Buffer.from(json, 'utf8');
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(headerBytes.length));

  const fd = openSync(path, 'w');
  try {
    writeSync(fd, prefix);
    writeSync(fd, headerBytes);
    const scratch = Buffer.allocUnsafe(CHUNK_BYTES);
    for (const t of tensors) {
      const n = tensorBytes(t);
      for (let at = 0; at < n; at += CHUNK_BYTES) {
        const chunk = scratch.subarray(0, Math.min(CHUNK_BYTES, n - at));
        t.fill(chunk, at);
        writeAll(fd, chunk);
      }
    }
  } finally {
    closeSync(fd);
  }
  return 8 + headerBytes.length + offset;
}

function writeAll(fd: number, buf: Buffer): void {
  for (let done = 0; done < buf.length; ) done += writeSync(fd, buf, done, buf.length - done);
}
