// The towers' dense GEMMs (dense_gemm.h). Fast: x rounded to bf16 once into scratch, then on the H100/H200 (sm_90a)
// v3, warpgroup MMA over 128 x BN x 64 tiles (BN = 64-192, whichever fills the multiprocessors in less time); elsewhere
// v2, mma.sync m16n8k16 over BM x 128 x 64 tiles (BM = 128 or 64), 8 warps as 2 (rows) x 4 (cols). Both stream tiles
// through a cp.async pipeline into 128-byte-swizzled shared memory (no bank conflicts). Exact: 64 x 64 x 16 SIMT
// tiles, 4 x 4 outputs per thread. All keep one k order per output (deterministic).
#include "cuda/dense_gemm.h"
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <type_traits>
#include "cuda/cuda_kernels.h"
#include "cuda/device_math.cuh"
#include "cuda/launch.cuh"
#include "cuda/mma.cuh"
#include "cuda/wgmma.cuh"

namespace rapid::cuda {
namespace {

constexpr int kThreads = 256;

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

// Rows [r0, r0 + ROWS) x k tile kt of a [*, ldw] bf16 matrix into a swizzled tile, zeros from row `rows` and column ldw
// on. The block's 256 threads take chunk c = tid + 256 i: row c / 8, logical 16-byte chunk c % 8.
template <int ROWS>
__device__ __forceinline__ void load_tile(__nv_bfloat16* tile, const __nv_bfloat16* __restrict__ src, int64_t r0,
                                          int64_t rows, int64_t ldw, int kt) {
  static_assert(ROWS * 8 % kThreads == 0, "whole chunks per thread");
#pragma unroll
  for (int i = 0; i < ROWS * 8 / kThreads; ++i) {
    const int c = int(threadIdx.x) + kThreads * i, r = c >> 3, k = (c & 7) * 8;
    const int64_t row = r0 + r, kk = int64_t(kt) * kV2BK + k;
    const bool live = row < rows && kk < ldw;
    cp_async16_zfill(tile + swz(r, k), live ? src + row * ldw + kk : src, live);
  }
}

// The epilogue as a kernel template argument, so a plain GEMM carries no epilogue code (a runtime switch over every
// activation in each kernel made them 1.2-1.5x slower on the H100). Fused: gelu (tanh), the towers' MLP activation,
// and the residual add; other activations take the default (linear, then act).
constexpr int kEpiNone = 0, kEpiResidual = 1, kEpiGeluTanh = 2;

// Outputs v0 (column c) and v1 (column c + 1, if two) of row p = y + r * ldy + c, through epilogue EPI; vec2: p is
// 8-byte aligned, so a pair goes out as one float2.
template <int EPI>
__device__ __forceinline__ void store_pair(float* p, float v0, float v1, bool two, bool vec2) {
  if constexpr (EPI == kEpiGeluTanh) v0 = vision_act(v0, 1), v1 = vision_act(v1, 1);
  if (vec2 && two) {
    float2* q = reinterpret_cast<float2*>(p);
    if constexpr (EPI == kEpiResidual) {
      const float2 o = *q;
      v0 = o.x + v0, v1 = o.y + v1;  // tower::add's y + x
    }
    *q = make_float2(v0, v1);
  } else {
    p[0] = EPI == kEpiResidual ? p[0] + v0 : v0;
    if (two) p[1] = EPI == kEpiResidual ? p[1] + v1 : v1;
  }
}

// xb [n, ldw] bf16 (zero beyond in), w [rows_pad(out), ldw] bf16; block BM = 32 * MI rows x 128 cols, 8 warps as
// 2 (rows, 16 * MI each) x 4 (cols, 32 each). Dynamic shared memory: kV2Stages x (BM + 128) x 64 bf16.
template <int MI, int EPI>
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

  // Tile kt into stage st (W's rows never pass rows_pad(out)).
  auto load = [&](int st, int kt) {
    load_tile<BM>(smem + st * (kA + kB), xb, bm, n, ldw, kt);
    load_tile<kV2BN>(smem + st * (kA + kB) + kA, w, bn, INT64_MAX, ldw, kt);
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
        store_pair<EPI>(y + r * ldy + c, acc[mi][ni][2 * h] + b0, acc[mi][ni][2 * h + 1] + b1, c + 1 < out, y2);
      }
    }
}

