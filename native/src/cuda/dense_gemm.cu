// The towers' dense GEMMs (dense_gemm.h). Fast: block tile BM x 128 x 32 (BM = 128, or 64 when 128-row tiles would
// leave multiprocessors idle), 8 warps as 2 (rows) x 4 (cols), mma.sync m16n8k16; W tiles stream into shared memory
// with cp.async while x tiles are loaded to registers, rounded to bf16 and stored, one stage ahead (double buffer).
// Exact: 64 x 64 x 16 SIMT tiles, 4 x 4 outputs per thread. Both keep one k order per output (deterministic).
#include "cuda/dense_gemm.h"
#include <cuda_bf16.h>
#include <algorithm>
#include "cuda/cuda_kernels.h"
#include "cuda/device_math.cuh"
#include "cuda/launch.cuh"
#include "cuda/mma.cuh"

namespace rapid::cuda {
namespace {

constexpr int kBN = 128, kBK = 32, kPitch = kBK + 8;  // pitch 40 bf16 (80 B): fragment loads hit 32 banks
constexpr int kThreads = 256;

template <int MI, bool VEC>
__global__ void __launch_bounds__(kThreads, 2) gemm_bf16_kernel(const float* __restrict__ x, int64_t ldx,
                                                              const __nv_bfloat16* __restrict__ w, int64_t ldw,
                                                              const float* __restrict__ bias, float* __restrict__ y,
                                                              int64_t ldy, int64_t n, int64_t out, int64_t in) {
  constexpr int BM = 32 * MI;
  __shared__ __align__(16) __nv_bfloat16 As[2][BM][kPitch];   // x tile [rows][k]
  __shared__ __align__(16) __nv_bfloat16 Bs[2][kBN][kPitch];  // W tile [cols][k]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3, wm = warp >> 2, wn = warp & 3;
  const int64_t bm = int64_t(blockIdx.y) * BM, bn = int64_t(blockIdx.x) * kBN;
  const int ktiles = int((ldw + kBK - 1) / kBK);

  float4 ar[MI];  // this thread's next x chunks: chunk c = tid + 256 i is row c / 8, k (c % 8) * 4
  auto load_a = [&](int kt) {
#pragma unroll
    for (int i = 0; i < MI; ++i) {
      const int c = tid + kThreads * i, r = c >> 3, kc = (c & 7) * 4;
      const int64_t row = bm + r, k = int64_t(kt) * kBK + kc;
      const float* p = x + row * ldx + k;
      if (VEC) {
        ar[i] = row < n && k < in ? *reinterpret_cast<const float4*>(p) : make_float4(0.f, 0.f, 0.f, 0.f);
      } else {
        const bool live = row < n;
        ar[i].x = live && k < in ? p[0] : 0.f;
        ar[i].y = live && k + 1 < in ? p[1] : 0.f;
        ar[i].z = live && k + 2 < in ? p[2] : 0.f;
        ar[i].w = live && k + 3 < in ? p[3] : 0.f;
      }
    }
  };
  auto store_a = [&](int st) {
#pragma unroll
    for (int i = 0; i < MI; ++i) {
      const int c = tid + kThreads * i, r = c >> 3, kc = (c & 7) * 4;
      *reinterpret_cast<uint2*>(&As[st][r][kc]) = make_uint2(pack_bf16(ar[i].x, ar[i].y), pack_bf16(ar[i].z, ar[i].w));
    }
  };
  auto load_b = [&](int st, int kt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int c = tid + kThreads * i, r = c >> 2, kc = (c & 3) * 8;
      cp_async16(&Bs[st][r][kc], w + (bn + r) * ldw + int64_t(kt) * kBK + kc);
    }
    cp_async_commit();
  };

