#include "layers/linear.h"
#include <stdexcept>
#include "cpu/matmul_parts.h"

namespace rapid {

std::vector<float> load_vector_f32(const Checkpoint& ckpt, const std::string& name, int64_t len) {
  const TensorView& t = ckpt.get(name);
  if (t.numel() != len || !is_float_dtype(t.dtype))
    throw std::runtime_error("tensor " + name + " has shape " + t.shape_str() + " dtype " + dtype_name(t.dtype) +
                             ", expected " + std::to_string(len) + " float elements");
  std::vector<float> v(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) v[size_t(i)] = load_float(t.data, t.dtype, size_t(i));
  return v;
}

Linear load_linear(const Checkpoint& ckpt, const QuantConfig& qc, const std::string& path, int64_t out, int64_t in,
                   bool with_bias) {
  Linear l;
  l.w = load_weight(ckpt, qc, path);
  if (l.w.out != out || l.w.in != in)
    throw std::runtime_error("module " + path + " has shape [" + std::to_string(l.w.out) + ", " +
                             std::to_string(l.w.in) + "], expected [" + std::to_string(out) + ", " +
                             std::to_string(in) + "]");
  if (with_bias) l.bias = load_vector_f32(ckpt, path + ".bias", out);
  return l;
}

static void add_bias(const Linear& l, float* y, int64_t n) {
  if (l.bias.empty()) return;
  const int64_t out = l.out();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) y[r * out + o] += l.bias[size_t(o)];
}

void linear(ThreadPool& pool, const Linear& l, const float* x, float* y, int64_t n, Precision p) {
  matmul(pool, l.w, x, y, n, p);
  add_bias(l, y, n);
}

void linear_parts(ThreadPool& pool, std::initializer_list<LinearPart> parts, const float* x, int64_t n, Precision p) {
  std::vector<MatmulPart> mp;  // [parts]
  mp.reserve(parts.size());
  for (const LinearPart& lp : parts) mp.push_back({&lp.l->w, lp.y});
  matmul_parts(pool, mp.data(), int(mp.size()), x, n, p);
  for (const LinearPart& lp : parts) add_bias(*lp.l, lp.y, n);
}

}  // namespace rapid
