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
  bitmask?: Int32Array; // grammar: ceil(vocab/32) words, bit i of word i>>5 set = token allowed
}

export interface NativeStepRow {
  requestId: string;
  tokens: Int32Array; // new tokens this step: a prefill chunk, or 1 for decode
  positions: Int32Array; // [n] (1-D RoPE) or [3*n] axis-major for mRoPE
  blockTable: Int32Array; // KV blocks of this sequence, in order
  contextLen: number; // tokens already in KV before this step
  sample?: NativeSampleParams;
  wantLogits?: boolean; // tests/diagnostics: return raw logits for every token of this row
}

export interface NativeStepPlan {
  rows: NativeStepRow[];
}

export interface NativeTopLogprob {
  token: number;
  logprob: number;
}

export interface NativeStepRowResult {
  requestId: string;
  token?: number;
  logprob?: number;
  topLogprobs?: NativeTopLogprob[];
  logits?: Float32Array; // [tokens.length * vocab] when wantLogits
  error?: string;
}

export interface NativeStepResult {
  rows: NativeStepRowResult[];
  timings: { forwardMs: number; sampleMs: number; tokens: number };
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
  weightBytes: number; // bytes of mapped tensors
  quantization: string; // e.g. "none", "affine 4-bit g64", "mixed"
  precision: 'exact' | 'fast';
  threads: number;
  mropeSections?: number[];
}

export interface NativeLoadOptions {
  threads?: number; // default: hardware cores
  kvCacheBytes?: number; // default: a share of free RAM, capped
  blockSize?: number; // default 16
  precision?: 'exact' | 'fast'; // fast (default): int8 activations for quantized matmuls
}

export interface NativeModel {
  info(): NativeModelInfo;
  /** Runs one step on the native thread; rejects only if the whole step failed. */
  step(plan: NativeStepPlan): Promise<NativeStepResult>;
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
  kernel: string; // which matmul kernel set is in use, e.g. "avx2" | "generic" | "neon"
  threads: number; // default pool size
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
}
