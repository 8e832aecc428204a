// Validates a model directory before native code maps it: config.json's numbers (validate-config.ts),
// then the safetensors headers (no tensor data is read) against the config: layer counts against the
// layer indexes present, every tensor the family's decoder reads present with the expected shape and
// dtype (quantized codes/scales/biases consistent with bits and group size), no unexplained layers.
// Every failure is an InvalidCheckpointError naming the config field or tensor.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CHECKPOINT_LIMITS } from './checkpoint-limits.js';
import { InvalidCheckpointError } from './errors.js';
import { DECODER_PREFIXES, HEAD_PREFIXES } from './family-table.js';
import { readSafetensorsHeader, type TensorHeader } from './safetensors-header.js';
import { checkConfig, type CheckedConfig, type QuantCheck, type QuantParams } from './validate-config.js';

const FLOAT_DTYPES = new Set(['F32', 'F16', 'BF16']);

function fail(message: string): never {
  throw new InvalidCheckpointError(message);
}

const shapeStr = (s: readonly number[]): string => `[${s.join(', ')}]`;

/** config.json parsed, or an error naming it. */
export function readConfigJson(dir: string): unknown {
  const path = join(dir, 'config.json');
  if (!existsSync(path)) fail(`no config.json in ${dir}: is this a model directory?`);
  let config: unknown;
  try {
    config = JSON.parse(readFileSync(path, 'utf8')) as unknown;
  } catch (err) {
    return fail(`config.json is not valid JSON (${(err as Error).message})`);
  }
  // Iterative, so hostile nesting cannot overflow this stack either.
  const stack: [unknown, number][] = [[config, 0]];
  while (stack.length) {
    const [v, d] = stack.pop() as [unknown, number];
    if (d > CHECKPOINT_LIMITS.maxConfigDepth) fail(`config.json nests deeper than ${CHECKPOINT_LIMITS.maxConfigDepth} levels`);
    if (v && typeof v === 'object') for (const x of Object.values(v)) stack.push([x, d + 1]);
  }
  return config;
}

/** Every tensor header of the checkpoint, chosen as native/src/format/safetensors.cpp does. */
export function readCheckpointTensors(dir: string): Map<string, TensorHeader> {
  let files: string[];
  const index = join(dir, 'model.safetensors.index.json');
  let weightMap: Record<string, unknown> | undefined;
  if (existsSync(index)) {
    let j: unknown;
    try {
      j = JSON.parse(readFileSync(index, 'utf8'));
    } catch (err) {
      fail(`model.safetensors.index.json is not valid JSON (${(err as Error).message})`);
    }
    const wm = (j as { weight_map?: unknown } | null)?.weight_map;
    if (!wm || typeof wm !== 'object' || Array.isArray(wm)) fail('model.safetensors.index.json has no "weight_map" object');
    weightMap = wm as Record<string, unknown>;
    const shards = new Set<string>();
    for (const [name, shard] of Object.entries(weightMap)) {
      if (typeof shard !== 'string' || shard.includes('/') || !existsSync(join(dir, shard)))
        fail(`model.safetensors.index.json: shard ${JSON.stringify(shard)} of tensor ${name} does not exist`);
      shards.add(shard);
    }
    files = [...shards].sort();
  } else if (existsSync(join(dir, 'model.safetensors'))) {
    files = ['model.safetensors'];
  } else {
    files = readdirSync(dir).filter((f) => f.endsWith('.safetensors')).sort();
    if (!files.length) fail(`no .safetensors files in ${dir}`);
  }
  const out = new Map<string, TensorHeader>();
  for (const f of files) {
    for (const t of readSafetensorsHeader(join(dir, f)).tensors) {
      const prev = out.get(t.name);
      if (prev) fail(`tensor ${t.name} is in both ${prev.file} and ${t.file}`);
      out.set(t.name, t);
    }
  }
  if (weightMap)
    for (const [name, shard] of Object.entries(weightMap))
      if (out.get(name)?.file !== shard) fail(`tensor ${name} is listed in model.safetensors.index.json under ${String(shard)} but is not in that file`);
  return out;
}

