// `node bench/run.js gemma4` (after `npm run compile`): decode speed of a random-weight MLX 4-bit checkpoint
// of the gemma-4-e2b text shape (hidden 1536, 35 layers, 8/1 heads of 256 (full layers 512), FFN 6144 and
// 12288 on the 20 KV-shared layers, PLE 256, vocab 262144) at concurrency 1 and 8. Weights are random:
// the figures measure the kernels and the byte traffic of the real shapes, not text quality.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { NativeModel } from '../native/types.js';
import { DECODE_BENCH_ARGS, intOption, precisionOption, reportCheckpoint } from './bench-options.js';
import { measureAtConcurrencies, timeDecode } from './decode-loop.js';
import { defaultBenchDir, ensureCheckpoint, fillOnes, fillRandomBits, fillScales, hash32 } from './random-checkpoint.js';
import type { TensorSpec } from './safetensors-writer.js';

export interface Gemma4Shape {
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  globalHeadDim: number;
  ffn: number;
  ple: number;
  kvShared: number;
  vocab: number;
  window: number;
  fullEvery: number; // every fullEvery-th layer is full attention (the last one always is)
}

/** gemma-4-e2b's text decoder. The sliding/full pattern is not verified (MODELS.md): 4 sliding, 1 full. */
export const GEMMA4_E2B: Gemma4Shape = {
  hidden: 1536,
  layers: 35,
  heads: 8,
  kvHeads: 1,
  headDim: 256,
  globalHeadDim: 512,
  ffn: 6144,
  ple: 256,
  kvShared: 20,
  vocab: 262144,
  window: 512,
  fullEvery: 5,
};

const BITS = 4;
const GROUP = 64;
const FORMAT_VERSION = 1;

export function layerTypes(s: Gemma4Shape): string[] {
  return Array.from({ length: s.layers }, (_, i) =>
    (i + 1) % s.fullEvery === 0 || i === s.layers - 1 ? 'full_attention' : 'sliding_attention');
}

/** Every tensor (mlx-vlm key layout language_model.model.*, no vision tower: the text lane only). */
export function gemma4Tensors(s: Gemma4Shape): TensorSpec[] {
  const tensors: TensorSpec[] = [];
  let seed = 0x9e4;
  const quantized = (path: string, out: number, inp: number): void => {
    const k = (seed = hash32(seed + 1));
    tensors.push({ name: `${path}.weight`, dtype: 'U32', shape: [out, (inp * BITS) / 32], fill: fillRandomBits(k) });
    tensors.push({ name: `${path}.scales`, dtype: 'BF16', shape: [out, inp / GROUP], fill: fillScales(k, BITS, false) });
    tensors.push({ name: `${path}.biases`, dtype: 'BF16', shape: [out, inp / GROUP], fill: fillScales(k, BITS, true) });
  };
  const ones = (name: string, n: number): void => {
    tensors.push({ name, dtype: 'BF16', shape: [n], fill: fillOnes });
  };
  const types = layerTypes(s);
  const firstShared = s.layers - s.kvShared;
  const m = 'language_model.model';
  quantized(`${m}.embed_tokens`, s.vocab, s.hidden); // [vocab, hidden]; also the tied head
  quantized(`${m}.embed_tokens_per_layer`, s.vocab, s.layers * s.ple); // [vocab, layers * ple]
  quantized(`${m}.per_layer_model_projection`, s.layers * s.ple, s.hidden);
  ones(`${m}.per_layer_projection_norm.weight`, s.ple);
  for (let l = 0; l < s.layers; l++) {
    const p = `${m}.layers.${l}`;
    const hd = types[l] === 'full_attention' ? s.globalHeadDim : s.headDim;
    const shared = l >= firstShared;
    const ffn = shared ? 2 * s.ffn : s.ffn;
    for (const n of ['input_layernorm', 'post_attention_layernorm', 'pre_feedforward_layernorm', 'post_feedforward_layernorm', 'post_per_layer_input_norm'])
      ones(`${p}.${n}.weight`, s.hidden);
    quantized(`${p}.self_attn.q_proj`, s.heads * hd, s.hidden);
    ones(`${p}.self_attn.q_norm.weight`, hd);
    if (!shared) {
      quantized(`${p}.self_attn.k_proj`, s.kvHeads * hd, s.hidden);
      quantized(`${p}.self_attn.v_proj`, s.kvHeads * hd, s.hidden);
      ones(`${p}.self_attn.k_norm.weight`, hd);
    }
    quantized(`${p}.self_attn.o_proj`, s.hidden, s.heads * hd);
    quantized(`${p}.mlp.gate_proj`, ffn, s.hidden);
    quantized(`${p}.mlp.up_proj`, ffn, s.hidden);
    quantized(`${p}.mlp.down_proj`, s.hidden, ffn);
    quantized(`${p}.per_layer_input_gate`, s.ple, s.hidden);
    quantized(`${p}.per_layer_projection`, s.hidden, s.ple);
    ones(`${p}.layer_scalar`, 1);
  }
  ones(`${m}.norm.weight`, s.hidden);
  return tensors;
}

