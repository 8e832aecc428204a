// Shards a replica's tensors as its publisher does and writes them with the bench's streaming
// safetensors writer (dist/bench/safetensors-writer.js): memory stays one chunk for any model size.
import { join } from 'node:path';
import { tensorBytes, writeSafetensors } from './random-fills.mjs';

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

/** Writes all shards under dir with the given file-name pattern; returns the weight map and total data size. */
export function writeShards(dir, shards, nameOf, metadata) {
  const weightMap = {};
  let total = 0;
  shards.forEach((tensors, i) => {
    const file = nameOf(i + 1, shards.length);
    writeSafetensors(join(dir, file), tensors, metadata);
    for (const t of tensors) {
      weightMap[t.name] = file;
      total += tensorBytes(t);
    }
  });
  return { weightMap, total };
}