template <int MI, int EPI>
void launch_bf16_v2(const __nv_bfloat16* xb, const uint16_t* w, int64_t ldw, const float* bias, float* y, int64_t ldy,
                    int64_t n, int64_t out, bool y2, cudaStream_t s) {
  constexpr int bytes = kV2Stages * (32 * MI + kV2BN) * kV2BK * 2;
  static const cudaError_t attr =
      cudaFuncSetAttribute(gemm_bf16_v2_kernel<MI, EPI>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  check(attr, "gemm_bf16 v2 shared memory attribute");
  const dim3 grid(unsigned((out + kV2BN - 1) / kV2BN), unsigned((n + 32 * MI - 1) / (32 * MI)));
  gemm_bf16_v2_kernel<MI, EPI><<<grid, kThreads, bytes, s>>>(xb, reinterpret_cast<const __nv_bfloat16*>(w), ldw, bias,
                                                              y, ldy, n, out, y2);
}

// ---- v3 (sm_90a): the v2 tile layout (rows of 64 bf16, 128-byte XOR swizzle) is exactly wgmma's 128-byte-swizzled
// K-major operand, so the same cp.async pipeline feeds warpgroup MMA. Block 128 x BN x 64: two warpgroups of 64 rows
// sharing the W tile; 4 stages, two tiles' copies in flight while one wgmma group runs. Each output is still one
// chain over k in 16-wide steps from zero, so it depends on neither n nor the tile shape.
constexpr int kV3BM = 128, kV3Stages = 4;

template <int BN>
constexpr int v3_smem_bytes() {
  return kV3Stages * (kV3BM + BN) * kV2BK * 2 + 1024;  // + alignment slack: swizzled tiles start on 1024 bytes
}

// xb [n, ldw] bf16 (zero beyond in), w [wrows, ldw] bf16 (wrows = gemm_rows_pad(out)); y [n, ldy] = xb · wᵀ + bias.
template <int BN, int EPI>
__global__ void __launch_bounds__(kThreads, 1) gemm_bf16_v3_kernel(const __nv_bfloat16* __restrict__ xb,
                                                                 const __nv_bfloat16* __restrict__ w, int64_t ldw,
                                                                 int64_t wrows, const float* __restrict__ bias,
                                                                 float* __restrict__ y, int64_t ldy, int64_t n,
                                                                 int64_t out, bool y2) {
#ifdef RAPID_WGMMA
  constexpr int kA = kV3BM * kV2BK, kB = BN * kV2BK;  // bf16 elements of one stage's x and W tiles
  extern __shared__ uint8_t v3_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(v3_raw));
  __nv_bfloat16* smem = reinterpret_cast<__nv_bfloat16*>(v3_raw + ((1024 - (raw & 1023)) & 1023));
  const int tid = threadIdx.x, wg = tid >> 7, wi = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t bm = int64_t(blockIdx.y) * kV3BM, bn = int64_t(blockIdx.x) * BN;
  const int ktiles = int((ldw + kV2BK - 1) / kV2BK);

  // Tile kt into stage st (BN need not divide W's padded rows).
  auto load = [&](int st, int kt) {
    load_tile<kV3BM>(smem + st * (kA + kB), xb, bm, n, ldw, kt);
    load_tile<BN>(smem + st * (kA + kB) + kA, w, bn, wrows, ldw, kt);
  };

  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
#pragma unroll
  for (int st = 0; st < kV3Stages - 2; ++st) {
    if (st < ktiles) load(st, st);
    cp_async_commit();  // empty groups too: group i is always tile i
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<kV3Stages - 3>();  // tile kt: this thread's copies landed
    fence_proxy_async();             // ... and are visible to wgmma's reads
    // Every thread's copies of tile kt landed, and every warpgroup waited for its wgmma of tile kt - 2 (below, in
    // iteration kt - 1), so that tile's stage may be refilled.
    __syncthreads();
    if (kt + kV3Stages - 2 < ktiles) load((kt + kV3Stages - 2) % kV3Stages, kt + kV3Stages - 2);
    cp_async_commit();
    const __nv_bfloat16* as = smem + (kt % kV3Stages) * (kA + kB) + wg * 64 * kV2BK;  // this warpgroup's 64 rows
    const __nv_bfloat16* bs = smem + (kt % kV3Stages) * (kA + kB) + kA;
    wgmma_fence_regs(acc);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kV2BK; ks += 16) wgmma_bf16<BN>(acc, wgmma_desc(as + ks), wgmma_desc(bs + ks));
    wgmma_commit();
    wgmma_wait<1>();  // tile kt - 1's group is done; tile kt's may still run
    wgmma_fence_regs(acc);
  }
  wgmma_wait<0>();
  wgmma_fence_regs(acc);
  cp_async_wait<0>();  // no copy may land after the block exits

  const int64_t r0 = bm + wg * 64 + wi * 16 + g;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int64_t c = bn + 8 * j + 2 * t;
    if (c >= out) continue;
    const float b0 = bias ? bias[c] : 0.f, b1 = bias && c + 1 < out ? bias[c + 1] : 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = r0 + 8 * h;
      if (r >= n) continue;
      store_pair<EPI>(y + r * ldy + c, acc[4 * j + 2 * h] + b0, acc[4 * j + 2 * h + 1] + b1, c + 1 < out, y2);
    }
  }