export function gemma4Config(s: Gemma4Shape): Record<string, unknown> {
  const quantization = { group_size: GROUP, bits: BITS, mode: 'affine' };
  return {
    architectures: ['Gemma4ForConditionalGeneration'],
    model_type: 'gemma4',
    tie_word_embeddings: true,
    dtype: 'bfloat16',
    text_config: {
      model_type: 'gemma4_text',
      vocab_size: s.vocab,
      vocab_size_per_layer_input: s.vocab,
      hidden_size: s.hidden,
      hidden_size_per_layer_input: s.ple,
      intermediate_size: s.ffn,
      num_hidden_layers: s.layers,
      num_attention_heads: s.heads,
      num_key_value_heads: s.kvHeads,
      head_dim: s.headDim,
      global_head_dim: s.globalHeadDim,
      num_kv_shared_layers: s.kvShared,
      use_double_wide_mlp: true,
      layer_types: layerTypes(s),
      sliding_window: s.window,
      final_logit_softcapping: 30.0,
      hidden_activation: 'gelu_pytorch_tanh',
      max_position_embeddings: 131072,
      rms_norm_eps: 1e-6,
      rope_parameters: {
        sliding_attention: { rope_type: 'default', rope_theta: 10000.0 },
        full_attention: { rope_type: 'proportional', partial_rotary_factor: 0.25, rope_theta: 1000000.0 },
      },
      tie_word_embeddings: true,
      dtype: 'bfloat16',
    },
    quantization,
    quantization_config: { ...quantization },
  };
}

export function ensureGemma4Checkpoint(root: string, s: Gemma4Shape): { dir: string; bytes: number; cached: boolean } {
  const dir = join(root, `gemma4-h${s.hidden}-l${s.layers}-ple${s.ple}-shared${s.kvShared}-${BITS}bit-g${GROUP}`);
  return ensureCheckpoint(dir, FORMAT_VERSION, () => gemma4Config(s), gemma4Tensors(s));
}

export interface DecodeFigure {
  concurrency: number;
  steps: number;
  tokS: number; // tokens per second over all rows
  msPerStep: number;
}

/** Prefills `concurrency` prompts in one step, then decodes `steps` steps of all rows together. */
export async function measureDecode(model: NativeModel, concurrency: number, steps: number, prompt: number): Promise<DecodeFigure> {
  const ms = await timeDecode(model, { concurrency, steps, prompt, idPrefix: 'g4', promptToken: (i, k) => 100 + ((i * 7919 + k * 104729) % 250000) });
  return { concurrency, steps, tokS: (concurrency * steps * 1000) / ms, msPerStep: ms / steps };
}

/** tok/s per concurrency of transformers bf16 (sdpa) on the GPU, the same shape with random weights. */
function torchPeer(python: string, prompt: number, steps: number): Map<number, number> {
  const script = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'peers', 'torch_gemma4_decode.py');
  const r = spawnSync(python, [script, '--levels', '1,8', '--prompt', String(prompt), '--gen', String(steps)], { encoding: 'utf8', timeout: 600_000 });
  if (r.status !== 0) throw new Error(`transformers peer failed (${String(r.status)}): ${(r.stderr ?? '').slice(-400)}`);
  const out = new Map<number, number>();
  for (const line of r.stdout.split('\n'))
    if (line.startsWith('{')) {
      const row = JSON.parse(line) as { level: number; tokS: number };
      out.set(row.level, row.tokS);
    }
  return out;
}

const USAGE = `usage: node bench/run.js gemma4 [options]   (after npm run compile)
  --steps N        decode steps per concurrency (default 8)
  --prompt N       prompt tokens per sequence (default 16)
  --threads N      threads (default 2)
  --precision P    fast | exact (default fast)
  --device D       cpu | cuda (default cpu); with cuda and --torch PY, transformers bf16 of the same shape on the
                   GPU too (bench/peers/torch_gemma4_decode.py), and the ratio
  --dir DIR        checkpoint cache (default $RAPID_BENCH_DIR or <tmpdir>/rapid-bench)`;

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: { ...DECODE_BENCH_ARGS, device: { type: 'string' }, torch: { type: 'string' } },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const precision = precisionOption(values.precision);
  const steps = intOption(values.steps, 'steps', 8);
  const prompt = intOption(values.prompt, 'prompt', 16);
  const shape = GEMMA4_E2B;
  const t0 = performance.now();
  const ck = ensureGemma4Checkpoint(values.dir ?? defaultBenchDir(), shape);
  reportCheckpoint(ck, t0);
  if (values.device !== undefined && values.device !== 'cpu' && values.device !== 'cuda')
    throw new Error(`--device must be cpu or cuda, got ${values.device}`);
  const device = values.device ?? 'cpu';
  const figures = await measureAtConcurrencies(ck.dir, { threads: intOption(values.threads, 'threads', 2), precision, device }, steps, (model, c, n) =>
    measureDecode(model, c, n, prompt),
  );
  process.stdout.write(`gemma-4-e2b text shape on ${device}, random ${BITS}-bit g${GROUP} weights, ${precision}, ${prompt}-token prompts, ${steps} decode steps\n`);
  const peer = device === 'cuda' && values.torch ? torchPeer(values.torch, prompt, steps) : new Map<number, number>();
  for (const f of figures) {
    const t = peer.get(f.concurrency);
    const vs = t ? `; transformers bf16 ${t.toFixed(2)} tok/s, ratio ${(f.tokS / t).toFixed(2)}x` : '';
    process.stdout.write(`  concurrency ${f.concurrency}: ${f.tokS.toFixed(2)} tok/s (${f.msPerStep.toFixed(1)} ms/step)${vs}\n`);
  }
  return 0;
}
