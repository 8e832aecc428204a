// Host-callable launchers of the CUDA backend's kernels. Every pointer argument is device memory
// unless it says otherwise; every launcher enqueues on `s` and returns without synchronizing, so a
// whole forward can be captured into a CUDA graph. Tensors are row-major f32 unless stated.
// Batch invariance: per token (row) every kernel's arithmetic, including its reduction order, is
// fixed and independent of how many other rows share the launch.
#pragma once
#include <cuda_runtime.h>
#include <cstdint>
#include <functional>
#include <vector>
#include "kv/kv_dtype.h"
#include "sampling/sampler.h"
#include "tensor/weight.h"

namespace rapid::cuda {

// Throws std::runtime_error("<what>: <cudaGetErrorString>") unless e == cudaSuccess.
void check(cudaError_t e, const char* what);

// A Weight whose bytes live in device memory, in exactly the host Weight's layout:
// Dense: dtype [out, in]; Affine (MLX): data uint32 [out, in*bits/32], scales/biases dtype [out, in/group].
// tiled: the Affine codes are in the tensor-core path's tiled layout instead (cuda/tiled_codes.h); only Fast reads them.
struct DevWeight {
  WeightKind kind = WeightKind::Dense;
  DType dtype = DType::F32;  // Dense: element type (F32/F16/BF16); Affine: scales/biases type
  int64_t out = 0, in = 0;
  int bits = 0, group = 0;   // Affine: bits 4 or 8, group 32/64/128
  const void* data = nullptr;
  const void* scales = nullptr;
  const void* biases = nullptr;
  bool tiled = false;  // codes (tile_codes) and scales/biases (tile_scales; scales == biases) in the tiled layout
  int rope_rows = 0;  // head_dim when the rows are in rope_pair_rows order (cuda/rope_rows.h), else 0
};

// W's layout with its bytes at the given device addresses (scales/biases null for a dense W).
inline DevWeight device_view(const Weight& w, const void* data, const void* scales, const void* biases) {
  DevWeight d;
  d.kind = w.kind;
  d.dtype = w.dtype;
  d.out = w.out;
  d.in = w.in;
  d.bits = w.bits;
  d.group = w.group;
  d.data = data;
  d.scales = scales;
  d.biases = biases;
  return d;
}

// One output of a fused matmul launch: y[n, out] (= or +=) x[n, in] · Wᵀ (+ bias).
struct MatmulJob {
  DevWeight w;
  const float* bias = nullptr;  // [out] or null
  float* y = nullptr;           // [n, ldy]
  int64_t ldy = 0;
  bool accumulate = false;      // y += x·Wᵀ (+bias): the residual add fused into the epilogue
  // RoPE epilogue (Fast, with a RopeOut): 1 query (rotate-half, y [n, ldy] at the unpermuted rows), 2 key (rotated
  // into the KV pool: y row slot[t]), 3 value (into the pool as is); 0 none.
  int rope = 0;
  // With accumulate: no write to y comes from the launch just before this one (only from earlier ones, complete when
  // this one starts), so a one-row bulk launch reads y before waiting on its predecessor. Scheduling only.
  bool y_settled = false;
};

// What a RoPE epilogue needs: the step's tables cos/sin [n, head_dim / 2] and KV slots [n] (< 0: not stored), and
// the pool's element type: F32, F16 or BF16 (the key and value jobs' y is then the pool's K or V codes, ldy elements
// a slot). int8 is not written by an epilogue (a code needs its whole head row's scale): rope_kv_write stores it.
struct RopeOut {
  const float* cos = nullptr;
  const float* sin = nullptr;
  const int32_t* slot = nullptr;
  int head_dim = 0;
  KvDtype kv = KvDtype::F32;
};


// w's device form for matmul, as the decoders upload it: with `tiled` (Fast and mma_format_supported) the codes and
// scales/biases in tile_codes / tile_scales order (cuda/tiled_codes.h), else the stored bytes. copy(host, bytes)
// returns a device copy of those bytes (the caller owns and frees it).
DevWeight upload_for_matmul(const Weight& w, bool tiled, const std::function<void*(const void*, size_t)>& copy);

// The arithmetic of a matmul. Exact: f32 FMA throughout (matches the CPU's Exact to ~1e-6). Fast: MLX affine
// 4/8-bit weights run on tensor cores with x rounded to bf16 (weights exact, f32 accumulation; the CPU's Fast
// rounds x to int8 blocks); dense weights run Exact in both. Both are bitwise batch invariant.
enum class MathMode { Exact, Fast };

// Fast launches of more than one row first convert x to bf16 mma fragments in a per-stream buffer. Reserve it for
// the largest launch (rows x in) before capturing a graph (it only grows outside captures; a launch during a
// capture that needs more throws); release it with the stream.
void matmul_reserve(cudaStream_t s, int64_t rows, int64_t in);
void matmul_release(cudaStream_t s);

// An input RMSNorm fused into a matmul: the launch reads rms_norm(x)·w (bitwise what rms_norm writes) instead
// of x, saving the norm's launch and its output. w [in] f32.
struct RowNorm {
  const float* w = nullptr;
  float eps = 0.0f;
};

// Whether q/k/v weights and a head_dim can take the RoPE epilogue (Fast, tensor cores, full rotation).
bool can_rope_epilogue(const DevWeight& q, const DevWeight& k, const DevWeight& v, int head_dim, int rot_dim, MathMode mode);
// Whether matmul(x, ldx, n, jobs, n_jobs, s, mode, &norm) runs with the norm fused (Fast, every job affine in one
// format); otherwise the caller runs rms_norm first and passes no norm.
bool can_fuse_norm(const MatmulJob* jobs, int n_jobs, int64_t n, MathMode mode);
// The same for matmul_glu(x, n, gate, up, ...).
bool can_fuse_glu_norm(const DevWeight& gate, const DevWeight& up, int64_t n, MathMode mode);

// A one-token attention launch's output left as its key partitions' partials (paged_attention with `defer`), for the
// next matmul to merge as it stages its input (matmul with `partials`): the bits the attention's own merge would have
// written, without its partition counter and last-block merge in the launch chain. o == nullptr: nothing deferred.
struct AttnPartials {
  const float* o = nullptr;        // [n_heads, 32, head_dim] unnormalized partial outputs
  const float* ml = nullptr;       // [n_heads, 32, 2] each partition's (max, sum) of its scores
  const int32_t* q_pos = nullptr;  // the token's position and key end (device: the launch's AttnTokens)
  const int32_t* kv_end = nullptr;
  int part_keys = 0, window = 0, n_heads = 0, head_dim = 0;
};

// Whether matmul merges partials of `head_dim`-wide heads while it stages x (the bulk kernel: sm_90 and tiled weights;
// one row, and what can_fuse_norm needs). Where it does not, matmul still takes partials (one row, as can_fuse_norm),
// merging them into x by a launch of their own first.
bool can_merge_partials(const MatmulJob* jobs, int n_jobs, int64_t n, MathMode mode, int head_dim);

// Up to 4 weights that share x [n, ldx] (q/k/v; gate/up) in ONE launch; all jobs have the same `in`.
// norm: only where can_fuse_norm says so (throws otherwise).
// rope: jobs with a RoPE epilogue (one tensor-core launch; weights with rope_rows == rope->head_dim for 1 and 2).
// partials (one row, no norm, head_dim a multiple of 8; x the attention's out, written where the token has one partition and, on paths that do
// not merge while staging, by attention_merge first): x is the merge of these partials.
void matmul(const float* x, int64_t ldx, int64_t n, const MatmulJob* jobs, int n_jobs, cudaStream_t s,
            MathMode mode = MathMode::Exact, const RowNorm* norm = nullptr, const RopeOut* rope = nullptr,
            const AttnPartials* partials = nullptr);

// out[n, ffn] = act(x·Gateᵀ) * (x·Upᵀ); act 0 = silu, 1 = gelu_tanh (PyTorch formulas). One launch.
// norm: only where can_fuse_glu_norm says so (throws otherwise).
void matmul_glu(const float* x, int64_t n, const DevWeight& gate, const DevWeight& up, int act, float* out,
                cudaStream_t s, MathMode mode = MathMode::Exact, const RowNorm* norm = nullptr);

// gate[i] = act(gate[i]) * up[i] over n values (the GLU product when gate and up are stored in different
// formats and run as two matmuls); same formulas as matmul_glu.
void glu(float* gate, const float* up, int64_t n, int act, cudaStream_t s);

// y[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * w over rows of `dim`; x and y may alias. w [dim] f32.
void rms_norm(const float* x, float* y, int64_t rows, int64_t dim, const float* w, float eps, cudaStream_t s);

// h[r] += o[r]; then xn[r] = rms_norm(h[r]) (the residual add and the next sub-block's norm in one pass).
void add_rms_norm(float* h, const float* o, float* xn, int64_t rows, int64_t dim, const float* w, float eps,
                  cudaStream_t s);

// out[i, :] = dequant(E[ids[i], :]) * scale, out [n, E.in]. ids are valid (checked on the host).
void embed_rows(const DevWeight& E, const int32_t* ids, int64_t n, float scale, float* out, cudaStream_t s);

// Rotate-half RoPE on the leading 2*half dims of every head: x [n, heads, head_dim];
// cos/sin [n, half] (computed on the host per step). q_scale [n] or null: x *= q_scale[t] after RoPE.
void rope(float* x, int64_t n, int heads, int head_dim, int half, const float* cos, const float* sin,
          const float* q_scale, cudaStream_t s);

// One layer's KV cache in device memory, in the CPU pool's layout (kv/kv_pool.h) and bytes: K and V codes, each
// [slots, n_kv_heads, head_dim] of `dtype` (slot = block * block_size + offset), and for int8 the K and V scales, each
// [slots, n_kv_heads] f16 (absmax / 127 of the (token, head) row). Codes 16-byte aligned, scales 4-byte aligned.
struct KvCache {
  KvDtype dtype = KvDtype::F32;
  void* k = nullptr;
  void* v = nullptr;
  uint16_t* ks = nullptr;  // int8 only
  uint16_t* vs = nullptr;
};

// rope(q, n_heads, ..., q_scale) + rope(k, n_kv_heads, ...) + kv_write(k, v) in one launch, with the same
// arithmetic; the rotated k goes only to the pool (k itself is left as it was), stored as kv_write stores.
void rope_kv_write(float* q, const float* k, const float* v, int64_t n, int n_heads, int n_kv_heads, int head_dim,
                   int half, const float* cos, const float* sin, const float* q_scale, const int32_t* slot,
                   const KvCache& kv, cudaStream_t s);

// Writes k/v [n, n_kv_heads, head_dim] f32 into pool slots slot[t] (< 0: not stored), converted to the pool's type
// with the bytes kv::store_slot writes on the CPU.
void kv_write(const float* k, const float* v, int64_t n, const int32_t* slot, const KvCache& kv, int n_kv_heads,
              int head_dim, cudaStream_t s);

// Per-token attention metadata, all [T] except block_tables (the step's tables concatenated).
struct AttnTokens {
  const int32_t* table_off = nullptr;  // where the token's sequence's block table starts in block_tables
  const int32_t* q_pos = nullptr;      // the token's index in its sequence (context_len + i)
  const int32_t* kv_end = nullptr;     // keys [0, kv_end) are visible: q_pos + 1, or a bidirectional span's end
  const int32_t* block_tables = nullptr;
  int block_size = 16;
  // The most keys any token of the launch sees (the decoder: the step's keys_bound), 0 = unknown. Only shapes the
  // launch (partition blocks, pipeline depth); a token past it still gets its exact result. A captured graph
  // keeps the launch shape it saw.
  int64_t max_keys = 0;
};

// q [T, n_heads, head_dim] -> out [T, n_heads, head_dim]: softmax(scale · q·kᵀ) · v over the token's
// visible keys (window > 0 keeps keys k > q_pos - window), GQA (head h reads kv head h / (n_heads/n_kv)).
// Online softmax in f32; no score matrix is materialized. Keys and values of any KvCache type are widened to f32 as
// they are read (exactly the CPU's kv::load_row values), so attention over a 16-bit or int8 pool is bitwise attention
// over an f32 pool holding the widened values.
// defer (T = 1): a token in several key partitions leaves them unmerged, described in *defer (out still receives a
// token in one partition); *defer is empty when the launch does not split (RAPID_CUDA_ATTN_DEFER=0: never deferred).
void paged_attention(const float* q, float* out, int64_t T, const AttnTokens& tok, const KvCache& kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale, int window,
                     cudaStream_t s, AttnPartials* defer = nullptr);

// Merges deferred partials into out [n_heads, head_dim] (nothing for a token in one partition, which the attention
// wrote itself): bitwise what paged_attention would have written.
void attention_merge(const AttnPartials& partials, float* out, cudaStream_t s);

// paged_attention's split-K path: a token with more keys than one partition (RAPID_CUDA_ATTN_SPLIT, read once:
// unset or "1" = 32 keys, "0" = off, N = N keys) is split into at most 32 partitions over extra blocks,
// merged in partition order by the block that finishes the token's last partition (no second launch), or, given
// `defer`, by the next matmul as it stages its input (AttnPartials). A
// token's partitions depend only on its own key count, the partition size and the layer's window, so results
// stay batch invariant. Partial results go to a 64 MiB scratch per (device, stream), allocated on the
// stream's first split launch (allowed during graph capture) and kept until paged_attention_release.

// Overrides RAPID_CUDA_ATTN_SPLIT: 0 = split off, N = N keys per partition (a positive multiple of 32),
// -1 = back to the environment / default. Results depend on it: set it before any launch (tests, tuning).
void set_attention_split(int partition_keys);

// Allocates the split-K scratch of stream `s` now (otherwise done by the first split launch on `s`).
void paged_attention_reserve(cudaStream_t s);

// Frees the split-K scratch of stream `s` (synchronizes the device). Call after the last launch on `s`
// and after destroying every graph captured from it, before destroying the stream.
void paged_attention_release(cudaStream_t s);

// x[i] = cap * tanh(x[i] / cap) over n values.
void softcap(float* x, int64_t n, float cap, cudaStream_t s);

// dst[0, bytes) = src[0, bytes) by a kernel on s (a launch like the others, so the kernels around it stay chained):
// either side may be page-locked host memory (cudaHostAlloc, addressable by the device under unified addressing), for
// a step's small uploads and downloads. `src_ready`: nothing earlier on s writes src (host data), so the kernel reads
// it before waiting on the previous launch. A host dst holds the bytes once an event recorded after it has fired.
void copy_bytes(void* dst, const void* src, size_t bytes, bool src_ready, cudaStream_t s);

// dst[rows[i], :] = src[i, :] (copy) or += (add), rows of width `dim`: image embeddings spliced into the
// residual stream, DeepStack features added to it.
void scatter_rows(const float* src, const int32_t* rows, int64_t n, int64_t dim, float* dst, bool add, cudaStream_t s);

// dst[i, :] = src[rows[i], :] for i < n (the logit rows' hidden states before the head).
void gather_rows(const float* src, const int32_t* rows, int64_t n, int64_t dim, float* dst, cudaStream_t s);

// tokens[r] = argmax over the allowed ids of logits[r, :] (lowest id on ties), r < m. mask_of[r] >= 0
// selects bitmask row masks[mask_of[r] * words ...] (bit set = allowed, words = ceil(vocab/32));
// -1 = unconstrained. A row with no allowed finite logit gets tokens[r] = -1.
void argmax_rows(const float* logits, int64_t m, int64_t vocab, const uint32_t* masks, const int32_t* mask_of,
                 int32_t* tokens, cudaStream_t s);

// One row of sample_rows, built on the host from the row's SampleParams.
struct SampleRow {
  int64_t logit_row = 0;        // the row of logits [m, vocab]
  double u = 0;                 // the row's uniform draw in [0, 1): uniform_draw(seed, counter)
  float inv_temperature = 0;    // 1 / temperature; 0 = greedy (the argmax after the mask and penalties)
  float top_p = 1;              // 1 = off
  float min_p = 0;              // 0 = off
  float repetition = 1;         // the repetition penalty of the entries that carry it
  int32_t top_k = 0;            // 0 = off
  int32_t mask = -1;            // row of masks (bit set = allowed), or -1
  int32_t pen_begin = 0, pen_count = 0;  // the row's entries of penalties
  int32_t scratch = -1;         // row of scratch [*, vocab] the penalized logits go to, when pen_count > 0
};

// The SampleRow of logit row `logit_row` under p (mask: its row of the masks, or -1). p's penalties are appended
// to `penalties`; a row with any takes scratch row `scratch_rows`, which then counts it. Host code.
SampleRow sample_row_of(const SampleParams& p, int64_t logit_row, int32_t mask, std::vector<TokenPenalty>& penalties,
                        int32_t& scratch_rows);

// tokens[i] = the token sampling/sampler.cpp's sample_token picks for rows[i] (bitmask, penalties, temperature,
// top-k, top-p, min-p, the draw u), up to the rounding of the exponentials and of the fixed-point weights; -1
// when no allowed finite logit. One block, or a cluster of up to 8 on sm_90, per row, with exact integer sums: a
// row's token never depends on the others, nor on how many blocks took it. rows [n],
// masks [*, ceil(vocab/32)], penalties [*] (token ids < vocab, distinct within a row), scratch [*, vocab]:
// device memory. Throws if vocab exceeds 524288.
void sample_rows(const float* logits, int64_t vocab, const SampleRow* rows, int64_t n, const uint32_t* masks,
                 const TokenPenalty* penalties, float* scratch, int32_t* tokens, cudaStream_t s);

// argmax_rows splits a row over several blocks (vocab > 4096) and merges their partial results through a small
// scratch per (device, stream), allocated on the stream's first such launch (allowed during graph capture) and
// kept until argmax_release. argmax_reserve allocates it now; argmax_release frees it (synchronizes the device):
// call it after the last launch on `s` and after destroying every graph captured from it.
void argmax_reserve(cudaStream_t s);
void argmax_release(cudaStream_t s);

}  // namespace rapid::cuda
