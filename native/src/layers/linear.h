// A linear layer: a Weight view (dense or MLX affine) plus an optional f32 bias (Qwen2 q/k/v).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>
#include "cpu/matmul.h"
#include "quant/mlx_quant.h"
#include "tensor/weight.h"

namespace rapid {

struct Linear {
  Weight w;                 // [out, in]
  std::vector<float> bias;  // [out] or empty
  int64_t out() const { return w.out; }
  int64_t in() const { return w.in; }
};

// Loads `<path>` (weight, scales/biases when quantized) and, if with_bias, `<path>.bias`.
// Checks the logical shape [out, in]; throws naming the module on a mismatch.
Linear load_linear(const Checkpoint& ckpt, const QuantConfig& qc, const std::string& path, int64_t out, int64_t in,
                   bool with_bias);

// y[n, out] = x[n, in] · Wᵀ (+ bias).
void linear(ThreadPool& pool, const Linear& l, const float* x, float* y, int64_t n, Precision p);

// One linear of a fused group and its output y [n, out].
struct LinearPart {
  const Linear* l = nullptr;
  float* y = nullptr;
};

// Several linears over the same x (q/k/v): one fused matmul (cpu/matmul_parts.h), then the biases.
// Bit-identical to a linear() call per part.
void linear_parts(ThreadPool& pool, std::initializer_list<LinearPart> parts, const float* x, int64_t n, Precision p);

// Copies a 1-D float tensor of `len` elements to f32; throws naming it on a shape mismatch.
std::vector<float> load_vector_f32(const Checkpoint& ckpt, const std::string& name, int64_t len);

}  // namespace rapid
