// Gated MLP: down(act(gate(x)) * up(x)) — SwiGLU (silu) or GeGLU (gelu_tanh).
#pragma once
#include <vector>
#include "layers/activations.h"
#include "layers/linear.h"

namespace rapid {

struct GatedMlp {
  Linear gate, up, down;  // gate/up [ffn, hidden], down [hidden, ffn]
  Activation act = Activation::Silu;
};

GatedMlp load_gated_mlp(const Checkpoint& ckpt, const QuantConfig& qc, const std::string& prefix, int64_t hidden,
                        int64_t ffn, Activation act);

// y [n, down.out] = down(act(gate(x)) * up(x)) (+ biases): gate and up in one pass over x (cpu/matmul_parts.h), each
// thread applying bias and activation to the rows it computed; bitwise the linear() calls and GLU it replaces.
// g, u: scratch [n, gate.out] each. y may alias x.
void gated_mlp(ThreadPool& pool, const Linear& gate, const Linear& up, const Linear& down, Activation act,
               const float* x, float* y, float* g, float* u, int64_t n, Precision p);

// x [n, hidden] -> y [n, hidden]; scratch is resized as needed ([2, n, ffn]).
void gated_mlp(ThreadPool& pool, const GatedMlp& m, const float* x, float* y, int64_t n, Precision p,
               std::vector<float>& scratch);

}  // namespace rapid
