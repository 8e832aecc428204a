// Bidirectional attention within segments on the CPU (the vision towers' attention): both products run
// on the packed GEMM, in f32.
#pragma once
#include <cstdint>
#include <vector>
#include "cpu/threadpool.h"

namespace rapid {

// Query t in [cu[s], cu[s+1]) attends to every key of its segment. q row t, head h at q + t*ldq + h*head_dim;
// k/v rows at k/v + t*ldkv + g*head_dim with g = h / (n_heads / n_kv_heads); out likewise with ldo.
// out = softmax(q·kᵀ * scale) · v, parallel over (segment, head, query block); bitwise independent of the
// thread count. Memory is linear in the token count.
void segment_attention(ThreadPool& pool, const float* q, int64_t ldq, const float* k, const float* v, int64_t ldkv,
                       float* out, int64_t ldo, int n_heads, int n_kv_heads, int head_dim, float scale,
                       const std::vector<int64_t>& cu);

}  // namespace rapid
