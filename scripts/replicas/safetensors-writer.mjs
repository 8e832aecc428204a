// Writes tensor specs as safetensors shards, streaming seeded random data in chunks so a full-size
// replica never sits in memory (a 16 GB bf16 model is written with ~16 MB resident).
import { closeSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { tensorBytes } from './tensor-plan.mjs';

const CHUNK_BYTES = 16 << 20;

/** xorshift128: fast, seeded, reproducible across runs (same seed -> same bytes). */
function prng(seed) {
  let x = seed >>> 0 || 1, y = 362436069, z = 521288629, w = 88675123;
  return () => {
    const t = x ^ (x << 11);
    x = y; y = z; z = w;
    w = (w ^ (w >>> 19) ^ (t ^ (t >>> 8))) >>> 0;
    return w;
  };
}

const F32 = new Float32Array(1);
const U32 = new Uint32Array(F32.buffer);

/** bf16 bits of a float32 (round to nearest even). */
function bf16(v) {
  F32[0] = v;
  const u = U32[0];
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

function fillChunk(buf, t, next) {
  const u32 = new Uint32Array(buf.buffer, buf.byteOffset, buf.length >>> 2);
  if (t.fill.kind === 'codes') {
    for (let i = 0; i < u32.length; i++) u32[i] = next();
  } else if (t.fill.kind === 'const') {
    const b = bf16(t.fill.value);
    u32.fill((b << 16) | b);
  } else {
    // uniform in [-amp, amp] as bf16: two values per 32-bit word
    const amp = t.fill.amp;
    const scale = (2 * amp) / 0xffff;
    for (let i = 0; i < u32.length; i++) {
      const r = next();
      u32[i] = (bf16((r >>> 16) * scale - amp) << 16) | bf16((r & 0xffff) * scale - amp);
    }
  }
}

/** Split into shards of at most maxBytes each, in order (mlx_lm make_shards / transformers shard_checkpoint). */
export function planShards(tensors, maxBytes) {
  const shards = [[]];
  let size = 0;
  for (const t of tensors) {
    const n = tensorBytes(t);
    if (size + n > maxBytes && shards.at(-1).length > 0) {
      shards.push([]);
      size = 0;
    }
    shards.at(-1).push(t);
    size += n;
  }
  return shards;
}

/** Writes one safetensors file; returns its byte size. */
export function writeSafetensors(path, tensors, metadata, seed) {
  const header = { __metadata__: metadata };
  let offset = 0;
  for (const t of tensors) {
    const n = tensorBytes(t);
    if (n % 4 !== 0) throw new Error(`${t.name}: ${n} bytes is not a whole number of 32-bit words`);
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + n] };
    offset += n;
  }
  let json = Buffer.from(JSON.stringify(header));
  json = Buffer.concat([json, Buffer.alloc((8 - (json.length % 8)) % 8, 0x20)]);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  const fd = openSync(path, 'w');
  try {
    writeSync(fd, len);
    writeSync(fd, json);
    const next = prng(seed);
    const chunk = Buffer.allocUnsafe(CHUNK_BYTES);
    for (const t of tensors) {
      let left = tensorBytes(t);
      while (left > 0) {
        const n = Math.min(left, CHUNK_BYTES);
        const view = chunk.subarray(0, n);
        fillChunk(view, t, next);
        writeSync(fd, view);
        left -= n;
      }
    }
  } finally {
    closeSync(fd);
  }
  return 8 + json.length + offset;
}

/** Writes all shards under dir with the given file-name pattern; returns the weight map and total data size. */
export function writeShards(dir, shards, nameOf, metadata, seed) {
  const weightMap = {};
  let total = 0;
  shards.forEach((tensors, i) => {
    const file = nameOf(i + 1, shards.length);
    writeSafetensors(join(dir, file), tensors, metadata, seed + i);
    for (const t of tensors) {
      weightMap[t.name] = file;
      total += tensorBytes(t);
    }
  });
  return { weightMap, total };
}
