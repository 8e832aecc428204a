#include "cpu/cpu_ops.h"
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include "cpu/matmul.h"
#include "cpu/segment_attention.h"
#include "layers/activations.h"
#include "layers/mlp.h"
#include "layers/vec_math.h"
#include "quant/mlx_quant.h"

namespace rapid::ops {

namespace {

// Elementwise work below this many floats runs inline: a pool dispatch would cost more than it saves.
constexpr int64_t kParallelFloats = 32768;

// fn(r0, r1) over [0, rows), split on the pool when rows * width is large. Rows are independent, so the
// result never depends on the split.
template <class F>
void for_rows(ThreadPool& pool, int64_t rows, int64_t width, F&& fn) {
  if (rows * width >= kParallelFloats) pool.parallel_for(rows, fn);
  else fn(int64_t(0), rows);
}

// torch.nn.functional.gelu(x) (exact, erf form).
inline float gelu_erf(float x) { return x * 0.5f * (1.0f + std::erf(x * 0.70710678118654752f)); }
inline float quick_gelu(float x) { return x / (1.0f + std::exp(-1.702f * x)); }

// Ones for routing a plain activation through the SIMD GLU kernel: act(x) * 1 == act(x) exactly.
constexpr int64_t kOnes = 4096;
const float* ones() {
  static const std::vector<float> v(size_t(kOnes), 1.0f);
  return v.data();
}

void activate(float* x, int64_t n, VAct a) {
  switch (a) {
    case VAct::Silu:
    case VAct::GeluTanh: {
      const Activation act = a == VAct::Silu ? Activation::Silu : Activation::GeluTanh;
      for (int64_t i = 0; i < n; i += kOnes) vec::glu(x + i, ones(), std::min(kOnes, n - i), act);
      break;
    }
    case VAct::GeluErf:
      for (int64_t i = 0; i < n; ++i) x[i] = gelu_erf(x[i]);
      break;
    case VAct::QuickGelu:
      for (int64_t i = 0; i < n; ++i) x[i] = quick_gelu(x[i]);
      break;
  }
}

void activate_mul(float* gate, const float* up, int64_t n, VAct a) {
  switch (a) {
    case VAct::Silu: vec::glu(gate, up, n, Activation::Silu); break;
    case VAct::GeluTanh: vec::glu(gate, up, n, Activation::GeluTanh); break;
    case VAct::GeluErf:
      for (int64_t i = 0; i < n; ++i) gate[i] = gelu_erf(gate[i]) * up[i];
      break;
    case VAct::QuickGelu:
      for (int64_t i = 0; i < n; ++i) gate[i] = quick_gelu(gate[i]) * up[i];
      break;
  }
}

void check_taps(const Taps& t, const char* op) {
  if (t.k < 1 || t.idx.size() % size_t(t.k) != 0 || (!t.w.empty() && t.w.size() != t.idx.size()))
    throw std::invalid_argument(std::string(op) + ": taps need k >= 1, idx a multiple of k and w empty or as long");
}

// acc [width] = Σ_j w_j · row(idx_j) for output row i, from 0 in tap order; `row(r, buf)` gives source row r.
template <class Row>
void tap_sum(const Taps& t, int64_t i, int64_t width, float* acc, float* buf, Row&& row) {
  std::fill(acc, acc + width, 0.0f);
  for (int j = 0; j < t.k; ++j) {
    const size_t tap = size_t(i * t.k + j);
    const float* src = row(t.idx[tap], buf);  // [width]
    if (t.w.empty()) {
      for (int64_t d = 0; d < width; ++d) acc[d] += src[d];
    } else {
      const float wt = t.w[tap];
      for (int64_t d = 0; d < width; ++d) acc[d] += src[d] * wt;
    }
  }
  if (t.div != 1.0f)
    for (int64_t d = 0; d < width; ++d) acc[d] /= t.div;
}

}  // namespace

// ---- memory -------------------------------------------------------------------------------------

Buf CpuBackend::alloc(int64_t n) {
  if (n < 0) throw std::invalid_argument("cpu alloc: negative size " + std::to_string(n));
  if (n == 0) return Buf();
  const size_t bytes = (size_t(n) * sizeof(float) + 63) / 64 * 64;  // 64-byte aligned rows for the SIMD kernels
  float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return make_buf(p, n);
}

Buf CpuBackend::upload(const float* host, int64_t n) {
  Buf b = alloc(n);
  if (n > 0) std::memcpy(b.data(), host, size_t(n) * sizeof(float));
  return b;
}

void CpuBackend::download(const float* src, int64_t n, float* host) {
  if (n > 0) std::memcpy(host, src, size_t(n) * sizeof(float));
}

void CpuBackend::release(float* p) noexcept { std::free(p); }

// ---- matmuls ------------------------------------------------------------------------------------

void CpuBackend::linear(const Linear& l, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n,
                        Precision p) {
  matmul_strided(pool_, l.w, x, ldx, y, ldy, n, p);
  if (l.bias.empty()) return;
  const int64_t out = l.out();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) y[r * ldy + o] += l.bias[size_t(o)];
}

