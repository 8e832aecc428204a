// Range checks of every config.json number the runtime reads (text decoder, RoPE, experts, quantization,
// vision tower), before native code divides by or allocates from any of them. Each failure names the key
// path in config.json and the range it must fall in.
import { CHECKPOINT_LIMITS as LIM } from './checkpoint-limits.js';
import { InvalidCheckpointError } from './errors.js';
import { FAMILIES, type FamilySpec, type VisionFamily, VISION_DEFAULT_LAYERS } from './family-table.js';

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => !!v && typeof v === 'object' && !Array.isArray(v);

function fail(message: string): never {
  throw new InvalidCheckpointError(`config.json: ${message}`);
}

interface Range {
  min: number;
  max: number;
  /** A value the loader assumes when the key is absent or null; without it the key is required. */
  def?: number;
  /** min itself is not allowed (floats that must be strictly positive). */
  openMin?: boolean;
}

/** Reads numbers from one object of config.json, naming them by their path in messages. */
class Fields {
  constructor(
    readonly obj: Json,
    readonly where: string, // "" or "text_config." etc.
    readonly defaults: Record<string, number> = {},
  ) {}

  has(key: string): boolean {
    return this.obj[key] !== undefined && this.obj[key] !== null;
  }

  private read(key: string, r: Range, integer: boolean): number {
    const v = this.obj[key];
    const path = `${this.where}${key}`;
    const kind = integer ? 'an integer' : 'a number';
    const range = `${kind} in ${r.openMin ? '(' : '['}${r.min}, ${r.max}]`;
    if (v === undefined || v === null) {
      const def = this.defaults[key] ?? r.def;
      if (def === undefined) fail(`${path} is missing (expected ${range})`);
      return def;
    }
    if (typeof v !== 'number' || !Number.isFinite(v)) fail(`${path} is ${JSON.stringify(v)}: expected ${range}`);
    if (integer && !Number.isInteger(v)) fail(`${path} is ${v}: expected ${range}`);
    if (v < r.min || v > r.max || (r.openMin && v === r.min)) fail(`${path} is ${v}: expected ${range}`);
    return v;
  }

  int(key: string, r: Range): number {
    return this.read(key, r, true);
  }

  float(key: string, r: Range): number {
    return this.read(key, r, false);
  }

  /** The first present key of `keys` (aliases the native loader accepts), else the default. */
  intAny(keys: string[], r: Range): number {
    const k = keys.find((x) => this.has(x)) ?? (keys[0] as string);
    return this.int(k, r);
  }

  bool(key: string): boolean | undefined {
    const v = this.obj[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'boolean') fail(`${this.where}${key} is ${JSON.stringify(v)}: expected true or false`);
    return v;
  }
}

/** What the tensor checks need from the text config, already range-checked. */
export interface TextDims {
  vocab: number;
  hidden: number;
  ffn: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  /** How head_dim was found, naming the fields: "head_dim 32" or "head_dim 16 = hidden_size 128 / num_attention_heads 8". */
  headDimWhy: string;
  attentionBias: boolean;
  tie: boolean;
  tieExplicit: boolean;
  experts?: { count: number; ffn: number; moeLayers: boolean[]; countKey: string };
  where: string; // "text_config." or ""
}

export interface CheckedConfig {
  arch: string;
  spec: FamilySpec;
  text: TextDims;
  textConfig: Json; // the (range-checked) text config object, for family-specific tensor checks
  quant?: QuantCheck;
  vision?: { family: VisionFamily; layers: number; layersKey: string };
}

export interface QuantParams {
  bits: number;
  group: number;
}

export interface QuantCheck {
  key: string; // "quantization" or "quantization_config"
  global: QuantParams;
  /** Per-module overrides: params, or false for an unquantized module. */
  modules: Map<string, QuantParams | false>;
}

