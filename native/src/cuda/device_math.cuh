// Device helpers shared by the CUDA kernels: element loads of the checkpoint dtypes and warp reductions
// with a fixed shuffle tree (the same result whatever else runs in the launch).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace rapid::cuda {

__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }
__device__ __forceinline__ float f16_bits_to_float(uint16_t b) { return __half2float(__ushort_as_half(b)); }

// Element i of a tensor of `dtype` (0 = F32, 1 = F16, 2 = BF16, matching the host DType order).
__device__ __forceinline__ float load_elem(const void* p, int64_t i, int dtype) {
  if (dtype == 0) return static_cast<const float*>(p)[i];
  const uint16_t b = static_cast<const uint16_t*>(p)[i];
  return dtype == 1 ? f16_bits_to_float(b) : bf16_bits_to_float(b);
}

// Rotate-half RoPE of the pair (a, b) = (x[j], x[j + half]) by (c, s), as rope.cpp apply_rope.
__device__ __forceinline__ float2 rotate(float a, float b, float c, float s) {
  return make_float2(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)), __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// True when candidate (v, i) beats (bv, bi) in the greedy order (larger value, then lower id); bi = -1 means
// "none yet", and a candidate with i = -1 never wins.
__device__ __forceinline__ bool better_pair(float v, int32_t i, float bv, int32_t bi) {
  if (i < 0) return false;
  if (bi < 0) return true;
  return v > bv || (v == bv && i < bi);
}

// The warp's best (value, id) pair by better_pair, with a fixed shuffle tree; every lane gets it.
__device__ __forceinline__ void warp_best(float& bv, int32_t& bi) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (better_pair(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
}

// Threads of a block that reduces one row with row_inv_rms.
constexpr int kNormThreads = 256;

// 1 / sqrt(mean(x^2) + eps) of a row, as norm.cpp: float(ss / dim) + eps, IEEE sqrt and division; ss[v] is the f64
// sum of squares over elements t, t + kNormThreads, ... of thread t = threadIdx.x + v·KT (a block of KT threads holds
// V = kNormThreads / KT of them each). Call with all KT threads of the block (fixed shuffle tree, then the
// kNormThreads / 32 warp sums in order, so any KT gives the same bits); every thread gets the result.
template <int KT, int V>
__device__ __forceinline__ float row_inv_rms_parts(const double (&ss)[V], int64_t dim, float eps) {
  static_assert(KT * V == kNormThreads, "the partial sums cover kNormThreads threads");
  __shared__ double part[kNormThreads / 32];
  __shared__ float inv_s;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const double w = warp_sum_f64(ss[v]);
    if ((threadIdx.x & 31) == 0) part[(threadIdx.x >> 5) + v * (KT / 32)] = w;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double tot = 0;
    for (int w = 0; w < kNormThreads / 32; ++w) tot += part[w];
    inv_s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(float(tot / double(dim)), eps)));
  }
  __syncthreads();
  return inv_s;
}

// row_inv_rms_parts with kNormThreads threads, ss this thread's sum.
__device__ __forceinline__ float row_inv_rms(double ss, int64_t dim, float eps) {
  const double parts[1] = {ss};
  return row_inv_rms_parts<kNormThreads, 1>(parts, dim, eps);
}

// row_inv_rms of the row xr [dim]: each thread's f64 sum of squares over its elements, in order (the CPU's
// layers/norm.cpp accumulates in f64 too). Call with all kNormThreads threads of the block.
__device__ __forceinline__ float row_inv_rms_of(const float* xr, int64_t dim, float eps) {
  double ss = 0;
#pragma unroll 4  // the loads of four iterations go out together; the sum keeps its order
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) {
    const double v = xr[i];
    ss = fma(v, v, ss);
  }
  return row_inv_rms(ss, dim, eps);
}

// The GLU activation: 0 = silu, 1 = gelu_tanh (PyTorch formulas, explicitly rounded like the CPU).
__device__ __forceinline__ float glu_act(float g, int act) {
  if (act == 0) return __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
  const float k = 0.7978845608028654f;
  const float inner = __fmul_rn(k, __fadd_rn(g, __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, g), g), g)));
  return __fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, tanhf(inner)));
}

// The towers' activations (ops::VAct order): silu, gelu (tanh), gelu (erf), quick_gelu; the CPU's formulas
// (vision_blocks.cpp). One definition for the pointwise kernel and the GEMM epilogues, so both give the same bits.
__device__ __forceinline__ float vision_act(float x, int a) {
  if (a <= 1) return glu_act(x, a);                                       // silu, gelu (tanh)
  if (a == 2) return x * 0.5f * (1.0f + erff(x * 0.70710678118654752f));  // gelu (erf)
  return x / (1.0f + expf(-1.702f * x));                                  // quick_gelu
}

}  // namespace rapid::cuda

namespace rapid::cuda {

// *p += v at gpu scope with acquire-release order; returns the old value. Called by one thread after a block barrier,
// it publishes the block's earlier writes, and the block that reads the final count sees every other block's writes
// after its own barrier (the pattern of CUTLASS's split-K semaphores), without a full fence in every thread.
__device__ __forceinline__ int atomic_add_acq_rel(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// Asynchronous 16-byte global -> shared copy (sm_80+), bypassing L1: K/V rows are read once per block.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

}  // namespace rapid::cuda
