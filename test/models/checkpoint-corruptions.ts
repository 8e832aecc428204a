// Seeded corruptions of fixture checkpoints: config fields set to invalid values, inconsistent layer and
// head counts, tensors removed/renamed/reshaped/retyped, truncated or lying safetensors headers, unknown
// quantization and families, garbage JSON. Each corruption edits a copy of a fixture directory.
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readSafetensors, writeSafetensors, type RawTensor } from '../helpers/safetensors.js';
import { createRng } from '../../src/bench/sweep/rng.js';

type Json = Record<string, unknown>;

export interface Corruption {
  id: string; // "<fixture>/<class>/<target>"
  fixture: string;
  cls: string;
  target: string; // the config path or tensor name the error must name
  apply(dir: string): void;
}

/** Links every file of `src` into `dst`; corruptions replace (never write through) the links they edit. */
export function copyDir(src: string, dst: string): void {
  mkdirSync(dst, { recursive: true });
  for (const f of readdirSync(src)) if (statSync(join(src, f)).isFile()) symlinkSync(join(src, f), join(dst, f));
}

/** Writes a new file in place of a link to the fixture, so the fixture itself is never touched. */
export function writeFresh(path: string, data: string | Buffer): void {
  rmSync(path, { force: true });
  writeFileSync(path, data);
}

export function rewriteTensors(path: string, edit: (m: Map<string, RawTensor>) => void): void {
  const m = readSafetensors(path);
  edit(m);
  rmSync(path, { force: true });
  writeSafetensors(path, m);
}

const readConfig = (dir: string): Json => JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Json;
const writeConfig = (dir: string, c: Json): void => writeFresh(join(dir, 'config.json'), JSON.stringify(c, null, 2));

/** Every numeric leaf of config.json as a key path (array elements count as leaves). */
export function numericPaths(config: Json): string[][] {
  const out: string[][] = [];
  const walk = (o: unknown, p: string[]): void => {
    if (typeof o === 'number') out.push(p);
    else if (Array.isArray(o)) o.forEach((v, i) => walk(v, [...p, String(i)]));
    else if (o && typeof o === 'object') for (const [k, v] of Object.entries(o)) walk(v, [...p, k]);
  };
  walk(config, []);
  return out;
}

function setPath(o: Json, keys: string[], v: unknown, remove = false): void {
  let cur = o as Record<string, unknown>;
  for (const k of keys.slice(0, -1)) cur = cur[k] as Record<string, unknown>;
  const last = keys[keys.length - 1] as string;
  if (remove && !Array.isArray(cur)) delete cur[last];
  else cur[last] = v;
}

function getPath(o: Json, keys: string[]): unknown {
  return keys.reduce<unknown>((c, k) => (c && typeof c === 'object' ? (c as Record<string, unknown>)[k] : undefined), o);
}

/** MLX writes the quantization object twice (quantization, quantization_config): edit both so the loader sees it. */
export function editConfig(dir: string, path: string | string[], v: unknown, remove = false): void {
  const keys = typeof path === 'string' ? path.split('.') : path;
  const c = readConfig(dir);
  setPath(c, keys, v, remove);
  const twin = keys[0] === 'quantization' ? 'quantization_config' : keys[0] === 'quantization_config' ? 'quantization' : undefined;
  if (twin && getPath(c, [twin, ...keys.slice(1, -1)]) !== undefined) setPath(c, [twin, ...keys.slice(1)], v, remove);
  writeConfig(dir, c);
}

export const CONFIG_VALUE_CLASSES = ['zero', 'negative', 'huge', 'fraction', 'string', 'missing'] as const;

function badValue(cls: (typeof CONFIG_VALUE_CLASSES)[number], v: number): unknown {
  switch (cls) {
    case 'zero': return 0;
    case 'negative': return -Math.max(1, Math.abs(v));
    case 'huge': return 2 ** 53;
    case 'fraction': return Number.isInteger(v) ? v + 0.5 : v;
    case 'string': return String(v);
    case 'missing': return undefined;
  }
}