/** The architecture config.json names, with its family row; throws naming it when not runnable. */
export function configFamily(config: Json): { arch: string; spec: FamilySpec } {
  const archs = config.architectures;
  if (archs !== undefined && (!Array.isArray(archs) || (archs.length > 0 && typeof archs[0] !== 'string'))) fail(`architectures is ${JSON.stringify(archs)}: expected a list of class names`);
  const arch = Array.isArray(archs) ? (archs[0] as string | undefined) : undefined;
  if (arch) {
    const spec = FAMILIES[arch];
    if (!spec) fail(`unsupported architecture "${arch}" (supported: ${Object.keys(FAMILIES).join(', ')})`);
    return { arch, spec };
  }
  const mt = config.model_type;
  const hit = Object.entries(FAMILIES).find(([, s]) => s.modelType === mt);
  if (!hit) fail(`no architectures and unsupported model_type ${JSON.stringify(mt)} (supported: ${Object.keys(FAMILIES).join(', ')})`);
  return { arch: hit[0], spec: hit[1] };
}

function checkRope(rp: unknown, path: string, headDim: number, headDimWhy = `head_dim ${headDim}`): void {
  if (rp === undefined || rp === null) return;
  if (!isObject(rp)) fail(`${path} is ${JSON.stringify(rp)}: expected an object`);
  // Gemma nests one object per layer type.
  for (const sub of ['full_attention', 'sliding_attention']) if (rp[sub] !== undefined) checkRope(rp[sub], `${path}.${sub}`, headDim, headDimWhy);
  const f = new Fields(rp, `${path}.`);
  const type = rp.rope_type ?? rp.type;
  // Scaled RoPE types have no meaningful default factor (transformers refuses them without one).
  if (typeof type === 'string' && ['linear', 'llama3', 'yarn', 'dynamic'].includes(type) && !f.has('factor')) fail(`${path}.factor is missing (rope_type "${type}" needs it)`);
  if (f.has('rope_theta')) f.float('rope_theta', { min: 0, max: LIM.maxRopeTheta, openMin: true });
  // mscale 0 is valid (no attention scaling); the others divide or bound frequencies and must be positive.
  for (const k of ['factor', 'low_freq_factor', 'high_freq_factor', 'beta_fast', 'beta_slow', 'mscale', 'mscale_all_dim'])
    if (f.has(k)) f.float(k, { min: 0, max: LIM.maxRopeFactor, openMin: !k.startsWith('mscale') });
  if (f.has('partial_rotary_factor')) f.float('partial_rotary_factor', { min: 0, max: 1, openMin: true });
  if (f.has('llama_4_scaling_beta')) f.float('llama_4_scaling_beta', { min: 0, max: LIM.maxRopeFactor });
  if (f.has('original_max_position_embeddings')) f.int('original_max_position_embeddings', { min: 1, max: LIM.maxPositions });
  if (rp.mrope_section !== undefined && rp.mrope_section !== null) {
    const s = rp.mrope_section;
    if (!Array.isArray(s) || s.length !== 3 || !s.every((x) => Number.isInteger(x) && (x as number) >= 0))
      fail(`${path}.mrope_section is ${JSON.stringify(s)}: expected 3 non-negative integers`);
    const sum = (s as number[]).reduce((a, b) => a + b, 0);
    if (sum * 2 !== headDim) fail(`${path}.mrope_section ${JSON.stringify(s)} sums to ${sum}, expected half of ${headDimWhy}`);
  }
}