/** The quantization of one module: its override (with or without the language_model. prefix), else global. */
function moduleQuant(q: QuantCheck | undefined, path: string): QuantParams | false | undefined {
  if (!q) return undefined;
  const alt = path.startsWith('language_model.') ? path.slice('language_model.'.length) : `language_model.${path}`;
  const o = q.modules.get(path) ?? q.modules.get(alt);
  return o ?? q.global;
}

/** Family-independent rules: dtypes, vector ranks, and quantized modules consistent with bits and group size. */
function checkGeneric(tensors: Map<string, TensorHeader>, q: QuantCheck | undefined): void {
  for (const t of tensors.values()) {
    const base = t.name.replace(/\.(weight|scales|biases)$/, '');
    const quantized = tensors.has(`${base}.scales`);
    if (!quantized && t.name === `${base}.weight` && t.dtype === 'U32')
      fail(`missing tensor ${base}.scales: ${t.name} holds U32 quantized codes${tensors.has(`${base}.biases`) ? '' : ` (and ${base}.biases is missing too)`}`);
    if (quantized && t.name === `${base}.weight`) {
      if (t.dtype !== 'U32') fail(`tensor ${t.name} has dtype ${t.dtype}: quantized codes (${base}.scales exists) must be U32`);
    } else if (!FLOAT_DTYPES.has(t.dtype) && !t.name.endsWith('position_ids')) {
      fail(`tensor ${t.name} has dtype ${t.dtype}, expected F32, F16 or BF16`);
    }
    if ((/\.bias$/.test(t.name) || /norm[^.]*\.weight$/.test(t.name) || /\.(scale|per_expert_scale|layer_scalar|std_bias|std_scale)$/.test(t.name)) && t.shape.length !== 1)
      fail(`tensor ${t.name} has shape ${shapeStr(t.shape)}, expected a vector (1-D)`);
    // Clipped linears (Gemma 4 vision) carry all four bounds or none.
    const clip = /^(.*)\.(input_min|input_max|output_min|output_max)$/.exec(t.name);
    if (clip) {
      if (t.shape.reduce((a, b) => a * b, 1) !== 1) fail(`tensor ${t.name} has shape ${shapeStr(t.shape)}, expected one value`);
      for (const k of ['input_min', 'input_max', 'output_min', 'output_max'])
        if (!tensors.has(`${clip[1]}.${k}`)) fail(`missing tensor ${clip[1]}.${k} (${t.name} exists: a clipped linear needs all four bounds)`);
    }
    if (!t.name.endsWith('.scales')) continue;
    const w = tensors.get(`${base}.weight`);
    const b = tensors.get(`${base}.biases`);
    if (!w) fail(`missing tensor ${base}.weight (${t.name} exists)`);
    if (!b) fail(`missing tensor ${base}.biases (${t.name} exists)`);
    if (b.dtype !== t.dtype || shapeStr(b.shape) !== shapeStr(t.shape))
      fail(`tensor ${base}.biases (${b.dtype} ${shapeStr(b.shape)}) differs from ${t.name} (${t.dtype} ${shapeStr(t.shape)})`);
    const p = moduleQuant(q, base);
    if (p === undefined) fail(`tensor ${t.name} is quantized but config.json has no quantization`);
    if (p === false) fail(`tensor ${t.name} is quantized but config.json ${q?.key}.${base} is false (unquantized)`);
    const rank = w.shape.length;
    if (rank < 2 || t.shape.length !== rank || w.shape.slice(0, -1).join() !== t.shape.slice(0, -1).join())
      fail(`tensor ${base}.weight ${shapeStr(w.shape)} and ${t.name} ${shapeStr(t.shape)} disagree (quantized tensors share all but the last dimension)`);
    const packed = w.shape[rank - 1] as number;
    const groups = t.shape[rank - 1] as number;
    if (packed * 32 !== groups * p.group * p.bits)
      fail(`tensor ${base}.weight has ${packed} packed words per row but ${t.name} has ${groups} groups: with ${q?.key}.bits ${p.bits} and group_size ${p.group} a row of ${(packed * 32) / p.bits} values needs ${(packed * 32) / p.bits / p.group} groups`);
  }
}

interface Expect {
  tensors: Map<string, TensorHeader>;
  quant: QuantCheck | undefined;
  seen: Set<string>;
}

