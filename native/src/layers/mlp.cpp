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

void gated_mlp(ThreadPool& pool, const GatedMlp& m, const float* x, float* y, int64_t n, Precision p,
               std::vector<float>& scratch) {
  const int64_t ffn = m.gate.out();
  scratch.resize(size_t(2 * n * ffn));
  float* g = scratch.data();       // [n, ffn]
  float* u = g + n * ffn;          // [n, ffn]
  // gate and up in one pass over x, each thread applying the activation to the rows it just computed.
  matmul_pair(pool, m.gate.w, m.up.w, x, g, u, n, p, [&](int64_t r0, int64_t r1) {
    for (int64_t c = 0; c < n; ++c) vec::glu(g + c * ffn + r0, u + c * ffn + r0, r1 - r0, m.act);
  });
  linear(pool, m.down, g, y, n, p);
}

}  // namespace rapid