function checkText(config: Json, spec: FamilySpec): TextDims {
  const nested = isObject(config.text_config);
  const text = nested ? (config.text_config as Json) : config;
  const where = nested ? 'text_config.' : '';
  const f = new Fields(text, where, spec.textDefaults);
  const vocab = f.int('vocab_size', { min: 1, max: LIM.maxVocab });
  const hidden = f.int('hidden_size', { min: 1, max: LIM.maxHidden });
  const ffn = f.int('intermediate_size', { min: 1, max: LIM.maxIntermediate });
  const layers = f.int('num_hidden_layers', { min: 1, max: LIM.maxLayers });
  const heads = f.int('num_attention_heads', { min: 1, max: LIM.maxHeads });
  const kvHeads = f.int('num_key_value_heads', { min: 1, max: heads, def: heads });
  if (heads % kvHeads !== 0) fail(`${where}num_attention_heads ${heads} is not a multiple of ${where}num_key_value_heads ${kvHeads}`);
  if (!f.has('head_dim') && spec.textDefaults?.head_dim === undefined && hidden % heads !== 0)
    fail(`${where}hidden_size ${hidden} is not a multiple of ${where}num_attention_heads ${heads} (and head_dim is not given)`);
  const headDim = f.int('head_dim', { min: 2, max: LIM.maxHeadDim, def: Math.floor(hidden / heads) });
  const headDimWhy = f.has('head_dim') || spec.textDefaults?.head_dim !== undefined ? `${where}head_dim ${headDim}` : `${where}head_dim ${headDim} = ${where}hidden_size ${hidden} / ${where}num_attention_heads ${heads}`;
  if (headDim % 2 !== 0) fail(`${headDimWhy} is odd: RoPE rotates pairs`);
  // The context length bounds every prompt: without it nothing could be generated.
  f.int('max_position_embeddings', { min: 1, max: LIM.maxPositions, def: spec.textDefaults?.max_position_embeddings });
  // transformers' rope_theta defaults differ by class and version: a config that omits it is ambiguous.
  const ropeObjs = [text.rope_parameters, text.rope_scaling, config.rope_parameters].filter(isObject);
  if (nested && typeof config.rope_theta !== 'undefined') new Fields(config, '').float('rope_theta', { min: 0, max: LIM.maxRopeTheta, openMin: true });
  const thetaAnywhere = f.has('rope_theta') || typeof config.rope_theta === 'number' || ropeObjs.some((r) => typeof r.rope_theta === 'number');
  if (spec.decoder === 'generic' && !spec.textDefaults && !thetaAnywhere)
    fail(`${where}rope_theta is missing (expected a number in (0, ${LIM.maxRopeTheta}], at the top level or in rope_parameters)`);
  for (const k of ['rms_norm_eps', 'layer_norm_eps']) if (f.has(k)) f.float(k, { min: 0, max: LIM.maxEps, openMin: true });
  for (const k of ['rope_theta', 'rope_local_base_freq']) if (f.has(k)) f.float(k, { min: 0, max: LIM.maxRopeTheta, openMin: true });
  if (f.has('query_pre_attn_scalar')) f.float('query_pre_attn_scalar', { min: 0, max: LIM.maxSoftcap, openMin: true });
  if (f.has('final_logit_softcapping')) f.float('final_logit_softcapping', { min: 0, max: LIM.maxSoftcap, openMin: true });
  if (f.has('sliding_window')) f.int('sliding_window', { min: 1, max: LIM.maxPositions });
  if (f.has('sliding_window_pattern')) f.int('sliding_window_pattern', { min: 1, max: LIM.maxLayers });
  if (f.has('max_window_layers')) f.int('max_window_layers', { min: 0, max: LIM.maxLayers });
  for (const k of ['rope_parameters', 'rope_scaling']) checkRope(text[k], `${where}${k}`, headDim, headDimWhy);
  if (spec.mrope) {
    const has = [text, config].some((c) => ['rope_parameters', 'rope_scaling'].some((k) => isObject(c[k]) && (c[k] as Json).mrope_section !== undefined));
    if (!has) fail(`${where}rope_parameters.mrope_section is missing (this architecture uses 3-axis mRoPE)`);
    if (nested) for (const k of ['rope_parameters', 'rope_scaling']) checkRope(config[k], k, headDim, headDimWhy);
  }
  const lt = text.layer_types;
  if (lt !== undefined && lt !== null) {
    if (!Array.isArray(lt)) fail(`${where}layer_types is ${JSON.stringify(lt)}: expected a list`);
    if (lt.length !== layers) fail(`${where}layer_types has ${lt.length} entries for ${where}num_hidden_layers ${layers}`);
    lt.forEach((t, i) => {
      if (t !== 'full_attention' && t !== 'sliding_attention') fail(`${where}layer_types[${i}] is ${JSON.stringify(t)}: expected "full_attention" or "sliding_attention"`);
    });
  }
  const attentionBias = f.bool('attention_bias') ?? false;
  const tieTop = new Fields(config, '').bool('tie_word_embeddings');
  const tieText = nested ? f.bool('tie_word_embeddings') : undefined;
  const tie = tieTop ?? tieText ?? spec.tieDefault;
  const dims: TextDims = { vocab, hidden, ffn, layers, heads, kvHeads, headDim, headDimWhy, attentionBias, tie, tieExplicit: (tieTop ?? tieText) !== undefined, where };
  if (spec.moe) dims.experts = checkExperts(text, f, where, layers);
  if (spec.decoder === 'gemma4') checkGemma4Text(text, f, where, layers, heads, vocab);
  return dims;
}

