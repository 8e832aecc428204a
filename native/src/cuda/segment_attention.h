// Bidirectional segment attention of the vision towers on the GPU: token i attends to every token of its segment
// [cu[s], cu[s+1]) (Qwen windows, full attention per frame, one image). Flash-style (online softmax over key tiles),
// so memory is the output only, for any segment length. Fast: bf16 q/k/v and probabilities on tensor cores, f32
// softmax and sums; Exact: f32 throughout. Deterministic: fixed reduction trees, no atomics.
#pragma once
#include <cuda_runtime.h>
#include <cstdint>
#include <vector>

namespace rapid::cuda {

// One block's work: queries [q0, min(q0 + kSegQueryTile, end)) of the segment [start, end).
struct SegTile {
  int32_t q0, start, end, pad;
};
constexpr int kSegQueryTile = 64;

// The tiles of segments `cu` (boundaries in tokens, cu.front() == 0, non-decreasing; empty segments skipped).
std::vector<SegTile> seg_tiles(const std::vector<int64_t>& cu);

// q row t, head h at q + t*ldq + h*head_dim; k, v rows at k/v + t*ldkv + (h / (heads / kv_heads))*head_dim (GQA);
// out row t, head h at out + t*ldo + h*head_dim (not overlapping q/k/v); all f32. tiles: device copy of
// seg_tiles(cu) [n_tiles]. out = softmax(q·kᵀ * scale) · v per head. head_dim 1..128 (else throws).
void segment_attention(const float* q, int64_t ldq, const float* k, const float* v, int64_t ldkv, float* out,
                       int64_t ldo, int heads, int kv_heads, int head_dim, float scale, const SegTile* tiles,
                       int n_tiles, bool fast, cudaStream_t s);

}  // namespace rapid::cuda
