#include "layers/mlp.h"
#include "cpu/matmul_parts.h"
#include "layers/vec_math.h"

namespace rapid {

GatedMlp load_gated_mlp(const Checkpoint& ckpt, const QuantConfig& qc, const std::string& prefix, int64_t hidden,
                        int64_t ffn, Activation act) {
  GatedMlp m;
  m.gate = load_linear(ckpt, qc, prefix + ".gate_proj", ffn, hidden, false);
  m.up = load_linear(ckpt, qc, prefix + ".up_proj", ffn, hidden, false);
  m.down = load_linear(ckpt, qc, prefix + ".down_proj", hidden, ffn, false);
  m.act = act;
  return m;
}

void gated_mlp(ThreadPool& pool, const Linear& gate, const Linear& up, const Linear& down, Activation act,
               const float* x, float* y, float* g, float* u, int64_t n, Precision p) {
  const int64_t ffn = gate.out();  // g, u [n, ffn]
  matmul_pair(pool, gate.w, up.w, x, g, u, n, p, [&](int64_t r0, int64_t r1) {
    for (int64_t c = 0; c < n; ++c) {
      float* gc = g + c * ffn;
      float* uc = u + c * ffn;
      // The biases as linear() adds them (after the matmul, before the activation).
      if (!gate.bias.empty())
        for (int64_t r = r0; r < r1; ++r) gc[r] += gate.bias[size_t(r)];
      if (!up.bias.empty())
        for (int64_t r = r0; r < r1; ++r) uc[r] += up.bias[size_t(r)];
      vec::glu(gc + r0, uc + r0, r1 - r0, act);
    }
  });
  linear(pool, down, g, y, n, p);
}

void gated_mlp(ThreadPool& pool, const GatedMlp& m, const float* x, float* y, int64_t n, Precision p,
               std::vector<float>& scratch) {
  const int64_t ffn = m.gate.out();
  scratch.resize(size_t(2 * n * ffn));
  gated_mlp(pool, m.gate, m.up, m.down, m.act, x, y, scratch.data(), scratch.data() + n * ffn, n, p);
}

}  // namespace rapid
