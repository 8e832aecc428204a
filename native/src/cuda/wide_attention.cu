// wide_attention (cuda/wide_attention.h): paged causal attention for heads up to 512 wide. One block of kWarps
// warps per (token, head); warp w takes keys lo + w, lo + w + kWarps, ...; lane l holds dims 4l + 128c of q, the
// accumulator and each key/value row (c < head_dim / 128, rounded up). Online softmax per warp, warps merged in
// warp order. Keys and values widen to f32 exactly as paged_attention's (kv_elems.cuh).
#include "cuda/wide_attention.h"
#include <cmath>
#include <stdexcept>
#include <string>
#include "cuda/device_math.cuh"
#include "cuda/kv_elems.cuh"
#include "cuda/launch.cuh"

namespace rapid::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kChunks = kWideAttnMaxHeadDim / 128;  // float4 chunks a lane holds at most

template <class KV>
__global__ void wide_attention_kernel(const float* __restrict__ q, float* __restrict__ out, AttnTokens tok,
                                      KvCache kv, int n_heads, int n_kv, int hd, float scale, int window) {
  pdl_wait();
  pdl_trigger();
  __shared__ float s_ml[kWarps][2];
  __shared__ float4 s_acc[kWarps][kWideAttnMaxHeadDim / 4];
  const int64_t t = blockIdx.x;
  const int h = int(blockIdx.y), g = h / (n_heads / n_kv);
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int64_t qpos = tok.q_pos[t], end = tok.kv_end[t];
  const int64_t lo = window > 0 && qpos - window + 1 > 0 ? qpos - window + 1 : 0;
  const int32_t* table = tok.block_tables + tok.table_off[t];
  const int bs = tok.block_size;
  const float* qh = q + (t * n_heads + h) * int64_t(hd);  // [hd]

  float4 qv[kChunks], acc[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int d = 4 * lane + 128 * c;
    qv[c] = d < hd ? *reinterpret_cast<const float4*>(qh + d) : make_float4(0.f, 0.f, 0.f, 0.f);
    acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float m = -INFINITY, l = 0.0f;
  const unsigned char* kb = static_cast<const unsigned char*>(kv.k);
  const unsigned char* vb = static_cast<const unsigned char*>(kv.v);
  for (int64_t j = lo + warp; j < end; j += kWarps) {
    const int64_t slot = int64_t(table[j / bs]) * bs + j % bs;
    const int64_t row = slot * n_kv + g;  // (slot, kv head): codes at row * hd, scale at row
    float ks = 1.0f, vs = 1.0f;
    if constexpr (KV::kType == KvDtype::I8) ks = f16_bits_to_float(kv.ks[row]), vs = f16_bits_to_float(kv.vs[row]);
    float dot = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = 4 * lane + 128 * c;
      if (d < hd) {
        const float4 k4 = KV::load4(kb + (row * hd + d) * KV::kBytes, ks);
        dot += qv[c].x * k4.x + qv[c].y * k4.y + qv[c].z * k4.z + qv[c].w * k4.w;
      }
    }
    const float s = warp_sum(dot) * scale;
    const float mn = fmaxf(m, s);
    const float corr = expf(m - mn), p = expf(s - mn);
    l = l * corr + p;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = 4 * lane + 128 * c;
      if (d < hd) {
        const float4 v4 = KV::load4(vb + (row * hd + d) * KV::kBytes, vs);
        acc[c].x = acc[c].x * corr + p * v4.x;
        acc[c].y = acc[c].y * corr + p * v4.y;
        acc[c].z = acc[c].z * corr + p * v4.z;
        acc[c].w = acc[c].w * corr + p * v4.w;
      }
    }
    m = mn;
  }
  if (lane == 0) s_ml[warp][0] = m, s_ml[warp][1] = l;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int d = 4 * lane + 128 * c;
    if (d < hd) s_acc[warp][d / 4] = acc[c];
  }
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, s_ml[w][0]);
  float L = 0.0f;
  for (int w = 0; w < kWarps; ++w) L += s_ml[w][0] == -INFINITY ? 0.0f : s_ml[w][1] * expf(s_ml[w][0] - M);
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  float* oh = out + (t * n_heads + h) * int64_t(hd);  // [hd]
  for (int i = int(threadIdx.x); i < hd / 4; i += int(blockDim.x)) {
    float4 r = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int w = 0; w < kWarps; ++w) {
      if (s_ml[w][0] == -INFINITY) continue;
      const float f = expf(s_ml[w][0] - M);
      const float4 a = s_acc[w][i];
      r.x += a.x * f, r.y += a.y * f, r.z += a.z * f, r.w += a.w * f;
    }
    reinterpret_cast<float4*>(oh)[i] = make_float4(r.x * inv, r.y * inv, r.z * inv, r.w * inv);
  }
}

}  // namespace

void wide_attention(const float* q, float* out, int64_t T, const AttnTokens& tok, const KvCache& kv, int n_heads,
                    int n_kv_heads, int head_dim, float scale, int window, cudaStream_t s) {
  if (T <= 0) return;
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
    throw std::runtime_error("wide_attention: n_heads " + std::to_string(n_heads) + " is not a multiple of n_kv_heads " +
                             std::to_string(n_kv_heads));
  if (head_dim <= 0 || head_dim % 4 != 0 || head_dim > kWideAttnMaxHeadDim)
    throw std::runtime_error("wide_attention: head_dim " + std::to_string(head_dim) + " is not a multiple of 4 up to " +
                             std::to_string(kWideAttnMaxHeadDim));
  if (tok.block_size <= 0) throw std::runtime_error("wide_attention: block_size must be positive");
  const dim3 grid{unsigned(T), unsigned(n_heads)};
  auto go = [&](auto kernel) {
    launch(kernel, grid, dim3(32 * kWarps), 0, s, "wide_attention launch", q, out, tok, kv, n_heads, n_kv_heads, head_dim,
           scale, window);
  };
  switch (kv.dtype) {
    case KvDtype::F32: return go(wide_attention_kernel<KvF32>);
    case KvDtype::F16: return go(wide_attention_kernel<KvF16>);
    case KvDtype::BF16: return go(wide_attention_kernel<KvBF16>);
    case KvDtype::I8: return go(wide_attention_kernel<KvI8>);
  }
}

}  // namespace rapid::cuda
