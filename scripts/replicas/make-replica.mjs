#!/usr/bin/env node
// Builds a full-size random-weight replica of a catalog checkpoint, laid out as its published repository
// (mlx-community conversion, or Qwen's bf16 embedding repos): see docs/replicas.md.
//   node scripts/replicas/make-replica.mjs <catalog-name> --out DIR [--seed N] [--override MODULE=BITS[:GROUP]]
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { FAMILY_LAYOUTS, HF_SHARD_BYTES, MLX_AFFINE_GROUP_SIZE, MLX_SHARD_BYTES, layoutFamilyOf } from './layouts.mjs';
import { planShards, writeShards } from './safetensors-writer.mjs';
import { tensorPlan } from './tensor-plan.mjs';
import { tokenizerFiles } from './tokenizer-files.mjs';
import { vlmLayoutOf } from './vlm-layouts.mjs';
import { textConfigOf, vlmQuantOverrides, vlmTensorPlan } from './vlm-tensor-plan.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const CATALOG = join(here, '../../src/models/catalog.json');

export function catalogEntry(name) {
  const { models } = JSON.parse(readFileSync(CATALOG, 'utf8'));
  const entry = models.find((m) => m.alias === name || (m.aka ?? []).includes(name));
  if (!entry) throw new Error(`${name}: not a catalog alias`);
  return entry;
}

/** The real config.json of a catalog entry (scripts/replicas/configs/<alias>.json). */
export function realConfig(alias) {
  try {
    return JSON.parse(readFileSync(join(here, 'configs', `${alias}.json`), 'utf8'));
  } catch (err) {
    throw new Error(`${alias}: no real config at scripts/replicas/configs/${alias}.json (${err.message})`);
  }
}

/** Bits of a catalog entry's quantization ("4-bit", "8-bit", "bf16" -> null). */
function bitsOf(entry) {
  const m = /^(\d+)-bit/.exec(entry.quantization);
  return m ? Number(m[1]) : null;
}

/**
 * config.json as mlx_lm.convert (text) or mlx_vlm.convert (VLM) writes it: the real config plus its quantization
 * block (and overrides; mlx-vlm also records the family's per-module entries and the quantization_config copy).
 */
export function replicaConfig(entry, overrides = {}) {
  const config = realConfig(entry.alias);
  delete config.quantization;
  delete config.quantization_config;
  const vlm = vlmLayoutOf(entry, config);
  const bits = bitsOf(entry);
  if (vlm) {
    if (bits === null) throw new Error(`${entry.alias}: an mlx layout needs an n-bit catalog quantization, got ${entry.quantization}`);
    const q = { group_size: MLX_AFFINE_GROUP_SIZE, bits, mode: 'affine', ...vlmQuantOverrides(config, vlm.vlmFamily), ...overrides };
    config.quantization = q;
    config.quantization_config = q;
    return { config, layout: vlm };
  }
  const layout = FAMILY_LAYOUTS[layoutFamilyOf(entry, config)];
  if (layout.format === 'mlx') {
    if (bits === null) throw new Error(`${entry.alias}: an mlx layout needs an n-bit catalog quantization, got ${entry.quantization}`);
    const q = { group_size: MLX_AFFINE_GROUP_SIZE, bits };
    for (const [path, o] of Object.entries(overrides)) q[path] = o;
    config.quantization = q;
    if (layout.quantizationConfigCopy) config.quantization_config = q;
  }
  return { config, layout };
}

/** preprocessor_config.json / processor_config.json of a VLM family: configs/<alias>.{preprocessor,processor}.json. */
export function processorFiles(alias) {
  const files = {};
  for (const kind of ['preprocessor', 'processor']) {
    try {
      files[`${kind}_config.json`] = JSON.parse(readFileSync(join(here, 'configs', `${alias}.${kind}.json`), 'utf8'));
    } catch (err) {
      if (err.code !== 'ENOENT') throw err;
    }
  }
  if (!Object.keys(files).length) throw new Error(`${alias}: no scripts/replicas/configs/${alias}.preprocessor.json or .processor.json`);
  return files;
}