function checkExperts(text: Json, f: Fields, where: string, layers: number): TextDims['experts'] {
  const countKey = f.has('num_experts') ? 'num_experts' : 'num_local_experts';
  const count = f.int(countKey, { min: 1, max: LIM.maxExperts });
  f.int('num_experts_per_tok', { min: 1, max: count, def: Math.min(8, count) });
  const ffn = f.int('moe_intermediate_size', { min: 1, max: LIM.maxIntermediate });
  const step = f.int('decoder_sparse_step', { min: 1, max: layers, def: 1 });
  const moeLayers = Array.from({ length: layers }, (_, l) => (l + 1) % step === 0);
  const only = text.mlp_only_layers;
  if (only !== undefined && only !== null) {
    if (!Array.isArray(only) || !only.every((l) => Number.isInteger(l) && (l as number) >= 0 && (l as number) < layers))
      fail(`${where}mlp_only_layers is ${JSON.stringify(only)}: expected layer indexes in [0, ${layers})`);
    for (const l of only as number[]) moeLayers[l] = false;
  }
  return { count, ffn, moeLayers, countKey: `${where}${countKey}` };
}

function checkGemma4Text(text: Json, f: Fields, where: string, layers: number, heads: number, vocab: number): void {
  // Absent means "no cap" to the loader but Gemma's class default is a cap: the config must say which (null = none).
  if (!('final_logit_softcapping' in text)) fail(`${where}final_logit_softcapping is missing (a number, or null for no soft-capping)`);
  if (f.has('hidden_size_per_layer_input')) f.int('hidden_size_per_layer_input', { min: 0, max: LIM.maxHidden });
  if (f.has('vocab_size_per_layer_input')) f.int('vocab_size_per_layer_input', { min: 1, max: LIM.maxVocab });
  if (f.has('num_kv_shared_layers')) f.int('num_kv_shared_layers', { min: 0, max: layers - 1 });
  if (f.has('global_head_dim')) f.int('global_head_dim', { min: 2, max: LIM.maxHeadDim });
  if (f.has('num_global_key_value_heads')) f.int('num_global_key_value_heads', { min: 1, max: heads });
  if (f.has('pad_token_id')) f.int('pad_token_id', { min: 0, max: vocab - 1 });
  if (f.bool('enable_moe_block')) {
    const n = f.int('num_experts', { min: 1, max: LIM.maxExperts });
    f.int('top_k_experts', { min: 1, max: n });
    f.int('moe_intermediate_size', { min: 1, max: LIM.maxIntermediate });
  }
  const plc = text.per_layer_config;
  if (plc !== undefined && plc !== null) {
    if (!isObject(plc)) fail(`${where}per_layer_config is ${JSON.stringify(plc)}: expected an object`);
    for (const [idx, e] of Object.entries(plc)) {
      const i = Number(idx);
      if (!Number.isInteger(i) || i < 0 || i >= layers) fail(`${where}per_layer_config has layer "${idx}" outside [0, ${layers})`);
      if (!isObject(e)) fail(`${where}per_layer_config.${idx} is ${JSON.stringify(e)}: expected an object`);
      const pf = new Fields(e, `${where}per_layer_config.${idx}.`);
      if (pf.has('head_dim')) {
        const hd = pf.int('head_dim', { min: 2, max: LIM.maxHeadDim });
        if (hd % 2 !== 0) fail(`${where}per_layer_config.${idx}.head_dim ${hd} is odd: RoPE rotates pairs`);
      }
      if (pf.has('num_key_value_heads')) {
        const kv = pf.int('num_key_value_heads', { min: 1, max: heads });
        if (heads % kv !== 0) fail(`${where}per_layer_config.${idx}.num_key_value_heads ${kv} does not divide num_attention_heads ${heads}`);
      }
    }
  }
}

