// The towers' dense GEMMs (dense_gemm.h). Fast (v2): x rounded to bf16 once into scratch, block tile BM x 128 x 64
// (BM = 128 or 64, whichever fills the multiprocessors in less time), 8 warps as 2 (rows) x 4 (cols), a 3-stage
// cp.async pipeline into swizzled shared memory, ldmatrix fragments, mma.sync m16n8k16. Fast v1 (temporary,
// RAPID_CUDA_TOWER_GEMM=v1): BM x 128 x 32, x loaded to registers and rounded as staged, double buffered; same bits.
// Exact: 64 x 64 x 16 SIMT tiles, 4 x 4 outputs per thread. All keep one k order per output (deterministic).
#include "cuda/dense_gemm.h"
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdlib>
#include <cstring>
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

// ---- v2: bf16 x staged once, 128 x 128 x 64 tiles, 3-stage cp.async pipeline, ldmatrix, XOR-swizzled shared memory.
// A tile row is 64 bf16 = 8 chunks of 16 B; chunk c of row r sits at chunk c ^ (r & 7), so the 8 rows one ldmatrix
// phase reads (same logical chunk) and the 8 chunks a cp.async phase writes (same row) fall in 8 distinct bank groups.
constexpr int kV2BN = 128, kV2BK = 64, kV2Stages = 3;  // 96 KiB (BM 128): two blocks per multiprocessor

// xb[r, k] = bf16(x[r, k]) for k < in, 0 for in <= k < ldb: the GEMM's input, rounded once. One thread per 8 k.
template <bool VEC>
__global__ void stage_bf16_kernel(const float* __restrict__ x, int64_t ldx, int64_t in, __nv_bfloat16* __restrict__ xb,
                                  int64_t ldb, int64_t n) {
  const int64_t cpr = ldb / 8, i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * cpr) return;
  const int64_t r = i / cpr, k0 = (i % cpr) * 8;
  const float* p = x + r * ldx + k0;
  float v[8];
  if (VEC && k0 + 8 <= in) {
    const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = k0 + j < in ? p[j] : 0.f;
  }
  *reinterpret_cast<uint4*>(xb + r * ldb + k0) =
      make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
}

// 16-byte cp.async that writes zeros (reads nothing) when !live.
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool live) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(live ? 16 : 0) : "memory");
}

// Element offset of (row, k) in a swizzled [rows][64] bf16 tile.
__device__ __forceinline__ int swz(int row, int k) { return row * kV2BK + ((((k >> 3) ^ row) & 7) << 3) + (k & 7); }