function textPrefix(config: Json): string {
  return config.text_config && typeof config.text_config === 'object' ? 'text_config.' : '';
}

function tensorFile(dir: string): string {
  const f = readdirSync(dir).filter((n) => n.endsWith('.safetensors')).sort()[0];
  if (!f) throw new Error(`no safetensors in ${dir}`);
  return join(dir, f);
}

/** All corruptions of one fixture (deterministic); `pick` samples them. */
export function corruptionsOf(fixture: string, fixtureDir: string): Corruption[] {
  const config = readConfig(fixtureDir);
  const out: Corruption[] = [];
  const add = (cls: string, target: string, apply: (dir: string) => void): void => {
    out.push({ id: `${fixture}/${cls}/${target}`, fixture, cls, target, apply });
  };
  for (const keys of numericPaths(config)) {
    if (keys[0] === 'quantization_config') continue; // edited through its twin
    const v = getPath(config, keys) as number;
    for (const cls of CONFIG_VALUE_CLASSES) {
      if (cls === 'fraction' && !Number.isInteger(v)) continue;
      if (cls !== 'missing' && badValue(cls, v) === v) continue; // e.g. zero of a 0: no corruption at all
      add(`config-${cls}`, keys.join('.'), (dir) => editConfig(dir, keys, badValue(cls, v), cls === 'missing'));
    }
  }
  const tp = textPrefix(config);
  const text = (tp ? config.text_config : config) as Json;
  const layers = text.num_hidden_layers as number;
  add('layers-minus-one', `${tp}num_hidden_layers`, (dir) => editConfig(dir, `${tp}num_hidden_layers`, layers - 1));
  add('layers-plus-one', `${tp}num_hidden_layers`, (dir) => editConfig(dir, `${tp}num_hidden_layers`, layers + 1));
  const heads = text.num_attention_heads as number;
  add('heads-double', `${tp}num_attention_heads`, (dir) => editConfig(dir, `${tp}num_attention_heads`, heads * 2));
  add('heads-halve', `${tp}num_attention_heads`, (dir) => editConfig(dir, `${tp}num_attention_heads`, Math.max(1, heads / 2)));
  if (typeof text.num_key_value_heads === 'number')
    add('kv-heads-not-divisor', `${tp}num_key_value_heads`, (dir) => editConfig(dir, `${tp}num_key_value_heads`, heads + 1));
  if (typeof text.head_dim === 'number')
    add('head-dim-double', `${tp}head_dim`, (dir) => editConfig(dir, `${tp}head_dim`, (text.head_dim as number) * 2));
  const vc = config.vision_config as Json | undefined;
  if (vc) {
    for (const key of ['depth', 'num_hidden_layers'])
      if (typeof vc[key] === 'number') {
        add('vision-layers-minus-one', `vision_config.${key}`, (dir) => editConfig(dir, `vision_config.${key}`, (vc[key] as number) - 1));
        add('vision-layers-plus-one', `vision_config.${key}`, (dir) => editConfig(dir, `vision_config.${key}`, (vc[key] as number) + 1));
      }
  }

  const file = tensorFile(fixtureDir);
  const base = file.slice(fixtureDir.length + 1);
  const tensors = readSafetensors(file);
  for (const [name, t] of tensors) {
    const at = (dir: string): string => join(dir, base);
    add('tensor-removed', name, (dir) => rewriteTensors(at(dir), (m) => m.delete(name)));
    add('tensor-renamed', name, (dir) =>
      rewriteTensors(at(dir), (m) => {
        m.delete(name);
        m.set(name.replace(/(\.[a-z_]+)$/, '_x$1'), t);
      }),
    );
    add('tensor-reshaped', name, (dir) =>
      rewriteTensors(at(dir), (m) => {
        const n = t.shape.reduce((a, b) => a * b, 1);
        // Same bytes, different shape: [n] for matrices, [n/2, 2] for vectors of even length, else a leading 1.
        const shape = t.shape.length > 1 ? [n] : n % 2 === 0 && n > 1 ? [n / 2, 2] : [1, ...t.shape];
        m.set(name, { ...t, shape });
      }),
    );
    add('tensor-dtype', name, (dir) =>
      rewriteTensors(at(dir), (m) => {
        // Same byte count under a dtype of the same width the loader must refuse here (codes as floats, floats as ints).
        const swap: Record<string, string> = { F32: 'I32', BF16: 'I16', F16: 'I16', U32: 'F32', I32: 'F32', U8: 'I8' };
        m.set(name, { ...t, dtype: swap[t.dtype] ?? 'U8' });
      }),
    );
  }
  add('file-truncated', base, (dir) => {
    const buf = readFileSync(join(dir, base));
    writeFresh(join(dir, base), buf.subarray(0, Math.floor(buf.length * 0.7)));
  });
  add('offsets-past-end', base, (dir) => {
    const buf = readFileSync(join(dir, base));
    const hlen = Number(buf.readBigUInt64LE(0));
    const header = JSON.parse(buf.subarray(8, 8 + hlen).toString('utf8')) as Record<string, { data_offsets?: [number, number] }>;
    const last = Object.values(header).filter((v) => v.data_offsets).sort((a, b) => (b.data_offsets as number[])[1] - (a.data_offsets as number[])[1])[0];
    if (last?.data_offsets) last.data_offsets = [last.data_offsets[0] + 1024, last.data_offsets[1] + 1024];
    let h = Buffer.from(JSON.stringify(header), 'utf8');
    h = Buffer.concat([h, Buffer.alloc((8 - (h.length % 8)) % 8, 0x20)]);
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(h.length));
    writeFresh(join(dir, base), Buffer.concat([len, h, buf.subarray(8 + hlen)]));
  });
  add('header-length-huge', base, (dir) => {
    const buf = Buffer.from(readFileSync(join(dir, base)));
    buf.writeBigUInt64LE(BigInt(buf.length) * 4n, 0);
    writeFresh(join(dir, base), buf);
  });
  const q = config.quantization as Json | undefined;
  if (q) {
    add('quant-mode-unknown', 'quantization.mode', (dir) => editConfig(dir, 'quantization.mode', 'nvfp4'));
    add('quant-bits-unknown', 'quantization.bits', (dir) => editConfig(dir, 'quantization.bits', 7));
    add('quant-group-unknown', 'quantization.group_size', (dir) => editConfig(dir, 'quantization.group_size', 48));
  }
  add('family-unknown', 'architectures', (dir) => {
    const c = readConfig(dir);
    c.architectures = ['FooBarForCausalLM'];
    c.model_type = 'foobar';
    writeConfig(dir, c);
  });
  add('config-garbage', 'config.json', (dir) => writeFresh(join(dir, 'config.json'), '{"architectures": ["Qwen'));
  add('config-not-object', 'config.json', (dir) => writeFresh(join(dir, 'config.json'), '[1, 2, 3]'));
  // Hostile nesting where no key is read: must not overflow a recursive parser's stack.
  add('config-deep-nesting', 'config.json', (dir) => {
    const text = readFileSync(join(dir, 'config.json'), 'utf8').trimEnd();
    writeFresh(join(dir, 'config.json'), `${text.slice(0, -1)}, "x": ${'['.repeat(100_000)}${']'.repeat(100_000)}}`);
  });
  return out;
}

/** Seeded sample of at most `n` corruptions per class from `all` (every class keeps at least one). */
export function sample(all: Corruption[], perClass: number, seed: number): Corruption[] {
  const next = createRng(seed);
  const byClass = new Map<string, Corruption[]>();
  for (const c of all) byClass.set(c.cls, [...(byClass.get(c.cls) ?? []), c]);
  const out: Corruption[] = [];
  for (const list of byClass.values()) {
    const copy = [...list];
    for (let i = copy.length - 1; i > 0; i--) {
      const j = Math.floor(next() * (i + 1));
      [copy[i], copy[j]] = [copy[j] as Corruption, copy[i] as Corruption];
    }
    out.push(...copy.slice(0, perClass));
  }
  return out;
}
