// Minimal safetensors read/write for tests that build edited copies of fixture checkpoints.
import { readFileSync, writeFileSync } from 'node:fs';

export interface RawTensor {
  dtype: string;
  shape: number[];
  data: Buffer;
}

export function readSafetensors(path: string): Map<string, RawTensor> {
  const buf = readFileSync(path);
  const hlen = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + hlen).toString('utf8')) as Record<string, unknown>;
  const data = buf.subarray(8 + hlen);
  const out = new Map<string, RawTensor>();
  for (const [k, v] of Object.entries(header)) {
    if (k === '__metadata__') continue;
    const t = v as { dtype: string; shape: number[]; data_offsets: [number, number] };
    out.set(k, { dtype: t.dtype, shape: t.shape, data: data.subarray(t.data_offsets[0], t.data_offsets[1]) });
  }
  return out;
}

export function writeSafetensors(path: string, tensors: Map<string, RawTensor>): void {
  const header: Record<string, unknown> = {};
  const chunks: Buffer[] = [];
  let off = 0;
  for (const [k, t] of tensors) {
    header[k] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + t.data.length] };
    chunks.push(t.data);
    off += t.data.length;
  }
  let h = Buffer.from(JSON.stringify(header), 'utf8');
  h = Buffer.concat([h, Buffer.alloc((8 - (h.length % 8)) % 8, 0x20)]);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  writeFileSync(path, Buffer.concat([len, h, ...chunks]));
}