#else
  __trap();  // never launched: the host takes v3 only where wgmma_supported()
#endif
}

template <int BN, int EPI>
void launch_bf16_v3(const __nv_bfloat16* xb, const uint16_t* w, int64_t ldw, const float* bias, float* y, int64_t ldy,
                    int64_t n, int64_t out, bool y2, cudaStream_t s) {
  constexpr int bytes = v3_smem_bytes<BN>();
  static const cudaError_t attr =
      cudaFuncSetAttribute(gemm_bf16_v3_kernel<BN, EPI>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  check(attr, "gemm_bf16 v3 shared memory attribute");
  const dim3 grid(unsigned((out + BN - 1) / BN), unsigned((n + kV3BM - 1) / kV3BM));
  gemm_bf16_v3_kernel<BN, EPI><<<grid, kThreads, bytes, s>>>(xb, reinterpret_cast<const __nv_bfloat16*>(w), ldw,
                                                              gemm_rows_pad(out), bias, y, ldy, n, out, y2);
}

// The v3 tile widths and their speed per output relative to 128 (a wider tile reads fewer bytes per product; H100,
// the towers' shapes, cuda_tower_bench --gemm): a launch takes the width of least estimated time, whole waves of one
// block per multiprocessor. On the nine shapes timed this picks the fastest width or one within 5% of it.
constexpr double kV3Speed[] = {0.8, 0.85, 1.0, 1.08};

// RAPID_CUDA_TOWER_GEMM: "v2" (the mma.sync kernel), "v3" or unset (v3 where wgmma_supported(), else v2), "v3-N"
// (v3 with tile width N, for A/B runs). Read per call so a bench can switch it between encodes.
int gemm_choice() {
  const char* e = std::getenv("RAPID_CUDA_TOWER_GEMM");
  if (!wgmma_supported() || (e && std::strcmp(e, "v2") == 0)) return 0;
  if (e && std::strncmp(e, "v3-", 3) == 0) {
    const int bn = std::atoi(e + 3);
    for (const int wdt : kGemmV3Widths)
      if (wdt == bn) return bn;
  }
  return -1;  // v3, width by estimate
}

int v3_width(int64_t n, int64_t out) {
  int best = 128;
  double best_cost = 0;
  for (size_t i = 0; i < std::size(kGemmV3Widths); ++i) {
    const int64_t tiles = (out + kGemmV3Widths[i] - 1) / kGemmV3Widths[i] * ((n + kV3BM - 1) / kV3BM);
    const double cost = double((tiles + sm_count() - 1) / sm_count()) * kGemmV3Widths[i] / kV3Speed[i];
    if (i == 0 || cost < best_cost) best = kGemmV3Widths[i], best_cost = cost;
  }
  return best;
}

constexpr int kFM = 64, kFN = 64, kFK = 16;

template <int EPI>
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
      if (c < out) store_pair<EPI>(y + r * ldy + c, acc[i][j] + (bias ? bias[c] : 0.f), 0.f, false, false);
    }
  }
}