// ---- norms --------------------------------------------------------------------------------------

void CpuBackend::rms_norm(const float* x, float* y, int64_t rows, const NormWeight& w) {
  rms_norm_rows(pool_, x, y, rows, w);
}

void CpuBackend::rms_norm_heads(float* x, int64_t ld, int64_t n, int heads, int head_dim, const NormWeight& w) {
  if (!w.w.empty() && w.dim() != head_dim)
    throw std::invalid_argument("rms_norm_heads: weight has " + std::to_string(w.dim()) + " values, head_dim is " +
                                std::to_string(head_dim));
  NormWeight unit;  // no-scale form: x * rsqrt(mean(x²) + eps) * 1 is exact
  if (w.w.empty()) unit.w.assign(size_t(head_dim), 1.0f), unit.eps = w.eps;
  const NormWeight& nw = w.w.empty() ? unit : w;
  for_rows(pool_, n, int64_t(heads) * head_dim, [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) rapid::rms_norm(x + t * ld, x + t * ld, heads, nw);  // heads contiguous
  });
}

void CpuBackend::layer_norm(const float* x, float* y, int64_t rows, const LayerNormW& w) {
  rapid::layer_norm(pool_, x, y, rows, w);
}

// ---- pointwise ----------------------------------------------------------------------------------

void CpuBackend::act(float* x, int64_t rows, int64_t width, VAct a) {
  // Each row takes the same SIMD/tail split whatever the thread partition.
  for_rows(pool_, rows, width, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) activate(x + r * width, width, a);
  });
}

void CpuBackend::act_mul(float* gate, const float* up, int64_t rows, int64_t width, VAct a) {
  for_rows(pool_, rows, width, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) activate_mul(gate + r * width, up + r * width, width, a);
  });
}

void CpuBackend::gated_mlp(const Linear& gate, const Linear& up, const Linear& down, const float* x, float* y,
                           float* g, float* u, int64_t n, VAct a, Precision p) {
  // The fused pass has the SIMD GLU of silu and gelu_tanh; the erf forms run as separate ops.
  if (a != VAct::Silu && a != VAct::GeluTanh) return Backend::gated_mlp(gate, up, down, x, y, g, u, n, a, p);
  rapid::gated_mlp(pool_, gate, up, down, a == VAct::Silu ? Activation::Silu : Activation::GeluTanh, x, y, g, u, n, p);
}

void CpuBackend::add(float* y, const float* x, int64_t n) {
  auto body = [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) y[i] += x[i];
  };
  if (n >= 65536) pool_.parallel_for(n, body, 64);
  else body(0, n);
}

void CpuBackend::scale_shift(float* x, int64_t n, float sub, float mul) {
  auto body = [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) x[i] = (x[i] - sub) * mul;
  };
  if (n >= 65536) pool_.parallel_for(n, body, 64);
  else body(0, n);
}

void CpuBackend::scale_shift_cols(float* x, int64_t rows, const std::vector<float>& sub,
                                  const std::vector<float>& mul) {
  if (sub.size() != mul.size())
    throw std::invalid_argument("scale_shift_cols: sub and mul differ in length");
  const int64_t width = int64_t(sub.size());
  for_rows(pool_, rows, width, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* xr = x + r * width;  // [width]
      for (int64_t c = 0; c < width; ++c) xr[c] = (xr[c] - sub[size_t(c)]) * mul[size_t(c)];
    }
  });
}

void CpuBackend::clamp(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t width, float lo,
                       float hi) {
  for_rows(pool_, rows, width, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < width; ++c) y[r * ldy + c] = std::clamp(x[r * ldx + c], lo, hi);
  });
}

// ---- data movement ------------------------------------------------------------------------------

void CpuBackend::gather_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t width,
                             const std::vector<int32_t>& idx) {
  for_rows(pool_, int64_t(idx.size()), width, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) std::copy_n(x + idx[size_t(i)] * ldx, width, y + i * ldy);
  });
}

void CpuBackend::scatter_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t width,
                              const std::vector<int32_t>& idx) {
  for_rows(pool_, int64_t(idx.size()), width, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) std::copy_n(x + i * ldx, width, y + idx[size_t(i)] * ldy);
  });
}

void CpuBackend::transpose(const float* x, float* y, int64_t batch, int64_t rows, int64_t cols) {
  for_rows(pool_, batch, rows * cols, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* xb = x + b * rows * cols;  // [rows, cols]
      float* yb = y + b * rows * cols;        // [cols, rows]
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) yb[c * rows + r] = xb[r * cols + c];
    }
  });
}