const README = (entry) => `---
library_name: mlx
tags: [mlx, rapid-replica]
---
# ${entry.repo} (replica)

Random weights at the real shapes of ${entry.repo}, built by rapid's scripts/replicas/make-replica.mjs
for download/load/serve tests. It answers nonsense: it is not the model.
`;

/** Writes the replica into outDir; returns the list of files written (relative names). */
export function makeReplica(name, outDir, { seed = 1, overrides = {} } = {}) {
  const entry = catalogEntry(name);
  const { config, layout } = replicaConfig(entry, overrides);
  mkdirSync(outDir, { recursive: true });
  const tensors = layout.vlmFamily ? vlmTensorPlan(config, layout, seed) : tensorPlan(config, layout, seed);
  const files = [];
  const put = (file, text) => {
    writeFileSync(join(outDir, file), text);
    files.push(file);
  };
  const mlx = layout.format === 'mlx';
  const shards = planShards(tensors, mlx ? MLX_SHARD_BYTES : HF_SHARD_BYTES);
  const nameOf = (i, n) => (n === 1 ? 'model.safetensors' : `model-${String(i).padStart(5, '0')}-of-${String(n).padStart(5, '0')}.safetensors`);
  const metadata = { format: mlx ? 'mlx' : 'pt' };
  const { weightMap, total } = writeShards(outDir, shards, nameOf, metadata);
  files.push(...new Set(Object.values(weightMap)));
  // mlx save_model always writes the index (indent 4); transformers only when sharded (indent 2)
  if (mlx || shards.length > 1) {
    const index = { metadata: { total_size: total }, weight_map: weightMap };
    put('model.safetensors.index.json', `${JSON.stringify(index, null, mlx ? 4 : 2)}\n`);
  }
  // mlx_lm save_config sorts the keys and indents by 4; transformers keeps them as they are, indent 2
  const sorted = mlx ? Object.fromEntries(Object.entries(config).sort(([a], [b]) => (a < b ? -1 : 1))) : config;
  put('config.json', `${JSON.stringify(sorted, null, mlx ? 4 : 2)}\n`);
  put('generation_config.json', `${JSON.stringify(layout.generationConfig, null, 2)}\n`);
  const vocab = layout.vlmFamily ? textConfigOf(config, layout.vlmFamily).vocab_size : config.vocab_size;
  for (const [file, text] of Object.entries(tokenizerFiles(layout, config, layout.extraFiles, vocab))) put(file, text);
  if (layout.vlmFamily) for (const [file, json] of Object.entries(processorFiles(layout.processorFrom))) put(file, `${JSON.stringify(json, null, 2)}\n`);
  put('README.md', README(entry));
  put('.gitattributes', '*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.model filter=lfs diff=lfs merge=lfs -text\ntokenizer.json filter=lfs diff=lfs merge=lfs -text\n');
  return { entry, files: files.sort(), tensors: tensors.length, bytes: total };
}

function parseOverride(s) {
  const m = /^([\w.]+)=(\d+)(?::(\d+))?$/.exec(s);
  if (!m) throw new Error(`--override ${s}: expected MODULE=BITS[:GROUP], e.g. model.layers.0.mlp.down_proj=8`);
  return [m[1], { group_size: Number(m[3] ?? MLX_AFFINE_GROUP_SIZE), bits: Number(m[2]) }];
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { out: { type: 'string' }, seed: { type: 'string', default: '1' }, override: { type: 'string', multiple: true } },
  });
  if (positionals.length !== 1 || !values.out) {
    console.error('usage: make-replica.mjs <catalog-name> --out DIR [--seed N] [--override MODULE=BITS[:GROUP]]...');
    process.exit(2);
  }
  try {
    const t0 = Date.now();
    const overrides = Object.fromEntries((values.override ?? []).map(parseOverride));
    const r = makeReplica(positionals[0], values.out, { seed: Number(values.seed), overrides });
    console.log(`${r.entry.alias} (${r.entry.repo}): ${r.tensors} tensors, ${(r.bytes / 1e6).toFixed(0)} MB of weights, ${r.files.length} files in ${((Date.now() - t0) / 1000).toFixed(1)} s -> ${values.out}`);
  } catch (err) {
    console.error(`make-replica: ${err.message}`);
    process.exit(1);
  }
}