/** A linear (or embedding) module: [..lead, out, in] logical, dense or MLX-quantized; names the config fields it derives from. */
function expectModule(e: Expect, path: string, shape: number[], why: string, bias = false): void {
  const w = e.tensors.get(`${path}.weight`);
  if (!w) fail(`missing tensor ${path}.weight (expected ${shapeStr(shape)} from ${why})`);
  e.seen.add(`${path}.weight`);
  const sc = e.tensors.get(`${path}.scales`);
  let logical = w.shape;
  if (sc) {
    e.seen.add(`${path}.scales`).add(`${path}.biases`);
    const p = moduleQuant(e.quant, path) as QuantParams; // checkGeneric has vetted it
    logical = [...w.shape.slice(0, -1), ((w.shape[w.shape.length - 1] as number) * 32) / p.bits];
  }
  if (shapeStr(logical) !== shapeStr(shape))
    fail(`tensor ${path}.weight has shape ${shapeStr(logical)}${sc ? ' (unpacked)' : ''}, but config.json gives ${shapeStr(shape)} (${why})`);
  if (bias) expectVector(e, `${path}.bias`, shape[shape.length - 2] as number, why);
}

function expectVector(e: Expect, name: string, n: number, why: string): void {
  const t = e.tensors.get(name);
  if (!t) fail(`missing tensor ${name} (expected [${n}] from ${why})`);
  e.seen.add(name);
  if (t.shape.length !== 1 || t.shape[0] !== n) fail(`tensor ${name} has shape ${shapeStr(t.shape)}, but config.json gives [${n}] (${why})`);
}

/** Indexes N of tensors named `<prefix>.N.*`. */
function layerIndexes(tensors: Map<string, TensorHeader>, prefix: string): Set<number> {
  const out = new Set<number>();
  for (const name of tensors.keys()) {
    if (!name.startsWith(prefix)) continue;
    const m = /^(\d+)\./.exec(name.slice(prefix.length));
    if (m) out.add(Number(m[1]));
  }
  return out;
}

function checkLayerCount(tensors: Map<string, TensorHeader>, prefix: string, layers: number, field: string): void {
  const present = layerIndexes(tensors, prefix);
  const max = Math.max(-1, ...present);
  if (max >= layers)
    fail(`config.json ${field} is ${layers} but the checkpoint has ${max + 1} layers (${prefix}${max}.* present): the config does not match the weights`);
  for (let i = 0; i < layers; i++)
    if (!present.has(i)) fail(`config.json ${field} is ${layers} but the checkpoint has no tensors for layer ${i} (${prefix}${i}.*)`);
}