function checkQuant(config: Json): QuantCheck | undefined {
  const text = isObject(config.text_config) ? (config.text_config as Json) : {};
  const key = ['quantization', 'quantization_config'].find((k) => isObject(config[k])) ?? ['quantization', 'quantization_config'].find((k) => isObject(text[k]));
  if (!key) return undefined;
  const q = (isObject(config[key]) ? config[key] : text[key]) as Json;
  // Hugging Face quantization_config of other methods (bitsandbytes, gptq, ...) is not MLX affine.
  if (typeof q.quant_method === 'string' && q.bits === undefined) fail(`${key}.quant_method "${q.quant_method}" is not supported (MLX affine quantization is)`);
  const params = (o: Json, where: string, inherit?: QuantParams): QuantParams => {
    const f = new Fields(o, where);
    const mode = o.mode ?? 'affine';
    if (typeof mode !== 'string' || !(LIM.quantModes as readonly string[]).includes(mode)) fail(`${where}mode is ${JSON.stringify(mode)}: supported: ${LIM.quantModes.join(', ')}`);
    const bits = inherit && !f.has('bits') ? inherit.bits : f.int('bits', { min: 1, max: 32 });
    if (!(LIM.quantBits as readonly number[]).includes(bits)) fail(`${where}bits is ${bits}: supported: ${LIM.quantBits.join(', ')}`);
    const group = inherit && !f.has('group_size') ? inherit.group : f.int('group_size', { min: 1, max: 1 << 16 });
    if (!(LIM.quantGroupSizes as readonly number[]).includes(group)) fail(`${where}group_size is ${group}: supported: ${LIM.quantGroupSizes.join(', ')}`);
    return { bits, group };
  };
  const global = params(q, `${key}.`);
  const modules = new Map<string, QuantParams | false>();
  for (const [k, v] of Object.entries(q)) {
    if (isObject(v)) modules.set(k, params(v, `${key}.${k}.`, global));
    else if (v === false) modules.set(k, false);
    else if (v === true) modules.set(k, global);
  }
  return { key, global, modules };
}