// xb [n, ldw] bf16 (zero beyond in), w [rows_pad(out), ldw] bf16; block BM = 32 * MI rows x 128 cols, 8 warps as
// 2 (rows, 16 * MI each) x 4 (cols, 32 each). Dynamic shared memory: kV2Stages x (BM + 128) x 64 bf16.
template <int MI>
__global__ void __launch_bounds__(kThreads, 2) gemm_bf16_v2_kernel(const __nv_bfloat16* __restrict__ xb,
                                                                 const __nv_bfloat16* __restrict__ w, int64_t ldw,
                                                                 const float* __restrict__ bias, float* __restrict__ y,
                                                                 int64_t ldy, int64_t n, int64_t out, bool y2) {
  constexpr int BM = 32 * MI, kA = BM * kV2BK, kB = kV2BN * kV2BK;
  extern __shared__ __align__(128) __nv_bfloat16 smem[];  // [stage][A: BM x 64 | B: 128 x 64], swizzled
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3, wm = warp >> 2, wn = warp & 3;
  const int64_t bm = int64_t(blockIdx.y) * BM, bn = int64_t(blockIdx.x) * kV2BN;
  const int ktiles = int((ldw + kV2BK - 1) / kV2BK);

  // Tile kt into stage st: A MI chunks per thread, B 4; chunk c = tid + 256 i is row c / 8, logical chunk c % 8.
  auto load = [&](int st, int kt) {
    __nv_bfloat16* as = smem + st * (kA + kB);
    __nv_bfloat16* bs = as + kA;
#pragma unroll
    for (int i = 0; i < MI; ++i) {
      const int c = tid + kThreads * i, r = c >> 3, k = (c & 7) * 8;
      const int64_t row = bm + r, kk = int64_t(kt) * kV2BK + k;
      const bool live = row < n && kk < ldw;
      cp_async16_zfill(as + swz(r, k), live ? xb + row * ldw + kk : xb, live);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = tid + kThreads * i, r = c >> 3, k = (c & 7) * 8;
      const int64_t kk = int64_t(kt) * kV2BK + k;
      const bool live = kk < ldw;  // rows: bn + r < rows_pad(out) always
      cp_async16_zfill(bs + swz(r, k), live ? w + (bn + r) * ldw + kk : w, live);
    }
  };

  float acc[MI][4][4] = {};
#pragma unroll
  for (int s = 0; s < kV2Stages - 1; ++s) {
    if (s < ktiles) load(s, s);
    cp_async_commit();  // empty groups too: group i is always tile i
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<kV2Stages - 2>();
    __syncthreads();  // tile kt landed for every thread; stage (kt - 1) % S is read by all
    if (kt + kV2Stages - 1 < ktiles) load((kt + kV2Stages - 1) % kV2Stages, kt + kV2Stages - 1);
    cp_async_commit();
    const __nv_bfloat16* as = smem + (kt % kV2Stages) * (kA + kB);
    const __nv_bfloat16* bs = as + kA;
#pragma unroll
    for (int ks = 0; ks < kV2BK; ks += 16) {
      uint32_t a[MI][4], b[4][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)  // matrices: rows 0-7 / 8-15 x k 0-7 / 8-15 = a0, a1, a2, a3
        ldmatrix_x4(a[mi], as + swz(wm * 16 * MI + mi * 16 + (lane & 15), ks + (lane >> 4) * 8));
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {  // matrices: (cols 0-7, k 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15)
        const int q = lane >> 3;
        uint32_t r[4];
        ldmatrix_x4(r, bs + swz(wn * 32 + nj * 16 + (lane & 7) + (q >> 1) * 8, ks + (q & 1) * 8));
        b[2 * nj][0] = r[0], b[2 * nj][1] = r[1], b[2 * nj + 1][0] = r[2], b[2 * nj + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) mma_bf16(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
    }
  }
  cp_async_wait<0>();  // no copy may land after the block exits

#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const int64_t c = bn + wn * 32 + ni * 8 + 2 * t;
      if (c >= out) continue;
      const float b0 = bias ? bias[c] : 0.f, b1 = bias && c + 1 < out ? bias[c + 1] : 0.f;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t r = bm + wm * 16 * MI + mi * 16 + g + 8 * h;
        if (r >= n) continue;
        float* p = y + r * ldy + c;
        if (y2 && c + 1 < out) {
          *reinterpret_cast<float2*>(p) = make_float2(acc[mi][ni][2 * h] + b0, acc[mi][ni][2 * h + 1] + b1);
        } else {
          p[0] = acc[mi][ni][2 * h] + b0;
          if (c + 1 < out) p[1] = acc[mi][ni][2 * h + 1] + b1;
        }
      }
    }
}