function checkDecoder(c: CheckedConfig, e: Expect, m: string, head: string | undefined): void {
  const t = c.text;
  const w = t.where;
  const qd = t.heads * t.headDim;
  const kd = t.kvHeads * t.headDim;
  const s = c.spec;
  const hiddenWhy = `${w}hidden_size ${t.hidden}`;
  expectModule(e, `${m}embed_tokens`, [t.vocab, t.hidden], `${w}vocab_size ${t.vocab}, ${hiddenWhy}`);
  if (head) expectModule(e, head, [t.vocab, t.hidden], `${w}vocab_size ${t.vocab}, ${hiddenWhy}`);
  expectVector(e, `${m}norm.weight`, t.hidden, hiddenWhy);
  const qWhy = `${w}num_attention_heads ${t.heads} × ${t.headDimWhy}, ${hiddenWhy}`;
  const kWhy = `${w}num_key_value_heads ${t.kvHeads} × ${t.headDimWhy}, ${hiddenWhy}`;
  const qkvBias = s.qkvBias === 'always' || (s.qkvBias === 'attention_bias' && t.attentionBias);
  const oBias = s.oBias === 'attention_bias' && t.attentionBias;
  for (let i = 0; i < t.layers; i++) {
    const p = `${m}layers.${i}`;
    const norms = ['input_layernorm', 'post_attention_layernorm', ...(s.sandwichNorms ? ['pre_feedforward_layernorm', 'post_feedforward_layernorm'] : [])];
    for (const n of norms) expectVector(e, `${p}.${n}.weight`, t.hidden, hiddenWhy);
    expectModule(e, `${p}.self_attn.q_proj`, [qd, t.hidden], qWhy, qkvBias);
    expectModule(e, `${p}.self_attn.k_proj`, [kd, t.hidden], kWhy, qkvBias);
    expectModule(e, `${p}.self_attn.v_proj`, [kd, t.hidden], kWhy, qkvBias);
    expectModule(e, `${p}.self_attn.o_proj`, [t.hidden, qd], qWhy, oBias);
    if (s.qkNorm) for (const n of ['q_norm', 'k_norm']) expectVector(e, `${p}.self_attn.${n}.weight`, t.headDim, `${w}head_dim ${t.headDim}`);
    const x = t.experts;
    if (x?.moeLayers[i]) {
      const ew = `${x.countKey} ${x.count}, ${w}moe_intermediate_size ${x.ffn}, ${hiddenWhy}`;
      expectModule(e, `${p}.mlp.gate`, [x.count, t.hidden], ew);
      const split = `${p}.mlp.switch_mlp`;
      if (e.tensors.has(`${split}.gate_proj.weight`)) {
        expectModule(e, `${split}.gate_proj`, [x.count, x.ffn, t.hidden], ew);
        expectModule(e, `${split}.up_proj`, [x.count, x.ffn, t.hidden], ew);
        expectModule(e, `${split}.down_proj`, [x.count, t.hidden, x.ffn], ew);
      } else {
        // Fused or per-expert layouts: native/src/layers/moe.cpp checks their shapes; here, only that they exist.
        const experts = [...e.tensors.keys()].filter((n) => n.startsWith(`${p}.mlp.experts.`));
        if (!experts.length) fail(`missing tensors ${split}.gate_proj.weight (or ${p}.mlp.experts.*): layer ${i} is a mixture-of-experts layer (${x.countKey} ${x.count})`);
        for (const n of experts) e.seen.add(n);
      }
    } else {
      const dense = x ? `; layer ${i} is dense (${w}decoder_sparse_step, ${w}mlp_only_layers)` : '';
      const fw = `${w}intermediate_size ${t.ffn}, ${hiddenWhy}${dense}`;
      expectModule(e, `${p}.mlp.gate_proj`, [t.ffn, t.hidden], fw);
      expectModule(e, `${p}.mlp.up_proj`, [t.ffn, t.hidden], fw);
      expectModule(e, `${p}.mlp.down_proj`, [t.hidden, t.ffn], fw);
    }
  }
  checkNoExtras(c, e, m, `${w}attention_bias, ${w}num_hidden_layers${t.experts ? `, ${t.experts.countKey}, ${w}decoder_sparse_step, ${w}mlp_only_layers` : ''}`);
}

/** Gemma 4's decoder (native/src/models/gemma4.cpp): per-layer head_dim / KV heads (sliding vs full layers,
 * per_layer_config), KV-shared layers without k/v, double-wide MLPs, per-layer inputs, experts. */
