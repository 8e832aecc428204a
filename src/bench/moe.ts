// `npm run bench:moe`: decode speed of a random-weight MLX 4-bit mixture-of-experts decoder of the
// Qwen3-VL-30B-A3B text shape (hidden 2048, 128 experts top-8, expert FFN 768, 32/4 heads of 128; router
// gates 8-bit as mlx-community writes them) at concurrency 1 and 8, and the expert weight bytes each
// decode step reads: batching runs each active expert once per step, so 8 rows read far less than 8x.
// The full model is 48 layers (~17 GB at 4-bit); --layers picks the subset that fits here.
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { NativeModel } from '../native/types.js';
import { DECODE_BENCH_ARGS, intOption, precisionOption, reportCheckpoint } from './bench-options.js';
import { measureAtConcurrencies, timeDecode } from './decode-loop.js';
import { defaultBenchDir, ensureCheckpoint, fillOnes, fillRandomBits, fillScales, hash32 } from './random-checkpoint.js';
import type { TensorSpec } from './safetensors-writer.js';

export interface MoeShape {
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  experts: number;
  topK: number;
  moeFfn: number;
  vocab: number;
}

/** Qwen3-VL-30B-A3B's text decoder (all 48 layers MoE). */
export const QWEN3_VL_30B_A3B: MoeShape = {
  hidden: 2048,
  layers: 48,
  heads: 32,
  kvHeads: 4,
  headDim: 128,
  experts: 128,
  topK: 8,
  moeFfn: 768,
  vocab: 151936,
};

const BITS = 4;
const GROUP = 64;
const GATE_BITS = 8; // mlx-community forces the router gate to 8-bit g64
const FORMAT_VERSION = 1;

/** Every tensor of the checkpoint (Qwen3MoeForCausalLM names, MLX SwitchLinear experts). */
export function moeTensors(s: MoeShape): TensorSpec[] {
  const tensors: TensorSpec[] = [];
  let seed = 0x30b;
  const quantized = (path: string, shape: number[], bits = BITS): void => {
    const k = (seed = hash32(seed + 1));
    const inp = shape[shape.length - 1]!;
    const lead = shape.slice(0, -1);
    tensors.push({ name: `${path}.weight`, dtype: 'U32', shape: [...lead, (inp * bits) / 32], fill: fillRandomBits(k) });
    tensors.push({ name: `${path}.scales`, dtype: 'BF16', shape: [...lead, inp / GROUP], fill: fillScales(k, bits, false) });
    tensors.push({ name: `${path}.biases`, dtype: 'BF16', shape: [...lead, inp / GROUP], fill: fillScales(k, bits, true) });
  };
  const ones = (name: string, n: number): void => {
    tensors.push({ name, dtype: 'BF16', shape: [n], fill: fillOnes });
  };
  const q = s.heads * s.headDim;
  const kv = s.kvHeads * s.headDim;
  quantized('model.embed_tokens', [s.vocab, s.hidden]);
  for (let l = 0; l < s.layers; l++) {
    const p = `model.layers.${l}`;
    ones(`${p}.input_layernorm.weight`, s.hidden);
    quantized(`${p}.self_attn.q_proj`, [q, s.hidden]);
    quantized(`${p}.self_attn.k_proj`, [kv, s.hidden]);
    quantized(`${p}.self_attn.v_proj`, [kv, s.hidden]);
    quantized(`${p}.self_attn.o_proj`, [s.hidden, q]);
    ones(`${p}.self_attn.q_norm.weight`, s.headDim);
    ones(`${p}.self_attn.k_norm.weight`, s.headDim);
    ones(`${p}.post_attention_layernorm.weight`, s.hidden);
    quantized(`${p}.mlp.gate`, [s.experts, s.hidden], GATE_BITS); // router [E, hidden]
    quantized(`${p}.mlp.switch_mlp.gate_proj`, [s.experts, s.moeFfn, s.hidden]); // [E, I, H]
    quantized(`${p}.mlp.switch_mlp.up_proj`, [s.experts, s.moeFfn, s.hidden]);
    quantized(`${p}.mlp.switch_mlp.down_proj`, [s.experts, s.hidden, s.moeFfn]); // [E, H, I]
  }
  ones('model.norm.weight', s.hidden);
  quantized('lm_head', [s.vocab, s.hidden]);
  return tensors;
}

export function moeConfig(s: MoeShape): Record<string, unknown> {
  const quantization: Record<string, unknown> = { group_size: GROUP, bits: BITS };
  for (let l = 0; l < s.layers; l++) quantization[`model.layers.${l}.mlp.gate`] = { group_size: GROUP, bits: GATE_BITS };
  return {
    architectures: ['Qwen3MoeForCausalLM'],
    model_type: 'qwen3_moe',
    hidden_act: 'silu',
    hidden_size: s.hidden,
    intermediate_size: 6144,
    moe_intermediate_size: s.moeFfn,
    num_experts: s.experts,
    num_experts_per_tok: s.topK,
    norm_topk_prob: true,
    decoder_sparse_step: 1,
    mlp_only_layers: [],
    max_position_embeddings: 262144,
    num_attention_heads: s.heads,
    num_hidden_layers: s.layers,
    num_key_value_heads: s.kvHeads,
    head_dim: s.headDim,
    rms_norm_eps: 1e-6,
    rope_theta: 5_000_000,
    tie_word_embeddings: false,
    vocab_size: s.vocab,
    quantization,
    quantization_config: { ...quantization },
  };
}

