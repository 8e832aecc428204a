// RMSNorm (plain and fused with the residual add) and rotate-half RoPE. One block per row (token);
// the sum of squares is accumulated in f64 like the CPU reference (layers/norm.cpp), per thread over a
// fixed stride, then a fixed shuffle tree and a fixed cross-warp order, so a row's result never
// depends on the other rows. Element arithmetic uses explicit _rn intrinsics where nvcc would otherwise
// contract into FMAs the CPU does not use.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include "cuda/cuda_kernels.h"
#include "cuda/device_math.cuh"
#include "cuda/kv_elems.cuh"
#include "cuda/launch.cuh"

namespace rapid::cuda {

namespace {

// x [rows, dim] -> y [rows, dim]; may alias (each element is read and written by the same thread).
__global__ void __launch_bounds__(kNormThreads) rms_norm_kernel(const float* x, float* y, int64_t dim,
                                                                const float* __restrict__ w, float eps) {
  pdl_wait();
  pdl_trigger();
  const float* xr = x + int64_t(blockIdx.x) * dim;
  float* yr = y + int64_t(blockIdx.x) * dim;
  const float inv = row_inv_rms_of(xr, dim, eps);
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) yr[i] = __fmul_rn(__fmul_rn(xr[i], inv), w[i]);
}

// h [rows, dim] += o; xn [rows, dim] = rms_norm(h).
__global__ void __launch_bounds__(kNormThreads) add_rms_norm_kernel(float* h, const float* __restrict__ o, float* xn,
                                                                    int64_t dim, const float* __restrict__ w,
                                                                    float eps) {
  pdl_wait();
  pdl_trigger();
  float* hr = h + int64_t(blockIdx.x) * dim;
  const float* orow = o + int64_t(blockIdx.x) * dim;
  float* yr = xn + int64_t(blockIdx.x) * dim;
  double ss = 0;
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) {
    const float v = __fadd_rn(hr[i], orow[i]);
    hr[i] = v;
    ss = fma(double(v), double(v), ss);
  }
  const float inv = row_inv_rms(ss, dim, eps);
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) yr[i] = __fmul_rn(__fmul_rn(hr[i], inv), w[i]);
}

constexpr int kRopeThreads = 128;

// Pair j of one query head in place (x [head_dim]), then the optional query scale.
__device__ __forceinline__ void rope_q_pair(float* x, int j, int half, const float* cs, const float* sn, bool scaled,
                                            float qs) {
  float2 r = rotate(x[j], x[j + half], cs[j], sn[j]);
  if (scaled) {
    r.x = __fmul_rn(r.x, qs);
    r.y = __fmul_rn(r.y, qs);
  }
  x[j] = r.x;
  x[j + half] = r.y;
}

// x [heads, head_dim] of one token in place; then the optional query scale over the whole head
// (decoder.cpp multiplies all of q).
__device__ __forceinline__ void rope_token(float* xt, int heads, int head_dim, int half, const float* cs,
                                           const float* sn, bool scaled, float qs) {
  for (int i = threadIdx.x; i < heads * half; i += kRopeThreads) {
    const int h = i / half;
    rope_q_pair(xt + int64_t(h) * head_dim, i - h * half, half, cs, sn, scaled, qs);
  }
  const int rest = head_dim - 2 * half;  // dims past the rotated ones: only the query scale touches them
  if (scaled && rest > 0)
    for (int i = threadIdx.x; i < heads * rest; i += kRopeThreads) {
      const int h = i / rest, j = 2 * half + (i - h * rest);
      float* v = xt + int64_t(h) * head_dim + j;
      *v = __fmul_rn(*v, qs);
    }
}

// x [n, heads, head_dim]; one block per token; cos/sin [n, half].
__global__ void __launch_bounds__(kRopeThreads) rope_kernel(float* x, int heads, int head_dim, int half,
                                                            const float* __restrict__ cos,
                                                            const float* __restrict__ sin,
                                                            const float* __restrict__ q_scale) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  rope_token(x + t * heads * head_dim, heads, head_dim, half, cos + t * half, sin + t * half, q_scale != nullptr,
             q_scale ? q_scale[t] : 1.0f);
}