function checkGemma4(c: CheckedConfig, e: Expect, m: string): void {
  const t = c.text;
  const w = t.where;
  const tc = c.textConfig;
  const d = c.spec.textDefaults ?? {};
  const num = (k: string): number => (typeof tc[k] === 'number' ? (tc[k] as number) : (d[k] as number));
  const H = t.hidden;
  const hw = `${w}hidden_size ${H}`;
  const L = t.layers;
  expectModule(e, `${m}embed_tokens`, [t.vocab, H], `${w}vocab_size ${t.vocab}, ${hw}`);
  expectVector(e, `${m}norm.weight`, H, hw);
  const ple = num('hidden_size_per_layer_input');
  if (ple > 0) {
    const pw = `${w}num_hidden_layers ${L} × ${w}hidden_size_per_layer_input ${ple}`;
    expectModule(e, `${m}embed_tokens_per_layer`, [num('vocab_size_per_layer_input'), L * ple], `${w}vocab_size_per_layer_input ${num('vocab_size_per_layer_input')}, ${pw}`);
    expectModule(e, `${m}per_layer_model_projection`, [L * ple, H], `${pw}, ${hw}`);
    expectVector(e, `${m}per_layer_projection_norm.weight`, ple, `${w}hidden_size_per_layer_input ${ple}`);
  }
  const types = Array.isArray(tc.layer_types) ? (tc.layer_types as string[]) : undefined;
  const plc = tc.per_layer_config && typeof tc.per_layer_config === 'object' ? (tc.per_layer_config as Record<string, { head_dim?: number; num_key_value_heads?: number }>) : undefined;
  const kEqV = tc.attention_k_eq_v === true;
  const shared = num('num_kv_shared_layers');
  const firstShared = L - shared;
  const doubleWide = tc.use_double_wide_mlp === true;
  const moe = tc.enable_moe_block === true;
  const anyScalar = [...e.tensors.keys()].some((n) => n.startsWith(`${m}layers.`) && n.endsWith('.layer_scalar'));
  for (let i = 0; i < L; i++) {
    const p = `${m}layers.${i}`;
    const full = i === L - 1 || (types ? types[i] === 'full_attention' : (i + 1) % 6 === 0);
    let hd = t.headDim;
    let kv = t.kvHeads;
    let hdWhy = t.headDimWhy;
    let kvWhy = `${w}num_key_value_heads ${kv}`;
    if (full && plc) {
      const o = plc[String(i)];
      if (o?.head_dim !== undefined) [hd, hdWhy] = [o.head_dim, `${w}per_layer_config.${i}.head_dim ${o.head_dim}`];
      if (o?.num_key_value_heads !== undefined) [kv, kvWhy] = [o.num_key_value_heads, `${w}per_layer_config.${i}.num_key_value_heads ${o.num_key_value_heads}`];
    } else if (full) {
      hd = num('global_head_dim');
      hdWhy = `${w}global_head_dim ${hd}`;
      if (kEqV && typeof tc.num_global_key_value_heads === 'number') [kv, kvWhy] = [tc.num_global_key_value_heads, `${w}num_global_key_value_heads ${tc.num_global_key_value_heads}`];
    }
    for (const n of ['input_layernorm', 'post_attention_layernorm', 'pre_feedforward_layernorm', 'post_feedforward_layernorm']) expectVector(e, `${p}.${n}.weight`, H, hw);
    const qWhy = `${w}num_attention_heads ${t.heads} × ${hdWhy}, ${hw}`;
    expectModule(e, `${p}.self_attn.q_proj`, [t.heads * hd, H], qWhy);
    expectModule(e, `${p}.self_attn.o_proj`, [H, t.heads * hd], qWhy);
    expectVector(e, `${p}.self_attn.q_norm.weight`, hd, hdWhy);
    if (i < firstShared) {
      const kWhy = `${kvWhy} × ${hdWhy}, ${hw}; layer ${i} owns its KV (${w}num_kv_shared_layers ${shared})`;
      expectModule(e, `${p}.self_attn.k_proj`, [kv * hd, H], kWhy);
      if (!(full && kEqV)) expectModule(e, `${p}.self_attn.v_proj`, [kv * hd, H], kWhy);
      expectVector(e, `${p}.self_attn.k_norm.weight`, hd, hdWhy);
    } else {
      // KV-shared layers read an earlier layer's cache; their own k/v tensors are ignored if present.
      for (const n of e.tensors.keys()) if (/\.self_attn\.(k_proj|v_proj|k_norm)\./.test(n) && n.startsWith(`${p}.`)) e.seen.add(n);
    }
    const ffn = doubleWide && i >= firstShared ? 2 * t.ffn : t.ffn;
    const fw = `${w}intermediate_size ${t.ffn}${ffn !== t.ffn ? ' × 2 (use_double_wide_mlp)' : ''}, ${hw}`;
    expectModule(e, `${p}.mlp.gate_proj`, [ffn, H], fw);
    expectModule(e, `${p}.mlp.up_proj`, [ffn, H], fw);
    expectModule(e, `${p}.mlp.down_proj`, [H, ffn], fw);
    if (moe) {
      const n = num('num_experts');
      const xw = `${w}num_experts ${n}, ${hw}`;
      expectVector(e, `${p}.router.scale`, H, hw);
      expectVector(e, `${p}.router.per_expert_scale`, n, xw);
      expectModule(e, `${p}.router.proj`, [n, H], xw);
      for (const k of ['post_feedforward_layernorm_1', 'post_feedforward_layernorm_2', 'pre_feedforward_layernorm_2']) expectVector(e, `${p}.${k}.weight`, H, hw);
      const experts = [...e.tensors.keys()].filter((k) => k.startsWith(`${p}.experts.`));
      if (!experts.length) fail(`missing tensors ${p}.experts.*: ${w}enable_moe_block is true`);
      for (const k of experts) e.seen.add(k);
    }
    if (ple > 0) {
      const pw = `${w}hidden_size_per_layer_input ${ple}, ${hw}`;
      expectModule(e, `${p}.per_layer_input_gate`, [ple, H], pw);
      expectModule(e, `${p}.per_layer_projection`, [H, ple], pw);
      expectVector(e, `${p}.post_per_layer_input_norm.weight`, H, hw);
    }
    if (anyScalar) expectVector(e, `${p}.layer_scalar`, 1, 'the other layers have one');
  }
  checkNoExtras(c, e, m, `${w}hidden_size_per_layer_input, ${w}num_kv_shared_layers, ${w}enable_moe_block`);
}