/** The cached checkpoint for `shape` under `root`, generated first when missing. */
export function ensureMoeCheckpoint(root: string, shape: MoeShape): { dir: string; bytes: number; cached: boolean } {
  const dir = join(root, `qwen3moe-h${shape.hidden}-e${shape.experts}-l${shape.layers}-${BITS}bit`);
  return ensureCheckpoint(dir, FORMAT_VERSION, () => moeConfig(shape), moeTensors(shape));
}

/** The checkpoint of the 30B-A3B shape with `layers` decoder layers, for `bench:cuda` (its BenchCheckpoint). */
export function moeBenchCheckpoint(root: string, layers: number): { dir: string; tensorBytes: number; cached: boolean; decodeBytesPerToken: number } {
  const shape = { ...QWEN3_VL_30B_A3B, layers };
  const ck = ensureMoeCheckpoint(root, shape);
  const per4 = BITS / 8 + 4 / GROUP;  // a 4-bit weight and its share of a bf16 scale and bias
  const q = shape.heads * shape.headDim;
  const kv = shape.kvHeads * shape.headDim;
  const attention = (2 * q * shape.hidden + 2 * kv * shape.hidden) * per4;
  const router = shape.experts * shape.hidden * (GATE_BITS / 8 + 4 / GROUP);
  // A token reads its layers' attention, router and top-k experts, then the head (its embedding row is negligible).
  const decodeBytesPerToken = layers * (attention + router + shape.topK * expertPassBytes(shape)) + shape.vocab * shape.hidden * per4;
  return { dir: ck.dir, tensorBytes: ck.bytes, cached: ck.cached, decodeBytesPerToken };
}

/** Bytes one pass over one expert reads: gate, up and down 4-bit codes plus a bf16 scale and bias per group. */
export function expertPassBytes(s: MoeShape): number {
  return 3 * s.moeFfn * s.hidden * (BITS / 8 + 4 / GROUP);
}

export interface DecodeFigure {
  concurrency: number;
  steps: number;
  tokS: number; // tokens per second over all rows
  msPerStep: number;
  expertBytesPerStep: number; // mean over decode steps
  expertRunsPerStep: number; // expert passes per step (all layers)
  routedRowsPerStep: number; // token x top-k assignments per step (all layers)
}

/** Prefills `concurrency` prompts in one step, then decodes `steps` steps of all rows together. */
export async function measureDecode(model: NativeModel, concurrency: number, steps: number, prompt: number): Promise<DecodeFigure> {
  let bytes = 0;
  let runs = 0;
  let routed = 0;
  const ms = await timeDecode(model, {
    concurrency,
    steps,
    prompt,
    idPrefix: 'moe',
    promptToken: (i, k, vocab) => (i * 7919 + k * 104729 + 1) % vocab,
    onTimings: (t, decode) => {
      if (!t.moe) throw new Error('the model reported no MoE counters');
      if (!decode) return;
      bytes += t.moe.expertBytes;
      runs += t.moe.expertRuns;
      routed += t.moe.routedRows;
    },
  });
  return {
    concurrency,
    steps,
    tokS: (concurrency * steps * 1000) / ms,
    msPerStep: ms / steps,
    expertBytesPerStep: bytes / steps,
    expertRunsPerStep: runs / steps,
    routedRowsPerStep: routed / steps,
  };
}

const USAGE = `usage: npm run bench:moe -- [options]
  --layers N       decoder layers of the 48 (default 20: ~7.2 GB at 4-bit)
  --steps N        decode steps per concurrency (default 8)
  --prompt N       prompt tokens per sequence (default 16)
  --threads N      threads (default 2)
  --precision P    fast | exact (default fast)
  --dir DIR        checkpoint cache (default $RAPID_BENCH_DIR or <tmpdir>/rapid-bench)`;

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: { layers: { type: 'string' }, ...DECODE_BENCH_ARGS },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const precision = precisionOption(values.precision);
  const shape = { ...QWEN3_VL_30B_A3B, layers: intOption(values.layers, 'layers', 20) };
  const steps = intOption(values.steps, 'steps', 8);
  const prompt = intOption(values.prompt, 'prompt', 16);
  const t0 = performance.now();
  const ck = ensureMoeCheckpoint(values.dir ?? defaultBenchDir(), shape);
  reportCheckpoint(ck, t0);
  const figures = await measureAtConcurrencies(ck.dir, { threads: intOption(values.threads, 'threads', 2), precision }, steps, (model, c, n) =>
    measureDecode(model, c, n, prompt),
  );
  const perExpert = expertPassBytes(shape);
  process.stdout.write(`Qwen3-VL-30B-A3B text shape, random 4-bit weights, ${shape.layers} of 48 layers, ${precision}, ${prompt}-token prompts\n`);
  for (const f of figures)
    process.stdout.write(
      `  concurrency ${f.concurrency}: ${f.tokS.toFixed(2)} tok/s (${f.msPerStep.toFixed(0)} ms/step), expert bytes/step ${(f.expertBytesPerStep / 2 ** 20).toFixed(1)} MiB, ` +
        `expert passes/step ${f.expertRunsPerStep.toFixed(0)} for ${f.routedRowsPerStep.toFixed(0)} routed rows\n`,
    );
  const [one, eight] = figures as [DecodeFigure, DecodeFigure];
  process.stdout.write(
    `  one expert pass = ${(perExpert / 2 ** 20).toFixed(2)} MiB; 8 rows read ${(eight.expertBytesPerStep / one.expertBytesPerStep).toFixed(2)}x the expert bytes of 1 row ` +
      `(reading per token would be 8.00x; the cap is ${shape.experts} experts = ${((shape.experts * shape.layers * perExpert) / 2 ** 30).toFixed(2)} GiB)\n`,
  );
  return 0;
}
