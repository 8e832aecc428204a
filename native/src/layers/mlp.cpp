#include "layers/mlp.h"
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
  linear(pool, m.gate, x, g, n, p);
  linear(pool, m.up, x, u, n, p);
  pool.parallel_for(n * ffn, [&](int64_t b, int64_t e) { vec::glu(g + b, u + b, e - b, m.act); }, 64);
  linear(pool, m.down, g, y, n, p);
}

}  // namespace rapid
