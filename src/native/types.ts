// The entire surface of the native addon, typed: the one place where TypeScript meets C++.
// The step contract (../../ARCHITECTURE) crosses here as plain data; rows are keyed by requestId.

/** Sampling parameters of one row; present only when that row emits a token this step. */
export interface NativeSampleParams {
  temperature: number; // 0 = greedy (argmax)
  topP: number; // 1 = off
  topK: number; // 0 = off
  minP: number; // 0 = off
  repetitionPenalty: number; // 1 = off; HF semantics over promptTokens + outputTokens
  presencePenalty: number; // 0 = off; OpenAI semantics over outputTokens
  frequencyPenalty: number; // 0 = off; OpenAI semantics over outputTokens
  seed: number; // integer in [0, 2^53); with counter, fully determines the random draw
  counter: number; // index of the token being sampled within this request (0 for the first)
  logprobs: number; // -1: none; 0: logprob of the sampled token; k > 0: plus top-k alternatives
  promptTokens?: Int32Array; // only needed when repetitionPenalty != 1
  outputTokens?: Int32Array; // tokens generated so far (penalties)
  /** grammar: ceil(vocab/32) words, bit i of word i>>5 set = token allowed; 'pending': computed
   *  while the forward runs and handed in with NativeModel.supplyMasks (plan.pendingMasks required). */
  bitmask?: Int32Array | 'pending';
  /** OpenAI logit_bias, sparse: values[i] is added to the logit of tokens[i] (strictly ascending ids) after the
   *  penalties, before greedy or temperature; logprobs report the biased distribution. */
  logitBias?: { tokens: Int32Array; values: Float32Array };
}

/** Image embeddings spliced into a row: row token `offsets[i]` takes embedding row i instead of its token's. */
export interface NativeRowEmbeds {
  offsets: Int32Array; // [m] strictly increasing indices into the row's tokens
  data: Float32Array; // [m, hiddenSize]
  deepstack?: Float32Array; // [vision.deepstackLayers, m, hiddenSize] (Qwen3-VL): added after decoder layer k
}

export interface NativeStepRow {
  requestId: string;
  tokens: Int32Array; // new tokens this step: a prefill chunk, or 1 for decode
  positions: Int32Array; // [n] (1-D RoPE) or [3*n] axis-major for mRoPE
  blockTable: Int32Array; // KV blocks of this sequence, in order
  contextLen: number; // tokens already in KV before this step
  sample?: NativeSampleParams;
  wantLogits?: boolean; // tests/diagnostics: return raw logits for every token of this row
  /** Speculative decoding: the row's last `draft` tokens are a draft, verified in this forward (sampled at
   *  each of the draft + 1 last positions); needs sample, no logprobs, no bitmask, no wantLogits. */
  draft?: number;
  /** Pooling (embeddings): return the hidden state after the final norm of this row's last token
   *  (NativeStepRowResult.hidden) instead of sampling; such a row has no sample and no wantLogits. */
  wantHidden?: boolean;
  embeds?: NativeRowEmbeds;
  /** [2k] pairs [start, end) of row token offsets whose tokens attend to each other both ways
   * (Gemma 3 image blocks during prefill); the engine never splits such a block across steps. */
  bidirectional?: Int32Array;
}

export interface NativeStepPlan {
  rows: NativeStepRow[];
  /** Required when a row's bitmask is 'pending': the id supplyMasks names, and how long sampling
   *  waits for the masks after the forward (then only the pending rows fail). */
  pendingMasks?: { stepId: number; timeoutMs: number };
}

/** One pending row's late mask; null withholds it (the request ended): that row is not sampled. */
export interface NativeLateMask {
  requestId: string;
  bitmask: Int32Array | null;
}

export interface NativeTopLogprob {
  token: number;
  logprob: number;
}