// Calls f(std::integral_constant<int, EPI>) for the epilogue `ep` asks for (dense_gemm.h: gelu (tanh) or a residual).
template <class F>
void with_epilogue(GemmEpilogue ep, F&& f) {
  if ((ep.act >= 0 && ep.accumulate) || (ep.act != -1 && ep.act != 1))
    throw std::invalid_argument("dense GEMM epilogue: gelu (tanh) or a residual add, one at a time");
  if (ep.accumulate) f(std::integral_constant<int, kEpiResidual>{});
  else if (ep.act == 1) f(std::integral_constant<int, kEpiGeluTanh>{});
  else f(std::integral_constant<int, kEpiNone>{});
}

}  // namespace

void gemm_bf16(const float* x, int64_t ldx, const uint16_t* w, const float* bias, float* y, int64_t ldy, int64_t n,
               int64_t out, int64_t in, cudaStream_t s, GemmEpilogue ep) {
  if (n <= 0 || out <= 0) return;
  const int64_t ldw = gemm_k_pad(in);
  const bool vec = in % 4 == 0 && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  // x rounded to bf16 once, into stream-ordered scratch [n, ldw] (zero beyond in), freed after the GEMM reads it.
  void* xb = nullptr;
  check(cudaMallocAsync(&xb, size_t(n * ldw) * 2, s), "cudaMallocAsync (gemm_bf16 staging)");
  auto* xbh = static_cast<__nv_bfloat16*>(xb);
  const int64_t chunks = n * (ldw / 8);
  const unsigned sblocks = unsigned((chunks + 255) / 256);
  if (vec) stage_bf16_kernel<true><<<sblocks, 256, 0, s>>>(x, ldx, in, xbh, ldw, n);
  else stage_bf16_kernel<false><<<sblocks, 256, 0, s>>>(x, ldx, in, xbh, ldw, n);
  const bool y2 = ldy % 2 == 0 && reinterpret_cast<uintptr_t>(y) % 8 == 0;
  const int choice = gemm_choice();
  with_epilogue(ep, [&](auto epi) {
    constexpr int E = decltype(epi)::value;
    if (choice != 0) {
      switch (choice > 0 ? choice : v3_width(n, out)) {
        case 64: launch_bf16_v3<64, E>(xbh, w, ldw, bias, y, ldy, n, out, y2, s); break;
        case 96: launch_bf16_v3<96, E>(xbh, w, ldw, bias, y, ldy, n, out, y2, s); break;
        case 192: launch_bf16_v3<192, E>(xbh, w, ldw, bias, y, ldy, n, out, y2, s); break;
        default: launch_bf16_v3<128, E>(xbh, w, ldw, bias, y, ldy, n, out, y2, s); break;
      }
      return;
    }
    // Row tile of least estimated time: waves of two blocks per multiprocessor x rows per block, 64-row tiles ~15%
    // slower per row (fewer mma per fragment load). 4096 x 1152 on 132 SMs: 288 blocks of 128 rows take 2 waves.
    const int64_t col_blocks = (out + kV2BN - 1) / kV2BN;
    const auto cost = [&](int64_t bm, double per_row) {
      const int64_t blocks = col_blocks * ((n + bm - 1) / bm), slots = 2 * int64_t(sm_count());
      return double((blocks + slots - 1) / slots) * double(bm) * per_row;
    };
    if (cost(128, 1.0) <= cost(64, 1.15)) launch_bf16_v2<4, E>(xbh, w, ldw, bias, y, ldy, n, out, y2, s);
    else launch_bf16_v2<2, E>(xbh, w, ldw, bias, y, ldy, n, out, y2, s);
  });
  const cudaError_t launched = cudaGetLastError();
  check(cudaFreeAsync(xb, s), "cudaFreeAsync (gemm_bf16 staging)");
  check(launched, "gemm_bf16 launch");
}

void gemm_f32(const float* x, int64_t ldx, const float* w, const float* bias, float* y, int64_t ldy, int64_t n,
              int64_t out, int64_t in, cudaStream_t s, GemmEpilogue ep) {
  if (n <= 0 || out <= 0) return;
  const dim3 grid(unsigned((out + kFN - 1) / kFN), unsigned((n + kFM - 1) / kFM));
  with_epilogue(ep, [&](auto epi) {
    gemm_f32_kernel<decltype(epi)::value><<<grid, kThreads, 0, s>>>(x, ldx, w, gemm_k_pad(in), bias, y, ldy, n, out, in);
  });
  check(cudaGetLastError(), "gemm_f32 launch");
}

}  // namespace rapid::cuda