/** Tensors under the decoder's layers that no expectation claimed: the config describes another model. */
function checkNoExtras(c: CheckedConfig, e: Expect, m: string, fields: string): void {
  for (const name of e.tensors.keys())
    // Older exports keep RoPE's inv_freq buffer; the loader recomputes it from rope_theta.
    if (name.startsWith(`${m}layers.`) && !e.seen.has(name) && !name.endsWith('rotary_emb.inv_freq'))
      fail(`unexpected tensor ${name}: the ${c.arch} decoder does not read it with this config.json (check ${fields})`);
}

/** The tower's layer prefix (e.g. "vision_tower.blocks.", "vision_tower.vision_model.encoder.layers."), if any. */
function visionLayerPrefix(tensors: Map<string, TensorHeader>): string | undefined {
  for (const name of tensors.keys()) {
    const m = /^((?:model\.)?(?:vision_tower|visual)\.(?:[a-z_]+\.)*?(?:blocks|layers)\.)\d+\./.exec(name);
    if (m) return m[1];
  }
  return undefined;
}

/** Checks a model directory's config.json and safetensors headers; returns the checked config. */
export function validateCheckpoint(dir: string): CheckedConfig {
  const checked = checkConfig(readConfigJson(dir));
  const tensors = readCheckpointTensors(dir);
  checkGeneric(tensors, checked.quant);
  const t = checked.text;
  // m: the decoder's key prefix with its dot ("model."), or "" for a bare decoder (Qwen3Model, as Qwen3-Embedding ships).
  // The native loader accepts a bare decoder under any causal-LM architecture: Qwen3-Embedding's config says
  // Qwen3ForCausalLM while its weights are Qwen3Model's (no "model." prefix, no lm_head).
  const prefixes = [...DECODER_PREFIXES.map((p) => `${p}.`), ''];
  const m = prefixes.find((p) => [...tensors.keys()].some((n) => n.startsWith(`${p}embed_tokens.`) || n.startsWith(`${p}layers.`)));
  if (m === undefined) fail(`missing tensor model.embed_tokens.weight (no text decoder found: tried prefixes ${prefixes.map((p) => p || '(none)').join(', ')})`);
  checkLayerCount(tensors, `${m}layers.`, t.layers, `${t.where}num_hidden_layers`);
  const head = t.tie ? undefined : HEAD_PREFIXES.find((h) => tensors.has(`${h}.weight`) || tensors.has(`${h}.scales`));
  if (!t.tie && t.tieExplicit && !head && !checked.spec.embeddingOnly && m !== '') fail(`missing tensor ${HEAD_PREFIXES.map((h) => `${h}.weight`).join(' or ')}: config.json says tie_word_embeddings is false`);
  if (checked.spec.decoder === 'generic') checkDecoder(checked, { tensors, quant: checked.quant, seen: new Set() }, m, head);
  else checkGemma4(checked, { tensors, quant: checked.quant, seen: new Set() }, m);
  if (checked.vision) {
    const vp = visionLayerPrefix(tensors);
    if (vp) checkLayerCount(tensors, vp, checked.vision.layers, checked.vision.layersKey);
  }
  return checked;
}
