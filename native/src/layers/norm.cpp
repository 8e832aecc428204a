#include "layers/norm.h"
#include <cmath>
#include <stdexcept>
#include "cpu/threadpool.h"
#include "format/safetensors.h"

namespace rapid {

NormWeight load_norm(const Checkpoint& ckpt, const std::string& name, int64_t dim, float eps, bool gemma_offset) {
  const TensorView& t = ckpt.get(name + ".weight");
  if (t.shape.size() != 1 || t.shape[0] != dim)
    throw std::runtime_error("tensor " + t.name + " has shape " + t.shape_str() + ", expected [" +
                             std::to_string(dim) + "]");
  if (!is_float_dtype(t.dtype))
    throw std::runtime_error("tensor " + t.name + " has dtype " + dtype_name(t.dtype) + ", expected a float type");
  NormWeight nw;
  nw.eps = eps;
  nw.w.resize(size_t(dim));
  // Gemma computes (1 + w.float()) in f32; adding here gives the identical f32 value.
  for (int64_t i = 0; i < dim; ++i) nw.w[size_t(i)] = load_float(t.data, t.dtype, size_t(i)) + (gemma_offset ? 1.0f : 0.0f);
  return nw;
}

void rms_norm(const float* x, float* y, int64_t rows, const NormWeight& nw) {
  const int64_t dim = nw.dim();
  const float* w = nw.w.data();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;  // [dim]
    float* yr = y + r * dim;        // [dim]
    double ss = 0;                  // double accumulation: order-independent to well below f32 ulp
    for (int64_t i = 0; i < dim; ++i) ss += double(xr[i]) * double(xr[i]);
    const float inv = 1.0f / std::sqrt(float(ss / double(dim)) + nw.eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] * inv) * w[i];
  }
}

void rms_norm_rows(ThreadPool& pool, const float* x, float* y, int64_t rows, const NormWeight& nw) {
  const int64_t dim = nw.dim();
  if (rows * dim < 32768) return rms_norm(x, y, rows, nw);
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) { rms_norm(x + r0 * dim, y + r0 * dim, r1 - r0, nw); });
}

}  // namespace rapid