  float acc[MI][4][4] = {};
  load_b(0, 0);
  load_a(0);
  store_a(0);
  for (int kt = 0; kt < ktiles; ++kt) {
    const int cur = kt & 1;
    const bool more = kt + 1 < ktiles;
    if (more) {
      load_b(cur ^ 1, kt + 1);
      load_a(kt + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // stage cur: W landed, x stored, for every thread
#pragma unroll
    for (int ks = 0; ks < kBK; ks += 16) {
      uint32_t a[MI][4], b[4][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const int r = wm * 16 * MI + mi * 16 + g;
        a[mi][0] = *reinterpret_cast<const uint32_t*>(&As[cur][r][ks + 2 * t]);
        a[mi][1] = *reinterpret_cast<const uint32_t*>(&As[cur][r + 8][ks + 2 * t]);
        a[mi][2] = *reinterpret_cast<const uint32_t*>(&As[cur][r][ks + 8 + 2 * t]);
        a[mi][3] = *reinterpret_cast<const uint32_t*>(&As[cur][r + 8][ks + 8 + 2 * t]);
      }
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int c = wn * 32 + ni * 8 + g;
        b[ni][0] = *reinterpret_cast<const uint32_t*>(&Bs[cur][c][ks + 2 * t]);
        b[ni][1] = *reinterpret_cast<const uint32_t*>(&Bs[cur][c][ks + 8 + 2 * t]);
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) mma_bf16(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
    }
    __syncthreads();  // stage cur is read by all before the next iteration refills it
    if (more) store_a(cur ^ 1);
  }

#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const int64_t c = bn + wn * 32 + ni * 8 + 2 * t;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t r = bm + wm * 16 * MI + mi * 16 + g + 8 * h;
        if (r >= n) continue;
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (c + e < out) y[r * ldy + c + e] = acc[mi][ni][2 * h + e] + (bias ? bias[c + e] : 0.f);
      }
    }
}

constexpr int kFM = 64, kFN = 64, kFK = 16;

__global__ void __launch_bounds__(kThreads) gemm_f32_kernel(const float* __restrict__ x, int64_t ldx,
                                                             const float* __restrict__ w, int64_t ldw,
                                                             const float* __restrict__ bias, float* __restrict__ y,
                                                             int64_t ldy, int64_t n, int64_t out, int64_t in) {
  __shared__ float As[kFK][kFM + 4];  // x tile, k-major
  __shared__ float Bs[kFK][kFN + 4];  // W tile, k-major
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int64_t bm = int64_t(blockIdx.y) * kFM, bn = int64_t(blockIdx.x) * kFN;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < ldw; k0 += kFK) {
    {
      const int r = tid >> 2, kc = (tid & 3) * 4;
      const int64_t row = bm + r;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t k = k0 + kc + j;
        As[kc + j][r] = row < n && k < in ? x[row * ldx + k] : 0.f;
      }
      const float4 wv = *reinterpret_cast<const float4*>(w + (bn + r) * ldw + k0 + kc);  // padded: in bounds
      Bs[kc][r] = wv.x;
      Bs[kc + 1][r] = wv.y;
      Bs[kc + 2][r] = wv.z;
      Bs[kc + 3][r] = wv.w;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kFK; ++k) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[k][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[k][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t r = bm + ty + 16 * i;
    if (r >= n) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = bn + tx + 16 * j;
      if (c < out) y[r * ldy + c] = acc[i][j] + (bias ? bias[c] : 0.f);
    }
  }
}

template <int MI>
void launch_bf16(bool vec, dim3 grid, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw, const float* bias,
                 float* y, int64_t ldy, int64_t n, int64_t out, int64_t in, cudaStream_t s) {
  const auto* wb = reinterpret_cast<const __nv_bfloat16*>(w);
  if (vec) gemm_bf16_kernel<MI, true><<<grid, kThreads, 0, s>>>(x, ldx, wb, ldw, bias, y, ldy, n, out, in);
  else gemm_bf16_kernel<MI, false><<<grid, kThreads, 0, s>>>(x, ldx, wb, ldw, bias, y, ldy, n, out, in);
}

}  // namespace

void gemm_bf16(const float* x, int64_t ldx, const uint16_t* w, const float* bias, float* y, int64_t ldy, int64_t n,
               int64_t out, int64_t in, cudaStream_t s) {
  if (n <= 0 || out <= 0) return;
  const int64_t ldw = gemm_k_pad(in);
  const bool vec = in % 4 == 0 && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int64_t col_blocks = (out + kBN - 1) / kBN;
  // 128-row tiles unless they would leave more than a quarter of the multiprocessors without a block.
  const bool tall = col_blocks * ((n + 127) / 128) * 4 >= int64_t(sm_count()) * 3;
  if (tall) launch_bf16<4>(vec, dim3(unsigned(col_blocks), unsigned((n + 127) / 128)), x, ldx, w, ldw, bias, y, ldy, n, out, in, s);
  else launch_bf16<2>(vec, dim3(unsigned(col_blocks), unsigned((n + 63) / 64)), x, ldx, w, ldw, bias, y, ldy, n, out, in, s);
  check(cudaGetLastError(), "gemm_bf16 launch");
}

void gemm_f32(const float* x, int64_t ldx, const float* w, const float* bias, float* y, int64_t ldy, int64_t n,
              int64_t out, int64_t in, cudaStream_t s) {
  if (n <= 0 || out <= 0) return;
  const dim3 grid(unsigned((out + kFN - 1) / kFN), unsigned((n + kFM - 1) / kFM));
  gemm_f32_kernel<<<grid, kThreads, 0, s>>>(x, ldx, w, gemm_k_pad(in), bias, y, ldy, n, out, in);
  check(cudaGetLastError(), "gemm_f32 launch");
}

}  // namespace rapid::cuda