constexpr int kRopeKvThreads = 256;

// Blocks (token, y) share a token's items in one flat pass (a decode step has a single token: serial rounds of
// loads are what it waits on):
// q [n, n_heads, hd] rotated in place (and scaled); k [n, n_kv, hd] rotated on its way into the pool's K at slot[t]
// and v [n, n_kv, hd] stored into its V (KV: the pool's element policy, kv_elems.cuh); k stays unrotated. int8: the
// flat pass does q only, then a warp per (head, K or V) row computes the row's values and quantizes it whole.
template <class KV>
__global__ void __launch_bounds__(kRopeKvThreads) rope_kv_write_kernel(
    float* q, const float* __restrict__ k, const float* __restrict__ v, int n_heads, int n_kv, int head_dim, int half,
    const float* __restrict__ cos, const float* __restrict__ sin, const float* __restrict__ q_scale,
    const int32_t* __restrict__ slot, const KvCache kv) {
  constexpr bool kRows = KV::kType == KvDtype::I8;
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const float* cs = cos + t * half;  // [half]
  const float* sn = sin + t * half;  // [half]
  const bool scaled = q_scale != nullptr;
  const float qs = scaled ? q_scale[t] : 1.0f;
  const int64_t sl = slot[t];          // < 0: padding token, nothing stored
  const int rest = head_dim - 2 * half;  // dims past the rotated ones
  const int64_t width = int64_t(n_kv) * head_dim;
  float* qt = q + t * n_heads * head_dim;
  const float* kt = k + t * width;
  const float* vt = v + t * width;
  const bool flat_kv = sl >= 0 && !kRows;
  const int nq = n_heads * half, nqr = scaled ? n_heads * rest : 0, nk = flat_kv ? n_kv * half : 0;
  const int nkr = flat_kv ? n_kv * rest : 0, nv = flat_kv ? int(width) : 0;
  const int total = nq + nqr + nk + nkr + nv;
  // Grid y spreads a token's items over blocks (one item per thread at decode: no serial loads).
  const int stride = kRopeKvThreads * int(gridDim.y);
  for (int i = int(blockIdx.y) * kRopeKvThreads + int(threadIdx.x); i < total; i += stride) {
    if (i < nq) {  // a q pair, as rope_token
      const int h = i / half;
      rope_q_pair(qt + int64_t(h) * head_dim, i - h * half, half, cs, sn, scaled, qs);
    } else if (i < nq + nqr) {  // a q dim past the rotated ones: only the scale
      const int e = i - nq, h = e / rest;
      float* x = qt + int64_t(h) * head_dim + 2 * half + (e - h * rest);
      *x = __fmul_rn(*x, qs);
    } else if (i < nq + nqr + nk) {  // a k pair into the pool
      const int e = i - nq - nqr, h = e / half, j = e - h * half;
      const int64_t o = int64_t(h) * head_dim + j;
      const float2 r = rotate(kt[o], kt[o + half], cs[j], sn[j]);
      if constexpr (!kRows) {
        KV::store(kv.k, sl * width + o, r.x);
        KV::store(kv.k, sl * width + o + half, r.y);
      }
    } else if (i < nq + nqr + nk + nkr) {  // a k dim past the rotated ones
      const int e = i - nq - nqr - nk, h = e / rest;
      const int64_t o = int64_t(h) * head_dim + 2 * half + (e - h * rest);
      if constexpr (!kRows) KV::store(kv.k, sl * width + o, kt[o]);
    } else {  // v
      const int64_t o = i - (nq + nqr + nk + nkr);
      if constexpr (!kRows) KV::store(kv.v, sl * width + o, vt[o]);
    }
  }
  if constexpr (kRows) {
    if (sl < 0) return;
    // Rows 2h (K of head h, rotated as above) and 2h + 1 (V), over the launch's warps.
    const int lane = int(threadIdx.x) & 31, warps = kRopeKvThreads / 32;
    for (int r = int(blockIdx.y) * warps + (int(threadIdx.x) >> 5); r < 2 * n_kv; r += warps * int(gridDim.y)) {
      const int h = r >> 1;
      const float* x = (r & 1 ? vt : kt) + int64_t(h) * head_dim;
      int8_t* codes = static_cast<int8_t*>(r & 1 ? kv.v : kv.k) + sl * width + int64_t(h) * head_dim;
      uint16_t* sc = (r & 1 ? kv.vs : kv.ks) + sl * n_kv + h;
      const bool key = (r & 1) == 0;
      kv_store_i8_row(
          [&](int d) {
            if (!key || d >= 2 * half) return x[d];
            const int j = d < half ? d : d - half;
            const float2 rot = rotate(x[j], x[j + half], cs[j], sn[j]);
            return d < half ? rot.x : rot.y;
          },
          head_dim, codes, sc, lane);
    }
  }
}

}  // namespace

