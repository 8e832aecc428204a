// Internal to native/src/cpu: the steps of the matmul driver's Fast path that the fused matmuls
// (cpu/matmul_parts.cpp) share with it, so both run the same kernels on the same quantized activations.
#pragma once
#include <cstddef>
#include <cstdint>
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

}  // namespace rapid::detail
