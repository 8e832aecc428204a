// Internal to native/src/cpu: the steps of the matmul driver's Fast path that the fused matmuls
// (cpu/matmul_parts.cpp) share with it, so both run the same kernels on the same quantized activations.
#pragma once
#include <cstddef>
#include <cstdint>
#include "cpu/gemv_interleaved.h"
#include "cpu/kernels.h"
#include "cpu/threadpool.h"
#include "tensor/weight.h"

namespace rapid::detail {

// The kernel family in use (run-time pick, or the one a test forced).
const kern::Kernels& active_kernels();

// Whether W runs the int8-activation Fast path under Precision::Fast.
bool fast_path_ok(const Weight& W);

// Per-thread growable scratch (pool threads are persistent, so this allocates once).
float* thread_scratch(size_t n);

// Quantizes x [n, ldx] for W's Fast layout into the calling thread's buffers (valid until its next call);
// pool threads help when the rows are many.
kern::XQuant quantize_activations(ThreadPool& pool, const kern::Kernels& k, const Weight& W, const float* x,
                                  int64_t ldx, int64_t n);

// W's interleaved copy (cpu/gemv_interleaved.h) when a Fast matmul of n rows on family k runs on it (the
// GEMV at n = 1, the interleaved GEMM above; built here if the load did not: call on the dispatching
// thread, before the rows are split), else nullptr.
inline const InterleavedRows* interleaved_for(ThreadPool& pool, const kern::Kernels& k, const Weight& W, int64_t n) {
  const bool has = n == 1 ? k.gemv_interleaved(W.bits) != nullptr : k.gemm_interleaved(W.bits) != nullptr;
  return has ? interleaved_rows(W, pool) : nullptr;
}

// Rows [r0, r1) of a Fast matmul: the interleaved kernels where il is set, else the row kernels.
inline void fast_rows_on(const kern::Kernels& k, const InterleavedRows* il, const Weight& W, const kern::XQuant& xq,
                         int64_t n, int64_t r0, int64_t r1, float* y, int64_t ldy, float* scratch) {
  if (il == nullptr) k.fast_rows(W, xq, n, r0, r1, y, ldy, scratch);
  else if (n == 1) k.gemv_interleaved(il->bits)(*il, xq, r0, r1, y);
  else k.gemm_interleaved(il->bits)(*il, xq, n, r0, r1, y, ldy);
}

// Row alignment of a split feeding the interleaved GEMV: whole 16-row blocks (two 8-bit blocks) per thread chunk.
constexpr int64_t kInterleavedAlign = kInterleaveRows;

}  // namespace rapid::detail
