// Bidirectional segment attention of the vision towers on the GPU: token i attends to every token of its segment
// [cu[s], cu[s+1]) (Qwen windows, full attention per frame, one image). Flash-style (online softmax over key tiles),
// so memory is the output only, for any segment length. Fast: bf16 q/k/v and probabilities on tensor cores, f32
// softmax and sums; Exact: f32 throughout. Deterministic: fixed reduction trees, no atomics.
#pragma once
#include <cuda_runtime.h>
#include <cstdint>
#include <vector>

namespace rapid::cuda {

// One block's work: queries [q0, min(q0 + query_tile, end)) of the segment [start, end).
struct SegTile {
  int32_t q0, start, end, pad;
};

// The blocks of one launch: tiles of `query_tile` queries (64 or, Fast on long segments, 128).
struct SegPlan {
  std::vector<SegTile> tiles;
  int query_tile;
};

// The tiles of `query_tile` queries of segments `cu` (boundaries in tokens, cu.front() == 0, non-decreasing; empty
// segments skipped).
std::vector<SegTile> seg_tiles(const std::vector<int64_t>& cu, int query_tile);

// seg_tiles at the launch's tile size: Fast takes 128 queries unless the segments are so short that most of each
// tile would idle.
SegPlan seg_plan(const std::vector<int64_t>& cu, bool fast);

// Device scratch (bytes) the Fast kernel needs for `tokens` rows: q, k and v rounded to bf16 once, head-major and
// padded, so every block streams 16-byte rows instead of converting f32 per tile. 0 for Exact.
size_t segment_attention_scratch_bytes(int64_t tokens, int heads, int kv_heads, int head_dim, bool fast);

// q row t, head h at q + t*ldq + h*head_dim; k, v rows at k/v + t*ldkv + (h / (heads / kv_heads))*head_dim (GQA);
// out row t, head h at out + t*ldo + h*head_dim (not overlapping q/k/v); all f32, `tokens` rows (cu.back()).
// tiles: device copy of seg_plan(cu, fast).tiles [n_tiles]; scratch: segment_attention_scratch_bytes(...), 16-byte
// aligned. out = softmax(q·kᵀ * scale) · v per head. head_dim 1..128 (else throws).
void segment_attention(const float* q, int64_t ldq, const float* k, const float* v, int64_t ldkv, float* out,
                       int64_t ldo, int64_t tokens, int heads, int kv_heads, int head_dim, float scale,
                       const SegTile* tiles, int n_tiles, int query_tile, bool fast, void* scratch, cudaStream_t s);

}  // namespace rapid::cuda
