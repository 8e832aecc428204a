// Bad model files: every fixture family corrupted in seeded ways (config fields, layer/head counts,
// tensors, safetensors files, quantization, unknown family, garbage JSON) and loaded through the library
// in a child process. Bar: 0 signals, 0 hangs, 0 silent loads (except the harmless classes below, each
// justified), and every error names the field or tensor. RAPID_CORRUPT_PER_CLASS / RAPID_CORRUPT_SEED scale
// the run (bench/corrupt-models.sh runs every corruption).
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { corruptionsOf, sample, type Corruption } from './checkpoint-corruptions.js';
import { runCorruptions, type Result } from './run-corruptions.js';

const ROOT = resolve(import.meta.dirname, '..', 'fixtures');
// One fixture per family; the quantized ones so codes/scales/biases and quantization config are covered.
const FIXTURES = [
  'models/qwen2-q4',
  'models/qwen3-q4',
  'models/llama-q4',
  'models/gemma3-q4',
  'models/qwen2-f32',
  'vlm/gemma3-q4',
  'vlm/gemma4-e-q4',
  'vlm/gemma4-moe-q4',
  'vlm/mistral3-q4',
  'vlm/qwen2_5_vl-q4',
  'vlm/qwen3_vl-q4',
  'vlm/qwen3_vl_moe-q4',
];
const PER_CLASS = Number(process.env.RAPID_CORRUPT_PER_CLASS ?? 2);
const SEED = Number(process.env.RAPID_CORRUPT_SEED ?? 38);

const leaf = (path: string): string => {
  const keys = path.split('.').filter((k) => !/^\d+$/.test(k));
  return keys[keys.length - 1] as string;
};

/**
 * Why a corruption may load: config keys the runtime never reads (training knobs, tokens of modalities
 * rapid does not serve, bookkeeping). Changing them cannot change what is computed.
 */
export const UNUSED_CONFIG_KEYS: Record<string, string> = {
  initializer_range: 'weight init for training',
  attention_dropout: 'dropout is training-only',
  pretraining_tp: 'tensor-parallel slicing during pretraining',
  router_aux_loss_coef: 'MoE training loss weight',
  chunk_size_feed_forward: 'training memory knob',
  LABEL_0: 'classification-head labels',
  LABEL_1: 'classification-head labels',
  video_token_id: 'video input is not served',
  audio_token_id: 'audio input is not served',
  boa_token_id: 'audio input is not served',
  eoa_token_index: 'audio input is not served',
  tokens_per_second: 'video temporal positions; images use t=0',
  bos_token_id: 'special tokens come from the tokenizer files',
  eos_token_id: 'stop tokens come from generation_config.json and the tokenizer',
  pad_token_id: 'padding is never used (rows are ragged)',
};

/** Missing keys with a default the runtime shares with transformers: the config stays valid. */
export const OPTIONAL_CONFIG_KEYS: Record<string, string> = {};

export function harmless(r: Result): string | undefined {
  const c = r.c;
  if (c.cls.startsWith('config-')) {
    const why = UNUSED_CONFIG_KEYS[leaf(c.target)];
    if (why) return why;
    if (c.cls === 'config-missing' && OPTIONAL_CONFIG_KEYS[leaf(c.target)]) return OPTIONAL_CONFIG_KEYS[leaf(c.target)];
  }
  return undefined;
}

/** The error must name what is wrong: the config key, the tensor, or the file. */
export function namesTarget(c: Corruption, message: string): boolean {
  if (c.cls.startsWith('tensor-') || c.cls.startsWith('file-') || c.cls === 'offsets-past-end' || c.cls === 'header-length-huge')
    return message.includes(c.target) || (c.cls === 'tensor-renamed' && message.includes(c.target.replace(/(\.[a-z_]+)$/, '_x$1')));
  if (c.cls === 'family-unknown') return message.includes('FooBarForCausalLM');
  if (c.cls.startsWith('config-garbage') || c.cls === 'config-not-object') return message.includes('config.json');
  return message.includes(leaf(c.target));
}

const LEAKS = /vector::|std::|basic_string|bad_alloc|_M_|terminate called|Segmentation/;

function summarize(results: Result[]): string {
  const byClass = new Map<string, Record<string, number>>();
  for (const r of results) {
    const row = byClass.get(r.c.cls) ?? {};
    const key = r.outcome === 'loaded' ? (harmless(r) ? 'loaded-harmless' : 'loaded-SILENT') : r.outcome;
    row[key] = (row[key] ?? 0) + 1;
    byClass.set(r.c.cls, row);
  }
  return [...byClass].map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join('\n');
}

describe('corrupted model directories', () => {
  it('never signal, hang or load silently; errors name the field or tensor', { timeout: 600_000 }, async () => {
    expect(existsSync(resolve(import.meta.dirname, '..', '..', 'dist', 'engine', 'text-model.js')), 'run npm run compile first').toBe(true);
    const all = FIXTURES.flatMap((f) => corruptionsOf(f, join(ROOT, f)));
    const picked = PER_CLASS > 0 ? FIXTURES.flatMap((f, i) => sample(all.filter((c) => c.fixture === f), PER_CLASS, SEED + i)) : all;
    const results = await runCorruptions(picked, (f) => join(ROOT, f));
    const classes = new Set(picked.map((c) => c.cls));
    console.log(`${picked.length} corruptions, ${classes.size} classes, ${FIXTURES.length} fixtures (seed ${SEED})\n${summarize(results)}`);
    const bad = results.filter(
      (r) =>
        r.outcome === 'signal' ||
        r.outcome === 'hang' ||
        r.outcome === 'generator' ||
        (r.outcome === 'loaded' && !harmless(r)) ||
        (r.outcome === 'error' && (!namesTarget(r.c, r.message ?? '') || LEAKS.test(r.message ?? ''))),
    );
    expect(bad.map((r) => `${r.c.id}: ${r.outcome} ${r.signal ?? ''} ${r.message ?? ''}`.slice(0, 400))).toEqual([]);
  });
});
