// Greedy token selection on the device: per row, the lowest id among the maximal allowed finite logits.
// (max value, then min id) is a total order, so the fixed-tree reduction gives the same answer whatever
// the row's neighbours; NaN and +-inf never win, and a row with no allowed finite logit yields -1.
#include <cmath>
#include <cstdint>
#include "cuda/cuda_kernels.h"
#include "cuda/device_math.cuh"

namespace rapid::cuda {

namespace {

constexpr int kArgThreads = 1024;

// True when candidate (v, i) beats (bv, bi); bi = -1 means "none yet".
__device__ __forceinline__ bool better(float v, int32_t i, float bv, int32_t bi) {
  if (i < 0) return false;
  if (bi < 0) return true;
  return v > bv || (v == bv && i < bi);
}

// The warp's best (value, id) pair by `better`, with a fixed shuffle tree.
__device__ __forceinline__ void warp_best(float& bv, int32_t& bi) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
}

// logits [m, vocab]; masks [*, words] bit set = allowed; mask_of [m] (-1 = no mask) or null.
__global__ void __launch_bounds__(kArgThreads) argmax_kernel(const float* __restrict__ logits, int64_t vocab,
                                                             const uint32_t* __restrict__ masks,
                                                             const int32_t* __restrict__ mask_of,
                                                             int32_t* __restrict__ tokens) {
  const int64_t r = blockIdx.x;
  const float* x = logits + r * vocab;
  const int64_t words = (vocab + 31) / 32;
  const int32_t mrow = (masks != nullptr && mask_of != nullptr) ? mask_of[r] : -1;
  const uint32_t* mk = mrow >= 0 ? masks + int64_t(mrow) * words : nullptr;
  float bv = 0.0f;
  int32_t bi = -1;
  // Ascending ids per thread: strict > keeps the lowest id of equal values.
  for (int64_t i = threadIdx.x; i < vocab; i += kArgThreads) {
    const float v = x[i];
    if (!isfinite(v)) continue;
    if (mk && !((mk[i >> 5] >> (i & 31)) & 1u)) continue;
    if (bi < 0 || v > bv) {
      bv = v;
      bi = int32_t(i);
    }
  }
  warp_best(bv, bi);
  __shared__ float sv[kArgThreads / 32];
  __shared__ int32_t si[kArgThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    bv = sv[lane];
    bi = si[lane];
    warp_best(bv, bi);
    if (lane == 0) tokens[r] = bi;
  }
}

}  // namespace

void argmax_rows(const float* logits, int64_t m, int64_t vocab, const uint32_t* masks, const int32_t* mask_of,
                 int32_t* tokens, cudaStream_t s) {
  if (m <= 0) return;
  argmax_kernel<<<unsigned(m), kArgThreads, 0, s>>>(logits, vocab, masks, mask_of, tokens);
  check(cudaGetLastError(), "argmax_rows launch");
}

}  // namespace rapid::cuda
