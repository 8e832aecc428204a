// `models info`: what a model is (architecture, parameters, quantization, context, modalities,
// files), read from a downloaded snapshot's config.json and safetensors headers, else from the
// hub's file list and config.json, else from the catalog alone.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { CatalogEntry, Modality, RecommendedSampling } from './catalog.js';
import { InvalidCheckpointError, ModelError, OfflineError } from './errors.js';
import { selectRepoFiles } from './file-selection.js';
import { cachedSnapshot } from './hf-cache.js';
import { HubClient } from './hub-client.js';
import { hubEnv, type Env, type HubEnv } from './hub-env.js';
import { resolveSpec } from './resolve-spec.js';
import { readSafetensorsHeader } from './safetensors-header.js';
import { readConfigJson, validateCheckpoint } from './validate-checkpoint.js';

export interface ModelInfo {
  spec: string;
  source: 'local' | 'cache' | 'hub' | 'catalog';
  dir?: string;
  repo?: string;
  revision?: string;
  alias?: string;
  status?: CatalogEntry['status'];
  reason?: string;
  replacement?: string;
  description?: string;
  architecture?: string;
  modelType?: string;
  params?: number; // exact from safetensors headers, else undefined
  paramsLabel?: string; // "494M", or the catalog's "0.5B"
  quantization?: string;
  dtype?: string;
  contextLength?: number;
  hiddenSize?: number;
  layers?: number;
  attentionHeads?: number;
  kvHeads?: number;
  vocabSize?: number;
  tiedEmbeddings?: boolean;
  modalities: Modality[];
  sampling?: RecommendedSampling;
  files: { name: string; sizeBytes: number }[];
  sizeBytes: number;
  note?: string; // e.g. why the hub could not be asked
  invalid?: string; // why the files cannot be run (config and tensors disagree), for a cached snapshot
}

type Json = Record<string, unknown>;

function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

