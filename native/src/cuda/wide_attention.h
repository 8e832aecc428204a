// Paged attention for heads wider than attention.cu's paged_attention takes (Gemma 4's 512-wide full layers).
#pragma once
#include <cuda_runtime.h>
#include <cstdint>
#include "cuda/cuda_kernels.h"

namespace rapid::cuda {

// paged_attention's arithmetic for any head_dim % 4 == 0 up to 512 (one block of 4 warps per (token, head), keys
// split over the warps, online softmax in f32, warps merged in order): the path for heads wider than
// paged_attention's 256.
constexpr int kWideAttnMaxHeadDim = 512;
void wide_attention(const float* q, float* out, int64_t T, const AttnTokens& tok, const KvCache& kv, int n_heads,
                    int n_kv_heads, int head_dim, float scale, int window, cudaStream_t s);

}  // namespace rapid::cuda
