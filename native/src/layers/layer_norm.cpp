#include "layers/layer_norm.h"
#include <cmath>
#include "cpu/threadpool.h"
#include "layers/linear.h"

namespace rapid {

LayerNormW load_layer_norm(const Checkpoint& ckpt, const std::string& name, int64_t dim, float eps) {
  LayerNormW ln;
  ln.w = load_vector_f32(ckpt, name + ".weight", dim);
  ln.b = load_vector_f32(ckpt, name + ".bias", dim);
  ln.eps = eps;
  return ln;
}

void layer_norm(ThreadPool& pool, const float* x, float* y, int64_t rows, const LayerNormW& ln) {
  const int64_t dim = ln.dim();
  auto body = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;  // [dim]
      float* yr = y + r * dim;        // [dim]
      double s = 0;                   // double accumulation: order-independent to well below f32 ulp
      for (int64_t i = 0; i < dim; ++i) s += xr[i];
      const float mean = float(s / double(dim));
      double v = 0;
      for (int64_t i = 0; i < dim; ++i) {
        const double d = double(xr[i]) - double(mean);
        v += d * d;
      }
      const float inv = 1.0f / std::sqrt(float(v / double(dim)) + ln.eps);
      for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] - mean) * inv * ln.w[size_t(i)] + ln.b[size_t(i)];
    }
  };
  if (rows * dim >= 32768) pool.parallel_for(rows, body);
  else body(0, rows);
}

}  // namespace rapid
