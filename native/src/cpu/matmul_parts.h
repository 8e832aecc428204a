// Fused matmuls over several weights that read the same activations (q/k/v; gate/up): the activations
// are quantized once and every weight's rows are split over the pool in a single dispatch. Each row is
// computed by the kernel matmul() runs for it, so the results are bit-identical to separate calls.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include "cpu/matmul.h"

namespace rapid {

// One weight of a fused matmul and its output y [n, w->out].
struct MatmulPart {
  const Weight* w = nullptr;
  float* y = nullptr;
};

// y_i[n, W_i.out] = x[n, in] · W_iᵀ for every part (all with the same `in`).
void matmul_parts(ThreadPool& pool, const MatmulPart* parts, int count, const float* x, int64_t n, Precision p);

// ya = x · Aᵀ and yb = x · Bᵀ for A and B of one shape (gate/up); rows [r0, r1) of both are computed by
// one thread, which then runs epilogue(r0, r1) on them (the gated activation): one dispatch in all.
// r0, and r1 unless it is A.out, are multiples of 8 (an 8-wide SIMD epilogue splits every row alike).
void matmul_pair(ThreadPool& pool, const Weight& a, const Weight& b, const float* x, float* ya, float* yb,
                 int64_t n, Precision p, const std::function<void(int64_t r0, int64_t r1)>& epilogue);

// How decode runs its matmuls on this CPU, for `rapid doctor`: the fusions, the row split and the
// software prefetch distance.
std::string decode_matmul_description();

}  // namespace rapid