template <int MI>
void launch_bf16_v2(const __nv_bfloat16* xb, const uint16_t* w, int64_t ldw, const float* bias, float* y, int64_t ldy,
                    int64_t n, int64_t out, bool y2, cudaStream_t s) {
  constexpr int bytes = kV2Stages * (32 * MI + kV2BN) * kV2BK * 2;
  static const cudaError_t attr =
      cudaFuncSetAttribute(gemm_bf16_v2_kernel<MI>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  check(attr, "gemm_bf16 v2 shared memory attribute");
  const dim3 grid(unsigned((out + kV2BN - 1) / kV2BN), unsigned((n + 32 * MI - 1) / (32 * MI)));
  gemm_bf16_v2_kernel<MI><<<grid, kThreads, bytes, s>>>(xb, reinterpret_cast<const __nv_bfloat16*>(w), ldw, bias, y,
                                                         ldy, n, out, y2);
}

// RAPID_CUDA_TOWER_GEMM=v1: the double-buffered kernel above (temporary, for one A/B on a GPU; docs/cuda.md).
// Read per call so a bench can switch it between encodes.
bool gemm_v1() {
  const char* e = std::getenv("RAPID_CUDA_TOWER_GEMM");
  return e && std::strcmp(e, "v1") == 0;
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
  if (gemm_v1()) {
    // 128-row tiles unless they would leave more than a quarter of the multiprocessors without a block.
    const bool tall = col_blocks * ((n + 127) / 128) * 4 >= int64_t(sm_count()) * 3;
    if (tall) launch_bf16<4>(vec, dim3(unsigned(col_blocks), unsigned((n + 127) / 128)), x, ldx, w, ldw, bias, y, ldy, n, out, in, s);
    else launch_bf16<2>(vec, dim3(unsigned(col_blocks), unsigned((n + 63) / 64)), x, ldx, w, ldw, bias, y, ldy, n, out, in, s);
    check(cudaGetLastError(), "gemm_bf16 launch");
    return;
  }
  // x rounded to bf16 once, into stream-ordered scratch [n, ldw] (zero beyond in), freed after the GEMM reads it.
  void* xb = nullptr;
  check(cudaMallocAsync(&xb, size_t(n * ldw) * 2, s), "cudaMallocAsync (gemm_bf16 staging)");
  auto* xbh = static_cast<__nv_bfloat16*>(xb);
  const int64_t chunks = n * (ldw / 8);
  const unsigned sblocks = unsigned((chunks + 255) / 256);
  if (vec) stage_bf16_kernel<true><<<sblocks, 256, 0, s>>>(x, ldx, in, xbh, ldw, n);
  else stage_bf16_kernel<false><<<sblocks, 256, 0, s>>>(x, ldx, in, xbh, ldw, n);
  const bool y2 = ldy % 2 == 0 && reinterpret_cast<uintptr_t>(y) % 8 == 0;
  // Row tile of least estimated time: waves of two blocks per multiprocessor x rows per block, 64-row tiles ~15%
  // slower per row (fewer mma per fragment load). 4096 x 1152 on 132 SMs: 288 blocks of 128 rows take 2 waves.
  const auto cost = [&](int64_t bm, double per_row) {
    const int64_t blocks = col_blocks * ((n + bm - 1) / bm), slots = 2 * int64_t(sm_count());
    return double((blocks + slots - 1) / slots) * double(bm) * per_row;
  };
  if (cost(128, 1.0) <= cost(64, 1.15)) launch_bf16_v2<4>(xbh, w, ldw, bias, y, ldy, n, out, y2, s);
  else launch_bf16_v2<2>(xbh, w, ldw, bias, y, ldy, n, out, y2, s);
  const cudaError_t launched = cudaGetLastError();
  check(cudaFreeAsync(xb, s), "cudaFreeAsync (gemm_bf16 staging)");
  check(launched, "gemm_bf16 launch");
}

void gemm_f32(const float* x, int64_t ldx, const float* w, const float* bias, float* y, int64_t ldy, int64_t n,
              int64_t out, int64_t in, cudaStream_t s) {
  if (n <= 0 || out <= 0) return;
  const dim3 grid(unsigned((out + kFN - 1) / kFN), unsigned((n + kFM - 1) / kFM));
  gemm_f32_kernel<<<grid, kThreads, 0, s>>>(x, ldx, w, gemm_k_pad(in), bias, y, ldy, n, out, in);
  check(cudaGetLastError(), "gemm_f32 launch");
}

}  // namespace rapid::cuda
