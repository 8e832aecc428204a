// Split-K attention's key partitions and the merge of a head's partials. The attention kernel cuts a token's keys with
// split_keys and merges them itself (attention.cu's merge_head, a warp per head); a one-token launch may leave them
// to the o projection (AttnPartials), whose staging cuts them the same way and merges with merge_columns4 (a thread
// per 8 columns). Both compute the same bits: for partitions p = 0..parts-1 with (max m_p, sum l_p, unnormalized
// output o_p), M = max_p m_p, w_p = e^(m_p - M), l = Σ_p w_p l_p and out = (Σ_p w_p o_p) · (1 / l), every sum in
// partition order as a chain of fmaf from zero (0 where l is 0: no visible key).
#pragma once
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>
#include "cuda/cuda_kernels.h"

namespace rapid::cuda {

constexpr int kAttnChunk = 32;     // keys per chunk: partitions are whole chunks
constexpr int kAttnMaxParts = 32;  // most key partitions of one token

// How a token's nkeys visible keys are cut: `parts` partitions of `len` keys (the last one shorter). Partitions are
// part_keys long until that would need more than kAttnMaxParts; then they grow (in whole chunks) so that there are at
// most kAttnMaxParts. A function of (nkeys, part_keys) only.
struct KeySplit {
  int len, parts;
};
__host__ __device__ inline KeySplit split_keys(int nkeys, int part_keys) {
  if (part_keys <= 0 || nkeys <= part_keys) return {nkeys, 1};
  const int per = (nkeys + kAttnMaxParts - 1) / kAttnMaxParts;
  const int len = max(part_keys, (per + kAttnChunk - 1) / kAttnChunk * kAttnChunk);
  return {len, (nkeys + len - 1) / len};
}

// Keys a token at q_pos with keys up to kv_end sees under a sliding window (0: none): keys k > q_pos - window.
__host__ __device__ inline int visible_keys(int q_pos, int kv_end, int window) {
  const int lo = window > 0 ? max(0, q_pos - window + 1) : 0;
  return max(0, kv_end - lo);
}

// The partitions of the token whose partials `a` holds (1: the attention wrote its output itself).
__device__ __forceinline__ int deferred_parts(const AttnPartials& a) {
  return split_keys(visible_keys(a.q_pos[0], a.kv_end[0], a.window), a.part_keys).parts;
}

// NC adjacent float4 columns of one head from c4, merged by one thread from partials an earlier kernel wrote: ml
// [parts] (max, sum) and o [parts][hd4]. The reads of up to kHeld partitions go out together (one L2 wait); more are
// read one at a time.
template <int NC>
__device__ __forceinline__ void merge_columns4(const float2* ml, const float4* o, int hd4, int c4, int parts,
                                               float4 (&v)[NC]) {
  constexpr int kHeld = 8;
  float2 r[kHeld];
  float4 a[kHeld][NC];
#pragma unroll
  for (int u = 0; u < kHeld; ++u) {
    r[u] = u < parts ? __ldcg(ml + u) : make_float2(-INFINITY, 0.0f);
#pragma unroll
    for (int j = 0; j < NC; ++j)
      a[u][j] = u < parts ? __ldcg(o + int64_t(u) * hd4 + c4 + j) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float m = -INFINITY;
#pragma unroll
  for (int u = 0; u < kHeld; ++u) m = fmaxf(m, r[u].x);
  for (int p = kHeld; p < parts; ++p) m = fmaxf(m, __ldcg(ml + p).x);
  float l = 0.0f;
#pragma unroll
  for (int u = 0; u < kHeld; ++u)
    if (u < parts) l = fmaf(r[u].y, expf(r[u].x - m), l);
  for (int p = kHeld; p < parts; ++p) {
    const float2 x = __ldcg(ml + p);
    l = fmaf(x.y, expf(x.x - m), l);
  }
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
  auto add = [&](float w, const float4& b, float4& t) {
    t.x = fmaf(w, b.x, t.x);
    t.y = fmaf(w, b.y, t.y);
    t.z = fmaf(w, b.z, t.z);
    t.w = fmaf(w, b.w, t.w);
  };
#pragma unroll
  for (int j = 0; j < NC; ++j) v[j] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int u = 0; u < kHeld; ++u)
    if (u < parts) {
      const float w = expf(r[u].x - m);
#pragma unroll
      for (int j = 0; j < NC; ++j) add(w, a[u][j], v[j]);
    }
  for (int p = kHeld; p < parts; ++p) {
    const float w = expf(__ldcg(ml + p).x - m);
#pragma unroll
    for (int j = 0; j < NC; ++j) add(w, __ldcg(o + int64_t(p) * hd4 + c4 + j), v[j]);
  }
#pragma unroll
  for (int j = 0; j < NC; ++j) {
    v[j].x *= inv_l;
    v[j].y *= inv_l;
    v[j].z *= inv_l;
    v[j].w *= inv_l;
  }
}

}  // namespace rapid::cuda
