// `rapid serve --models-config FILE`: the models a server offers, as JSON. Each entry names a model
// (directory, catalog alias or org/name), its served names, `pin`, and options that override the
// command's for that model, spelled as the command's flags (without the dashes in front).
import { readFileSync } from 'node:fs';
import { isObject } from '../engine/is-object.js';
import { parseDevice } from '../native/binding.js';
import type { ServeOptions } from './commands/serve.js';

/** The per-model part of ServeOptions a config entry may set. */
export type ModelOptions = Partial<
  Pick<
    ServeOptions,
    | 'kvCacheMemory'
    | 'kvCacheDtype'
    | 'maxNumSeqs'
    | 'maxBatchedTokens'
    | 'maxWaiting'
    | 'maxPrefillAttention'
    | 'blockSize'
    | 'threads'
    | 'precision'
    | 'device'
    | 'engineProcess'
    | 'embeddings'
    | 'stepTimeout'
    | 'prefixCache'
    | 'encoderCacheMemory'
  >
>;

export interface ModelConfigEntry {
  spec: string;
  /** Served names, the first is the id; absent: derived from the spec like a positional model. */
  aliases?: string[];
  pin: boolean;
  options: ModelOptions;
}

type Parse = (value: unknown, where: string) => ModelOptions[keyof ModelOptions];

const fail = (where: string, what: string): never => {
  throw new Error(`${where}: ${what}`);
};

const positiveInt: Parse = (v, where) => (typeof v === 'number' && Number.isInteger(v) && v > 0 ? v : fail(where, `expected a positive integer, got ${JSON.stringify(v)}`));
const nonNegativeInt: Parse = (v, where) => (typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : fail(where, `expected an integer >= 0, got ${JSON.stringify(v)}`));
const bool: Parse = (v, where) => (typeof v === 'boolean' ? v : fail(where, `expected true or false, got ${JSON.stringify(v)}`));
const seconds: Parse = (v, where) => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : fail(where, `expected a positive number of seconds, got ${JSON.stringify(v)}`));
const oneOf =
  (...allowed: string[]): Parse =>
  (v, where) =>
    typeof v === 'string' && allowed.includes(v) ? (v as never) : fail(where, `expected ${allowed.join(' or ')}, got ${JSON.stringify(v)}`);
const device: Parse = (v, where) => {
  if (typeof v !== 'string') return fail(where, `expected auto, cpu or cuda, got ${JSON.stringify(v)}`);
  try {
    return parseDevice(v, where);
  } catch (err) {
    return fail(where, (err as Error).message);
  }
};

/** Config keys (the flags' names) -> the option and its check; sizes take "2GiB" or a byte count. */
function optionParsers(parseSize: (s: string) => number): Record<string, [keyof ModelOptions, Parse]> {
  const size: Parse = (v, where) => {
    if (typeof v === 'number') return positiveInt(v, where);
    if (typeof v !== 'string') return fail(where, `expected a size such as "2GiB" or a byte count, got ${JSON.stringify(v)}`);
    try {
      return parseSize(v);
    } catch (err) {
      return fail(where, (err as Error).message);
    }
  };
  return {
    'kv-cache-memory': ['kvCacheMemory', size],
    'kv-cache-dtype': ['kvCacheDtype', oneOf('f32', 'f16', 'bf16', 'int8')],
    'max-num-seqs': ['maxNumSeqs', positiveInt],
    'max-batched-tokens': ['maxBatchedTokens', positiveInt],
    'max-waiting': ['maxWaiting', positiveInt],
    'max-prefill-attention': ['maxPrefillAttention', nonNegativeInt],
    'block-size': ['blockSize', positiveInt],
    threads: ['threads', positiveInt],
    precision: ['precision', oneOf('exact', 'fast')],
    device: ['device', device],
    'engine-process': ['engineProcess', oneOf('child', 'inline')],
    embeddings: ['embeddings', bool],
    'step-timeout': ['stepTimeout', seconds],
    'prefix-cache': ['prefixCache', bool],
    'encoder-cache-memory': ['encoderCacheMemory', size],
  };
}

/** Parses the file's text: {"models": [{"model": ..., "aliases": [...], "pin": true, "kv-cache-memory": "1GiB", ...}]}. */
export function parseModelsConfig(text: string, file: string, parseSize: (s: string) => number): ModelConfigEntry[] {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    return fail(file, `not valid JSON: ${(err as Error).message}`);
  }
  const list = isObject(doc) ? doc.models : undefined;
  if (!isObject(doc) || !Array.isArray(list)) return fail(file, 'expected {"models": [{"model": "<dir, alias or org/name>", ...}, ...]}');
  const extraTop = Object.keys(doc).filter((k) => k !== 'models');
  if (extraTop.length > 0) fail(file, `unknown top-level key(s) ${extraTop.join(', ')}; only "models" is read`);
  if (list.length === 0) fail(file, '"models" is empty');
  const parsers = optionParsers(parseSize);
  return list.map((raw, i) => {
    const where = `${file}: models[${i}]`;
    if (!isObject(raw)) return fail(where, 'expected an object with "model"');
    if (typeof raw.model !== 'string' || raw.model.trim() === '') return fail(where, '"model" must name a model (a directory, catalog alias or org/name)');
    const entry: ModelConfigEntry = { spec: raw.model, pin: false, options: {} };
    for (const [key, value] of Object.entries(raw)) {
      if (key === 'model') continue;
      if (key === 'pin') entry.pin = bool(value, `${where}.pin`) as boolean;
      else if (key === 'aliases') {
        if (!Array.isArray(value) || value.length === 0 || !value.every((a) => typeof a === 'string' && a.trim() !== '')) fail(`${where}.aliases`, 'expected a non-empty array of names');
        entry.aliases = [...new Set((value as string[]).map((a) => a.trim()))];
      } else {
        const p = parsers[key];
        if (!p) return fail(`${where}.${key}`, `unknown key; a model takes model, aliases, pin, ${Object.keys(parsers).join(', ')}`);
        (entry.options as Record<string, unknown>)[p[0]] = p[1](value, `${where}.${key}`);
      }
    }
    return entry;
  });
}

export function readModelsConfig(file: string, parseSize: (s: string) => number): ModelConfigEntry[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    return fail(file, `cannot read the models config: ${(err as Error).message}`);
  }
  return parseModelsConfig(text, file, parseSize);
}
