// RMSNorm over the last dimension, computed in f32 (as transformers does for every family here).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rapid {

class Checkpoint;
class ThreadPool;

// A norm's weight, converted to f32 once at load. offset: Gemma's `(1 + w)` form, folded in at load.
struct NormWeight {
  std::vector<float> w;  // [dim] effective multiplier (already 1 + w for Gemma)
  float eps = 1e-6f;
  int64_t dim() const { return int64_t(w.size()); }
};

// Reads `<name>.weight` (any float dtype, shape [dim]); throws naming the tensor if missing or mis-shaped.
NormWeight load_norm(const Checkpoint& ckpt, const std::string& name, int64_t dim, float eps, bool gemma_offset);

// y[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * w for r in [0, rows); x [rows, dim], y [rows, dim]; may alias.
void rms_norm(const float* x, float* y, int64_t rows, const NormWeight& nw);

// rms_norm split over rows on the pool (serial below ~32K elements, where dispatch costs more than it
// saves). Rows are independent, so the result does not depend on the split.
void rms_norm_rows(ThreadPool& pool, const float* x, float* y, int64_t rows, const NormWeight& nw);

}  // namespace rapid