export interface NativeStepRowResult {
  requestId: string;
  token?: number;
  /** Draft rows: how many draft tokens were kept; `token` is the one sampled after them. */
  accepted?: number;
  logprob?: number;
  topLogprobs?: NativeTopLogprob[];
  logits?: Float32Array; // [tokens.length * vocab] when wantLogits
  hidden?: Float32Array; // [hiddenSize] when wantHidden
  error?: string;
}

/** Expert work of one step's forward (MoE models only). */
export interface NativeMoeStepStats {
  expertRuns: number; // (layer, expert) weight passes executed: one per active expert per layer
  activeExperts: number; // distinct (layer, expert) pairs named by the routing
  routedRows: number; // token x top_k assignments, summed over MoE layers
  expertBytes: number; // expert weight bytes the matmuls read
}

export interface NativeStepResult {
  rows: NativeStepRowResult[];
  /** maskWaitMs: how long sampling waited for pending masks after the forward (0 when none). */
  /** ahead: the GPU had started this step's forward before it was asked for (CUDA; see cuda_decoder.cu). */
  timings: { forwardMs: number; sampleMs: number; tokens: number; dispatches?: number; maskWaitMs?: number; ahead?: boolean; moe?: NativeMoeStepStats };
}

export interface NativeModelInfo {
  architecture: string; // config.json architectures[0]
  family: string; // registry name: qwen2 | qwen3 | llama | gemma3 | ...
  vocabSize: number;
  hiddenSize: number;
  numLayers: number;
  contextLength: number; // max_position_embeddings
  blockSize: number; // tokens per KV block
  numBlocks: number; // KV pool size in blocks
  kvBytes: number; // bytes of the KV pool
  kvCacheDtype: KvCacheDtype; // what the pool stores (int8: plus one f16 scale per token and KV head)
  weightBytes: number; // bytes of mapped tensors
  quantization: string; // e.g. "none", "affine 4-bit g64", "mixed"
  precision: 'exact' | 'fast';
  threads: number;
  device: 'cpu' | 'cuda'; // where the forward runs
  deviceName: string; // e.g. "NVIDIA H200"; on the CPU, what the runtime calls it
  deviceNote?: string; // why a CUDA build runs this model on the CPU (device auto)
  embeddingOnly?: boolean; // an embedding model (Qwen3Model): no LM head; rows take wantHidden, never sample
  mropeSections?: number[]; // present iff positions are [3, n] (mRoPE)
  vision?: NativeVisionInfo; // present iff the checkpoint has a vision tower (loaded with the text model)
}

export interface NativeVisionInfo {
  family: string; // qwen2_5_vl | qwen3_vl | gemma3 | gemma4 | ...
  deepstackLayers: number; // Qwen3-VL DeepStack features per image token; 0 otherwise
  weightBytes: number; // bytes of the vision tower + projector tensors
  quantization: string; // e.g. "none" (bf16 as mlx-community ships it) or "affine 4-bit g64"
}

/** One preprocessed image, exactly as the Hugging Face processor's pixel_values for that image. */
export interface NativeImageInput {
  /** Qwen2.5-VL / Qwen3-VL: [t*h*w, C*temporal*patch*patch] patch rows in the processor's order;
   *  Gemma 3: [3, H, W] channel-major, already rescaled and normalized;
   *  Gemma 4: [h*w, 3*patch*patch] the real patch rows in (py, px, c) order, no padding rows. */
  pixels: Float32Array;
  /** Qwen: image_grid_thw [t, h, w] in patches; Gemma 3 / Gemma 4: [1, H/patch, W/patch]. */
  grid: [number, number, number];
}

export interface NativeImageEmbedding {
  tokens: number; // image tokens this image expands to (after merge/pooling)
  embeddings: Float32Array; // [tokens, hiddenSize]: what replaces the image placeholder tokens
  deepstack?: Float32Array; // [vision.deepstackLayers, tokens, hiddenSize] (Qwen3-VL)
  ms: number; // encoder wall time
}

