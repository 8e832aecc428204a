// LayerNorm over the last dimension with elementwise affine, computed in f32 (SigLIP, Qwen3-VL vision).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rapid {

class Checkpoint;
class ThreadPool;

// nn.LayerNorm with elementwise affine: y = (x - mean) / sqrt(var + eps) * w + b (biased variance).
struct LayerNormW {
  std::vector<float> w, b;  // [dim] each
  float eps = 1e-6f;
  int64_t dim() const { return int64_t(w.size()); }
};

// Reads `<name>.weight` and `<name>.bias` (any float dtype, shape [dim]); throws naming a missing tensor.
LayerNormW load_layer_norm(const Checkpoint& ckpt, const std::string& name, int64_t dim, float eps);

// x [rows, dim] -> y [rows, dim]; may alias. Parallel over rows (the split does not change the result).
void layer_norm(ThreadPool& pool, const float* x, float* y, int64_t rows, const LayerNormW& ln);

}  // namespace rapid
