// RMSNorm (plain and fused with the residual add) and rotate-half RoPE. One block per row (token);
// the sum of squares is accumulated in f64 like the CPU reference (layers/norm.cpp), per thread over a
// fixed stride, then a fixed shuffle tree and a fixed cross-warp order, so a row's result never
// depends on the other rows. Element arithmetic uses explicit _rn intrinsics where nvcc would otherwise
// contract into FMAs the CPU does not use.
#include <cstdint>
#include "cuda/cuda_kernels.h"
#include "cuda/device_math.cuh"

namespace rapid::cuda {

namespace {

constexpr int kNormThreads = 256;

__device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// 1 / sqrt(mean(x^2) + eps) of a row, as norm.cpp: float(ss / dim) + eps, IEEE sqrt and division.
// Call with all threads of the block; every thread gets the result.
__device__ float row_inv_rms(double ss, int64_t dim, float eps) {
  __shared__ double part[kNormThreads / 32];
  __shared__ float inv_s;
  ss = warp_sum_f64(ss);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    double tot = 0;
    for (int w = 0; w < kNormThreads / 32; ++w) tot += part[w];
    inv_s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(float(tot / double(dim)), eps)));
  }
  __syncthreads();
  return inv_s;
}

// x [rows, dim] -> y [rows, dim]; may alias (each element is read and written by the same thread).
__global__ void __launch_bounds__(kNormThreads) rms_norm_kernel(const float* x, float* y, int64_t dim,
                                                                const float* __restrict__ w, float eps) {
  const float* xr = x + int64_t(blockIdx.x) * dim;
  float* yr = y + int64_t(blockIdx.x) * dim;
  double ss = 0;
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) {
    const double v = xr[i];
    ss = fma(v, v, ss);
  }
  const float inv = row_inv_rms(ss, dim, eps);
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) yr[i] = __fmul_rn(__fmul_rn(xr[i], inv), w[i]);
}

// h [rows, dim] += o; xn [rows, dim] = rms_norm(h).
__global__ void __launch_bounds__(kNormThreads) add_rms_norm_kernel(float* h, const float* __restrict__ o, float* xn,
                                                                    int64_t dim, const float* __restrict__ w,
                                                                    float eps) {
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

// x [n, heads, head_dim]; one block per token. Pairs (j, j + half) as rope.cpp apply_rope, then the
// optional per-token query scale over the whole head (decoder.cpp multiplies all of q).
__global__ void __launch_bounds__(kRopeThreads) rope_kernel(float* x, int heads, int head_dim, int half,
                                                            const float* __restrict__ cos,
                                                            const float* __restrict__ sin,
                                                            const float* __restrict__ q_scale) {
  const int64_t t = blockIdx.x;
  float* xt = x + t * heads * head_dim;  // [heads, head_dim]
  const float* cs = cos + t * half;      // [half]
  const float* sn = sin + t * half;      // [half]
  const bool scaled = q_scale != nullptr;
  const float qs = scaled ? q_scale[t] : 1.0f;
  for (int i = threadIdx.x; i < heads * half; i += kRopeThreads) {
    const int h = i / half, j = i - h * half;
    float* v = xt + int64_t(h) * head_dim;
    const float a = v[j], b = v[j + half], c = cs[j], s = sn[j];
    float r0 = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    float r1 = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    if (scaled) {
      r0 = __fmul_rn(r0, qs);
      r1 = __fmul_rn(r1, qs);
    }
    v[j] = r0;
    v[j + half] = r1;
  }
  const int rest = head_dim - 2 * half;  // dims past the rotated ones: only the query scale touches them
  if (scaled && rest > 0)
    for (int i = threadIdx.x; i < heads * rest; i += kRopeThreads) {
      const int h = i / rest, j = 2 * half + (i - h * rest);
      float* v = xt + int64_t(h) * head_dim + j;
      *v = __fmul_rn(*v, qs);
    }
}

}  // namespace

void rms_norm(const float* x, float* y, int64_t rows, int64_t dim, const float* w, float eps, cudaStream_t s) {
  if (rows <= 0) return;
  rms_norm_kernel<<<unsigned(rows), kNormThreads, 0, s>>>(x, y, dim, w, eps);
  check(cudaGetLastError(), "rms_norm launch");
}

void add_rms_norm(float* h, const float* o, float* xn, int64_t rows, int64_t dim, const float* w, float eps,
                  cudaStream_t s) {
  if (rows <= 0) return;
  add_rms_norm_kernel<<<unsigned(rows), kNormThreads, 0, s>>>(h, o, xn, dim, w, eps);
  check(cudaGetLastError(), "add_rms_norm launch");
}

void rope(float* x, int64_t n, int heads, int head_dim, int half, const float* cos, const float* sin,
          const float* q_scale, cudaStream_t s) {
  if (n <= 0) return;
  rope_kernel<<<unsigned(n), kRopeThreads, 0, s>>>(x, heads, head_dim, half, cos, sin, q_scale);
  check(cudaGetLastError(), "rope launch");
}

}  // namespace rapid::cuda