function checkVision(config: Json, family: VisionFamily, textHidden: number, vocab: number): { layers: number; layersKey: string } | undefined {
  const vc = config.vision_config;
  if (vc === undefined || vc === null) return undefined;
  if (!isObject(vc)) fail(`vision_config is ${JSON.stringify(vc)}: expected an object`);
  const f = new Fields(vc, 'vision_config.');
  const top = new Fields(config, '');
  const qwen = family === 'qwen2_5_vl' || family === 'qwen3_vl';
  const layersKeys = qwen ? ['depth', 'num_hidden_layers'] : ['num_hidden_layers', 'depth'];
  const layersKey = layersKeys.find((k) => f.has(k)) ?? (layersKeys[0] as string);
  const layers = f.int(layersKey, { min: 1, max: LIM.maxLayers, def: VISION_DEFAULT_LAYERS[family] });
  const hidden = f.int('hidden_size', { min: 1, max: LIM.maxHidden });
  f.int('intermediate_size', { min: 1, max: LIM.maxIntermediate });
  const headsKeys = qwen ? ['num_heads', 'num_attention_heads'] : ['num_attention_heads', 'num_heads'];
  const headsKey = headsKeys.find((k) => f.has(k)) ?? (headsKeys[0] as string);
  // Shape-defining sizes are required: the class defaults are for full-size towers and would silently misread a small one.
  const heads = f.int(headsKey, { min: 1, max: LIM.maxHeads });
  if (!f.has('head_dim') && hidden % heads !== 0) fail(`vision_config.hidden_size ${hidden} is not a multiple of vision_config.${headsKey} ${heads}`);
  const headDim = f.int('head_dim', { min: 1, max: LIM.maxHeadDim, def: Math.floor(hidden / heads) });
  if (headDim % 4 !== 0 && family !== 'gemma3') fail(`vision_config head_dim ${headDim} (hidden_size / ${headsKey}) is not a multiple of 4 (2-D RoPE)`);
  const patch = f.int('patch_size', { min: 1, max: LIM.maxPatchSize });
  for (const k of ['num_channels', 'in_channels', 'in_chans']) if (f.has(k)) f.int(k, { min: 1, max: LIM.maxChannels });
  for (const k of ['layer_norm_eps', 'rms_norm_eps']) if (f.has(k)) f.float(k, { min: 0, max: LIM.maxEps, openMin: true });
  if (f.has('rope_theta')) f.float('rope_theta', { min: 0, max: LIM.maxRopeTheta, openMin: true });
  if (vc.rope_parameters !== undefined) checkRope(vc.rope_parameters, 'vision_config.rope_parameters', 0); // no mrope_section in towers
  if (f.has('image_size')) {
    const image = f.int('image_size', { min: 1, max: LIM.maxImageSize });
    if (image % patch !== 0) fail(`vision_config.image_size ${image} is not a multiple of vision_config.patch_size ${patch}`);
  }
  if (f.has('max_position_embeddings')) f.int('max_position_embeddings', { min: 1, max: LIM.maxPositions });
  if (f.has('position_embedding_size')) f.int('position_embedding_size', { min: 1, max: LIM.maxPositions });
  if (f.has('num_position_embeddings')) {
    const n = f.int('num_position_embeddings', { min: 1, max: LIM.maxPositions });
    if (!Number.isInteger(Math.sqrt(n))) fail(`vision_config.num_position_embeddings ${n} is not a square (a side × side grid)`);
  }
  if (qwen) {
    f.int('spatial_merge_size', { min: 1, max: LIM.maxMergeSize });
    f.int('temporal_patch_size', { min: 1, max: LIM.maxMergeSize });
    const out = f.int('out_hidden_size', { min: 1, max: LIM.maxHidden });
    if (out !== textHidden) fail(`vision_config.out_hidden_size ${out} differs from the text hidden_size ${textHidden}`);
  }
  if (family === 'qwen2_5_vl') {
    const win = f.int('window_size', { min: 1, max: LIM.maxImageSize, def: 112 });
    const merge = f.int('spatial_merge_size', { min: 1, max: LIM.maxMergeSize });
    if (win < merge * patch) fail(`vision_config.window_size ${win} is smaller than one merged patch (${merge} × ${patch} pixels)`);
  }
  for (const k of ['fullatt_block_indexes', 'deepstack_visual_indexes']) {
    const v = vc[k];
    if (v === undefined || v === null) continue;
    if (!Array.isArray(v) || !v.every((x) => Number.isInteger(x) && (x as number) >= 0 && (x as number) < layers))
      fail(`vision_config.${k} is ${JSON.stringify(v)}: expected layer indexes below vision_config.${layersKey} ${layers}`);
  }
  if (family === 'gemma4') {
    const kv = f.int('num_key_value_heads', { min: 1, max: heads, def: heads });
    if (heads % kv !== 0) fail(`vision_config.num_key_value_heads ${kv} does not divide vision_config.num_attention_heads ${heads}`);
    f.int('pooling_kernel_size', { min: 1, max: LIM.maxMergeSize, def: 3 });
  }
  if (family === 'gemma3') {
    const mm = top.int('mm_tokens_per_image', { min: 1, max: LIM.maxPositions, def: 256 });
    const side = Math.round(Math.sqrt(mm));
    const image = f.int('image_size', { min: 1, max: LIM.maxImageSize, def: 896 });
    if (side * side !== mm || (image / patch) % side !== 0) fail(`mm_tokens_per_image ${mm} is not a square whose side divides image_size / patch_size = ${image / patch}`);
  }
  if (family === 'pixtral') {
    top.int('spatial_merge_size', { min: 1, max: LIM.maxMergeSize, def: 2 });
    if (top.has('vision_feature_layer')) top.int('vision_feature_layer', { min: -layers, max: layers - 1 });
  }
  // The placeholder tokens the prompt expansion splices images at must be real token ids.
  for (const k of ['image_token_id', 'image_token_index', 'boi_token_id', 'boi_token_index', 'eoi_token_id', 'eoi_token_index', 'vision_start_token_id', 'vision_end_token_id'])
    if (top.has(k)) top.int(k, { min: 0, max: vocab - 1 });
  return { layers, layersKey: `vision_config.${layersKey}` };
}

/** Checks config.json's numbers and their relations; returns what the tensor checks compare against. */
export function checkConfig(config: unknown): CheckedConfig {
  if (!isObject(config)) fail(`expected a JSON object, got ${Array.isArray(config) ? 'a list' : JSON.stringify(config)}`);
  const { arch, spec } = configFamily(config);
  const text = checkText(config, spec);
  const quant = checkQuant(config);
  const textConfig = (isObject(config.text_config) ? config.text_config : config) as Json;
  const out: CheckedConfig = { arch, spec, text, textConfig, quant };
  if (spec.vision) {
    const v = checkVision(config, spec.vision, text.hidden, text.vocab);
    if (v) out.vision = { family: spec.vision, ...v };
  }
  return out;
}