void rms_norm(const float* x, float* y, int64_t rows, int64_t dim, const float* w, float eps, cudaStream_t s) {
  if (rows <= 0) return;
  launch(rms_norm_kernel, dim3(unsigned(rows)), dim3(kNormThreads), 0, s, "rms_norm launch", x, y, dim, w, eps);
}

void add_rms_norm(float* h, const float* o, float* xn, int64_t rows, int64_t dim, const float* w, float eps,
                  cudaStream_t s) {
  if (rows <= 0) return;
  launch(add_rms_norm_kernel, dim3(unsigned(rows)), dim3(kNormThreads), 0, s, "add_rms_norm launch", h, o, xn, dim, w,
         eps);
}

void rope(float* x, int64_t n, int heads, int head_dim, int half, const float* cos, const float* sin,
          const float* q_scale, cudaStream_t s) {
  if (n <= 0) return;
  launch(rope_kernel, dim3(unsigned(n)), dim3(kRopeThreads), 0, s, "rope launch", x, heads, head_dim, half, cos, sin,
         q_scale);
}

void rope_kv_write(float* q, const float* k, const float* v, int64_t n, int n_heads, int n_kv_heads, int head_dim,
                   int half, const float* cos, const float* sin, const float* q_scale, const int32_t* slot,
                   const KvCache& kv, cudaStream_t s) {
  if (n <= 0) return;
  if (kv.dtype == KvDtype::I8 && head_dim > 32 * kKvRowPerLane)
    throw std::runtime_error("rope_kv_write: an int8 KV cache takes head_dim up to " + std::to_string(32 * kKvRowPerLane));
  const int rest = head_dim - 2 * half;
  const int64_t items = int64_t(n_heads) * (half + (q_scale ? rest : 0)) + int64_t(n_kv_heads) * (half + rest) +
                        int64_t(n_kv_heads) * head_dim;  // a token's total in the kernel, at most
  const unsigned gy = unsigned(std::clamp<int64_t>((items + kRopeKvThreads - 1) / kRopeKvThreads, 1, 16));
  auto go = [&](auto kernel) {
    launch(kernel, dim3(unsigned(n), gy), dim3(kRopeKvThreads), 0, s, "rope_kv_write launch", q, k, v, n_heads,
           n_kv_heads, head_dim, half, cos, sin, q_scale, slot, kv);
  };
  switch (kv.dtype) {
    case KvDtype::F32: return go(rope_kv_write_kernel<KvF32>);
    case KvDtype::F16: return go(rope_kv_write_kernel<KvF16>);
    case KvDtype::BF16: return go(rope_kv_write_kernel<KvBF16>);
    case KvDtype::I8: return go(rope_kv_write_kernel<KvI8>);
  }
}

}  // namespace rapid::cuda