void CpuBackend::pool_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t width, const Taps& taps) {
  check_taps(taps, "pool_rows");
  pool_.parallel_for(taps.rows(), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      tap_sum(taps, i, width, y + i * ldy, nullptr, [&](int32_t r, float*) { return x + r * ldx; });
  });
}

void CpuBackend::add_table_rows(const Weight& table, const Taps& taps, float* x, int64_t ldx) {
  check_taps(taps, "add_table_rows");
  for (int32_t r : taps.idx)
    if (r < 0 || r >= table.out)
      throw std::out_of_range("add_table_rows: row " + std::to_string(r) + " outside " + table.name + " [" +
                              std::to_string(table.out) + ", " + std::to_string(table.in) + "]");
  const int64_t width = table.in;
  pool_.parallel_for(taps.rows(), [&](int64_t i0, int64_t i1) {
    std::vector<float> acc(static_cast<size_t>(width)), row(static_cast<size_t>(width));  // [width] each
    for (int64_t i = i0; i < i1; ++i) {
      tap_sum(taps, i, width, acc.data(), row.data(), [&](int32_t r, float* buf) {
        dequantize_row(table, r, buf);
        return static_cast<const float*>(buf);
      });
      float* xr = x + i * ldx;  // [width]
      for (int64_t d = 0; d < width; ++d) xr[d] += acc[size_t(d)];
    }
  });
}

// ---- RoPE ---------------------------------------------------------------------------------------

void CpuBackend::rope(float* x, int64_t ld, int64_t n, int heads, int64_t head_stride, int half, const float* cos,
                      const float* sin) {
  auto body = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* cs = cos + i * half;  // [half]
      const float* sn = sin + i * half;  // [half]
      for (int h = 0; h < heads; ++h) {
        // The halves and the table do not overlap: restrict lets the compiler vectorize the rotation.
        float* __restrict lo = x + i * ld + int64_t(h) * head_stride;  // [half]
        float* __restrict hi = lo + half;                               // [half]
        for (int j = 0; j < half; ++j) {
          const float a = lo[j], b = hi[j];
          lo[j] = a * cs[j] - b * sn[j];
          hi[j] = b * cs[j] + a * sn[j];
        }
      }
    }
  };
  if (n >= 64) pool_.parallel_for(n, body);
  else body(0, n);
}

// ---- decoders -----------------------------------------------------------------------------------

void CpuBackend::embed_rows(const Weight& table, const std::vector<int32_t>& ids, float scale, float* y, int64_t ldy) {
  const int64_t n = int64_t(ids.size()), width = table.in;
  for (int64_t i = 0; i < n; ++i) embedding_rows(table, ids.data() + i, 1, y + i * ldy);
  if (scale == 1.0f) return;
  for_rows(pool_, n, width, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < width; ++c) y[r * ldy + c] *= scale;
  });
}

void CpuBackend::softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void CpuBackend::write_kv(KvPool& kv, int layer, const float* k, const float* v, const std::vector<SeqSpan>& spans) {
  if (kv.layer(layer).cache_of >= 0)
    throw std::invalid_argument("write_kv: layer " + std::to_string(layer) + " reads another layer's cache");
  rapid::write_kv(kv, layer, k, v, spans);
}

void CpuBackend::paged_attention(KvPool& kv, int layer, const float* q, float* out, const std::vector<SeqSpan>& spans,
                                 const AttnShape& s) {
  rapid::paged_attention(pool_, kv, layer, q, out, spans, s);
}

void CpuBackend::moe(const MoeRouter& router, const MoeExperts& experts, const float* route_x, const float* expert_x,
                     float* out, int64_t T, int top_k, Precision p, MoeStats* stats) {
  if (!moe_scratch_) moe_scratch_ = std::make_unique<MoeScratch>();
  std::vector<int32_t> idx(size_t(T * top_k));  // [T, top_k]
  std::vector<float> wts(size_t(T * top_k));    // [T, top_k]
  moe_route(pool_, router, route_x, T, p, idx.data(), wts.data());
  moe_experts_forward(pool_, experts, expert_x, T, idx.data(), wts.data(), top_k, out, p, *moe_scratch_, stats);
}

// ---- attention ----------------------------------------------------------------------------------

void CpuBackend::attention(const float* q, int64_t ldq, const float* k, const float* v, int64_t ldkv, float* out,
                           int64_t ldo, int heads, int kv_heads, int head_dim, float scale,
                           const std::vector<int64_t>& cu, Precision) {
  // f32 under both precisions: the reference.
  segment_attention(pool_, q, ldq, k, v, ldkv, out, ldo, heads, kv_heads, head_dim, scale, cu);
}

}  // namespace rapid::ops