export function paramsLabel(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(n >= 1e10 ? 0 : 1)}B`;
  if (n >= 1e6) return `${Math.round(n / 1e6)}M`;
  return `${Math.round(n / 1e3)}K`;
}

interface QuantConfig {
  bits?: number;
  group_size?: number;
  mode?: string;
  [module: string]: unknown;
}

/** "affine 4-bit g64", plus how many modules override it. */
export function describeQuantization(config: Json): string | undefined {
  const q = (config.quantization ?? config.quantization_config) as QuantConfig | undefined;
  if (!q || typeof q !== 'object' || num(q.bits) === undefined) return undefined;
  const base = `${q.mode ?? 'affine'} ${q.bits}-bit g${q.group_size ?? 64}`;
  const overrides = Object.entries(q).filter(([k, v]) => !['bits', 'group_size', 'mode', 'quant_method', 'linear_class'].includes(k) && v !== null && (typeof v === 'object' || v === false));
  const differing = overrides.filter(([, v]) => v === false || (v as QuantConfig).bits !== q.bits || ((v as QuantConfig).group_size ?? 64) !== (q.group_size ?? 64));
  if (!differing.length) return base;
  const kinds = new Map<string, number>();
  for (const [, v] of differing) {
    const label = v === false ? 'unquantized' : `${(v as QuantConfig).bits}-bit g${(v as QuantConfig).group_size ?? 64}`;
    kinds.set(label, (kinds.get(label) ?? 0) + 1);
  }
  return `${base} (mixed: ${[...kinds].map(([k, n]) => `${n} module${n > 1 ? 's' : ''} ${k}`).join(', ')})`;
}

function moduleBits(q: QuantConfig | undefined, module: string): number | undefined {
  if (!q) return undefined;
  const o = (q[module] ?? q[module.replace(/^language_model\./, '')]) as QuantConfig | false | undefined;
  if (o && typeof o === 'object' && num(o.bits)) return o.bits;
  return num(q.bits);
}

/** Counts parameters from safetensors headers; packed uint32 weights count as their unpacked elements. */
function countParams(dir: string, config: Json): { params: number; dtype?: string } | undefined {
  const files = readdirSync(dir).filter((f) => f.endsWith('.safetensors'));
  if (!files.length) return undefined;
  const q = (config.quantization ?? config.quantization_config) as QuantConfig | undefined;
  const tensors = files.flatMap((f) => readSafetensorsHeader(join(dir, f)).tensors);
  const names = new Set(tensors.map((t) => t.name));
  const dtypeBytes = new Map<string, number>();
  let params = 0;
  for (const t of tensors) {
    const base = t.name.replace(/\.(weight|scales|biases)$/, '');
    const quantized = names.has(`${base}.scales`);
    if (quantized && (t.name.endsWith('.scales') || t.name.endsWith('.biases'))) continue;
    let n = t.shape.reduce((a, b) => a * b, 1);
    if (quantized && t.name.endsWith('.weight') && t.dtype === 'U32') n = (n * 32) / (moduleBits(q, base) ?? 4);
    params += n;
    if (!quantized) dtypeBytes.set(t.dtype, (dtypeBytes.get(t.dtype) ?? 0) + t.bytes);
  }
  const dtype = [...dtypeBytes].sort((a, b) => b[1] - a[1])[0]?.[0];
  return { params: Math.round(params), dtype };
}

function fromConfig(info: ModelInfo, config: Json): void {
  const text = (config.text_config ?? config) as Json;
  const archs = config.architectures;
  info.architecture = Array.isArray(archs) && typeof archs[0] === 'string' ? archs[0] : info.architecture;
  info.modelType = typeof config.model_type === 'string' ? config.model_type : undefined;
  info.contextLength = num(text.max_position_embeddings) ?? num(config.max_position_embeddings) ?? info.contextLength;
  info.hiddenSize = num(text.hidden_size);
  info.layers = num(text.num_hidden_layers);
  info.attentionHeads = num(text.num_attention_heads);
  info.kvHeads = num(text.num_key_value_heads) ?? info.attentionHeads;
  info.vocabSize = num(text.vocab_size) ?? num(config.vocab_size);
  const tied = config.tie_word_embeddings ?? text.tie_word_embeddings;
  info.tiedEmbeddings = typeof tied === 'boolean' ? tied : undefined;
  info.quantization = describeQuantization(config) ?? 'none';
  info.modalities = config.vision_config ? ['text', 'image'] : ['text'];
}

function withCatalog(info: ModelInfo, e: CatalogEntry | undefined): ModelInfo {
  if (!e) return info;
  info.alias = e.alias;
  info.status = e.status;
  info.reason = e.reason;
  info.replacement = e.replacement;
  info.description = e.description;
  info.sampling = e.sampling;
  info.paramsLabel ??= e.params;
  info.quantization ??= e.quantization;
  info.contextLength ??= e.contextLength;
  if (!info.files.length) info.sizeBytes = e.sizeBytes;
  if (info.modalities.length === 0) info.modalities = e.modalities;
  return info;
}

/** Describes a model directory on disk. */
export function inspectModelDir(dir: string, spec = dir, validate: 'throw' | 'note' = 'throw'): ModelInfo {
  const info: ModelInfo = { spec, source: 'local', dir, modalities: [], files: [], sizeBytes: 0 };
  for (const f of readdirSync(dir).sort()) {
    const full = join(dir, f);
    try {
      const st = statSync(full);
      if (st.isFile()) info.files.push({ name: f, sizeBytes: st.size });
    } catch {
      info.files.push({ name: `${f} (dangling link)`, sizeBytes: 0 });
    }
  }
  info.sizeBytes = info.files.reduce((a, f) => a + f.sizeBytes, 0);
  const cfgPath = join(dir, 'config.json');
  if (existsSync(cfgPath)) {
    const config = readConfigJson(dir) as Json;
    // A local directory whose config and tensors disagree is an error (what `rapid run` would say); a cached
    // snapshot is still described, with the problem attached.
    if (info.files.some((f) => f.name.endsWith('.safetensors'))) {
      try {
        validateCheckpoint(dir);
      } catch (err) {
        if (!(err instanceof InvalidCheckpointError) || validate === 'throw') throw err;
        info.invalid = err.message;
      }
    }
    fromConfig(info, config);
    const counted = countParams(dir, config);
    if (counted) {
      info.params = counted.params;
      info.paramsLabel = paramsLabel(counted.params);
      info.dtype = counted.dtype;
    }
  }
  return info;
}

export interface ModelInfoOptions {
  env?: Env;
  remote?: boolean; // ask the hub about a model that is not downloaded (default: true unless offline)
  timeoutMs?: number;
  retries?: number;
}

export async function modelInfo(spec: string, opts: ModelInfoOptions = {}): Promise<ModelInfo> {
  const env = opts.env ?? process.env;
  const ref = resolveSpec(spec, env);
  if (ref.kind === 'local') return inspectModelDir(ref.dir, spec);
  const hub = hubEnv(env);
  const snap = cachedSnapshot(hub.cacheDir, ref.repo, ref.revision);
  if (snap) {
    const info = inspectModelDir(snap, spec, 'note');
    return withCatalog({ ...info, source: 'cache', repo: ref.repo, revision: ref.revision }, ref.entry);
  }
  const info: ModelInfo = { spec, source: 'catalog', repo: ref.repo, revision: ref.revision, modalities: [], files: [], sizeBytes: 0 };
  if (opts.remote !== false && !hub.offline) {
    try {
      await fromHub(info, hub, opts);
    } catch (err) {
      // The catalog still knows the essentials; say why the details are missing.
      if (!ref.entry || !(err instanceof ModelError)) throw err;
      info.note = `hub not reachable, details from the catalog: ${err.message.split('. ')[0]}`;
    }
  } else if (!ref.entry) {
    throw new OfflineError(`${ref.repo} is not downloaded and HF_HUB_OFFLINE is set: nothing to describe`);
  }
  return withCatalog(info, ref.entry);
}

async function fromHub(info: ModelInfo, hub: HubEnv, opts: ModelInfoOptions): Promise<void> {
  const repo = info.repo as string;
  const revision = info.revision as string;
  const client = new HubClient({ hub, timeoutMs: opts.timeoutMs ?? 15_000, retries: opts.retries ?? 1 });
  const remote = await client.repoInfo(repo, revision);
  const wanted = new Set(selectRepoFiles(remote.siblings.map((s) => s.name)).files);
  info.files = remote.siblings.filter((s) => wanted.has(s.name) || (s.name.endsWith('.safetensors') && !s.name.includes('/'))).map((s) => ({ name: s.name, sizeBytes: s.size ?? 0 }));
  info.sizeBytes = info.files.reduce((a, f) => a + f.sizeBytes, 0);
  info.source = 'hub';
  if (wanted.has('config.json')) {
    const opened = await client.openFile(remote.repo, remote.commit, 'config.json');
    try {
      fromConfig(info, JSON.parse(await opened.response.text()) as Json);
    } finally {
      opened.close();
    }
  }
}
