// The CPU Fast path's weight copies of a loaded decoder, made at load rather than in the first step.
#pragma once
#include <cstdint>
#include "cpu/matmul.h"
#include "cpu/threadpool.h"
#include "models/model.h"

namespace rapid {

// Builds the interleaved copy (cpu/gemv_interleaved.h) of every 4-bit linear of the text decoder and its
// head (dense layers; MoE experts keep their kernels), and of every 8-bit one on AVX2, when the kernel
// family in use reads the copies at every batch size, and drops the row-major pages they replace. No-op
// for Exact precision, for a model without decoder parts, or a family without the interleaved kernels.
// Returns the weights copied.
int64_t make_cpu_weight_copies(const Model& model, ThreadPool& pool, Precision p);

}  // namespace rapid