/** The KV cache's element type (docs/kv-cache.md); unset: f32 under exact precision, else the device's default. */
export type KvCacheDtype = 'f32' | 'f16' | 'bf16' | 'int8';

/** auto: CUDA when the binary has it, a device is present and the family is supported, else CPU. */
export type NativeDevice = 'auto' | 'cpu' | 'cuda';

/** Which build of the addon: the CPU-only default, or the one linked with the CUDA runtime. */
export type NativeVariant = 'cpu' | 'cuda';

export interface NativeLoadOptions {
  threads?: number; // default: hardware cores
  kvCacheBytes?: number; // default: a share of free RAM, capped
  blockSize?: number; // default 16
  precision?: 'exact' | 'fast'; // fast (default): rounded activations for quantized matmuls (int8 CPU, bf16 CUDA)
  device?: NativeDevice; // default auto; cuda throws (saying why) when it cannot run there
  kvCacheDtype?: KvCacheDtype; // default: the native side's default_kv_dtype (f32 exact, f16 CPU fast)
}

export interface NativeModel {
  info(): NativeModelInfo;
  /** Runs one step on the native thread; rejects only if the whole step failed. */
  step(plan: NativeStepPlan): Promise<NativeStepResult>;
  /** Hands the in-flight step (plan.pendingMasks.stepId) the masks of its 'pending' rows, once, all
   *  at once. False when that step no longer waits (timed out, finished, another step): nothing is
   *  applied. Optional for stand-ins: without it the engine puts masks in the plan. */
  supplyMasks?(stepId: number, masks: NativeLateMask[]): boolean;
  /** Runs the vision tower + projector on the native thread. Shares the one in-flight slot with
   *  step(): the engine awaits one before starting the other. Rejects with a message on bad input
   *  or when the model has no vision tower. */
  encodeImage(image: NativeImageInput): Promise<NativeImageEmbedding>;
  /** Several images in batched forwards (the same bits per image as encodeImage), one embedding each, in
   *  order; rejects as a whole if any image is bad. Optional for stand-ins: the engine then encodes one at a time. */
  encodeImages?(images: NativeImageInput[]): Promise<NativeImageEmbedding[]>;
  close(): void;
}

export interface NativeTensorInfo {
  name: string;
  dtype: string;
  shape: number[];
  file: string;
}

export interface NativeSystemInfo {
  simd: string[]; // e.g. ["avx2", "fma", "f16c"] detected at run time
  kernel: string; // which matmul kernel set is in use: "avx512-vnni" | "avx2" | "neon-dotprod" | "neon" | "scalar"
  decodeKernels?: string; // how decode runs its matmuls (fusions, row split, prefetch)
  threads: number; // default pool size
  cuda: NativeCudaInfo;
}

export interface NativeCudaDevice {
  index: number;
  name: string; // e.g. "NVIDIA H200"
  totalBytes: number;
  freeBytes: number;
  computeCapability: string; // e.g. "9.0"
}

/** What the CUDA runtime reports; compiled false (and no devices) in the CPU-only build. */
export interface NativeCudaInfo {
  compiled: boolean;
  devices: NativeCudaDevice[];
  driverVersion?: string;
  runtimeVersion?: string;
  error?: string; // why no device is usable (no driver, driver too old, ...)
}

export interface NativeConvertOptions {
  bits: number;
  groupSize: number;
}

export interface NativeAddon {
  abi: number; // must equal NATIVE_ABI in binding.ts; bump both when this surface changes
  version: string;
  loadModel(dir: string, options: NativeLoadOptions): NativeModel;
  inspectCheckpoint(dir: string): NativeTensorInfo[];
  convert(src: string, dst: string, options: NativeConvertOptions): void;
  systemInfo(): NativeSystemInfo;
  /** Measures sustained read bandwidth in bytes/s (bench roofline). */
  memoryBandwidth(bytes: number, threads: number): number;
  /** config.json `architectures` values the native registry loads, in registry order. */
  architectures(): string[];
}
