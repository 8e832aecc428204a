// The op-level backend interface a model family (today: the vision towers) is written over once. The CPU
// backend (cpu/cpu_ops.h) is the reference; the CUDA backend implements the same ops and is tested against it.
//
// Conventions, for every op:
// - Activation pointers (`float*`) are backend memory: a Buf's data() plus an offset. Host pointers never
//   reach an op, except the small host metadata named as such (index lists, segment bounds `cu`, taps).
// - Matrices are row-major; `ld*` is the stride in floats between consecutive rows (>= the row width).
// - Ops run in call order on the backend's one stream; only download() waits. Host arguments (metadata
//   vectors, scalars) need to live only until the call returns.
// - Weight structs (Linear, NormWeight, LayerNormW, Weight tables, per-column vectors) are host structs
//   that outlive the backend: a backend may keep device copies keyed by their address (a cache that is a
//   pure function of the weights), never of activations.
// - Unless said otherwise an output may not alias an input. Errors throw std::runtime_error.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
#include "cpu/matmul.h"        // Precision
#include "kv/kv_pool.h"         // KvPool
#include "layers/attention.h"   // SeqSpan, AttnShape
#include "layers/layer_norm.h"  // LayerNormW
#include "layers/linear.h"      // Linear
#include "layers/moe.h"         // MoeRouter, MoeExperts, MoeStats
#include "layers/norm.h"        // NormWeight
#include "tensor/weight.h"      // Weight

namespace rapid::ops {

// Pointwise activations of the towers (HF hidden_act): silu, gelu (tanh form), gelu (erf form), quick_gelu.
enum class VAct : uint8_t { Silu, GeluTanh, GeluErf, QuickGelu };

// Weighted sums of source rows, `k` taps per output row: out row i = (Σ_j w[i*k+j] · src[idx[i*k+j]]) / div,
// summed in f32 from 0 in tap order j = 0..k-1 (w empty: plain sum, no multiply). Host metadata.
// Covers average pooling (w empty, div = k), weighted pooling (w = 1/k), bilinear taps (4 weighted taps).
struct Taps {
  int k = 1;
  std::vector<int32_t> idx;  // [rows * k] source row of each tap
  std::vector<float> w;      // [rows * k] tap weights, or empty for weight 1
  float div = 1.0f;          // divisor applied after the sum (1: none)
  int64_t rows() const { return k > 0 ? int64_t(idx.size()) / k : 0; }
};

class Backend;

// Backend memory of `size()` f32 values, freed by the backend that allocated it. Move-only.
class Buf {
 public:
  Buf() = default;
  Buf(Buf&& o) noexcept : be_(o.be_), p_(o.p_), n_(o.n_) { o.be_ = nullptr, o.p_ = nullptr, o.n_ = 0; }
  Buf& operator=(Buf&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(be_, o.be_), std::swap(p_, o.p_), std::swap(n_, o.n_);
    }
    return *this;
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() { reset(); }

  float* data() const { return p_; }  // backend pointer (a device pointer on CUDA)
  int64_t size() const { return n_; }
  void reset() noexcept;

 private:
  friend class Backend;
  Buf(Backend* be, float* p, int64_t n) : be_(be), p_(p), n_(n) {}
  Backend* be_ = nullptr;
  float* p_ = nullptr;
  int64_t n_ = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu" | "cuda"

  // ---- memory ---------------------------------------------------------------------------------
  // n f32 values, zero-filled.
  virtual Buf alloc(int64_t n) = 0;
  // A new buffer holding host[0, n).
  virtual Buf upload(const float* host, int64_t n) = 0;
  // host[0, n) = src[0, n); waits for every op before it.
  virtual void download(const float* src, int64_t n, float* host) = 0;

  // ---- matmuls --------------------------------------------------------------------------------
  // y[r, 0:out] = x[r, 0:in] · Wᵀ (+ bias) for r < n; x row r at x + r*ldx, y row r at y + r*ldy.
  // Every format load_linear / load_tower_linear give: dense f32/f16/bf16 (packed or not), MLX affine 4/8-bit.
  // Fast: CUDA bf16 tensor cores, CPU int8 activations for affine weights; Exact: f32.
  virtual void linear(const Linear& l, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n,
                      Precision p) = 0;
  // Contiguous rows: ldx = in, ldy = out.
  void linear(const Linear& l, const float* x, float* y, int64_t n, Precision p) {
    linear(l, x, l.in(), y, l.out(), n, p);
  }
  // What a linear does with its result as it stores it (contiguous rows, x [n, in], y [n, out]):
  // act: y = act(x · Wᵀ + b); accumulate: y += x · Wᵀ + b (a residual); not both. The default runs linear, then act
  // (or linear into scratch, then add): bitwise what a backend that fuses them into its GEMM's stores must give.
  struct LinearEpilogue {
    std::optional<VAct> act;
    bool accumulate = false;
    float* scratch = nullptr;  // [n, out]: where the default puts the product before adding it (null: allocated)
    static LinearEpilogue activation(VAct a) { return {a, false, nullptr}; }
    static LinearEpilogue residual(float* scratch = nullptr) { return {std::nullopt, true, scratch}; }
  };
  virtual void linear_epilogue(const Linear& l, const float* x, float* y, int64_t n, Precision p,
                               const LinearEpilogue& e);

  // ---- norms ----------------------------------------------------------------------------------
  // x, y [rows, dim = w.dim()] contiguous: y = x * rsqrt(mean(x²) + eps) * w. y may alias x.
  virtual void rms_norm(const float* x, float* y, int64_t rows, const NormWeight& w) = 0;
  // In place over heads: row t, head h is x + t*ld + h*head_dim [head_dim], for t < n, h < heads. w.w empty:
  // no scale (weight 1), eps from w.eps; else w.dim() == head_dim. (Gemma 4 q/k/v norms; heads = 1 for rows.)
  virtual void rms_norm_heads(float* x, int64_t ld, int64_t n, int heads, int head_dim, const NormWeight& w) = 0;
  // x, y [rows, dim = w.dim()] contiguous: nn.LayerNorm (biased variance) with weight and bias. y may alias x.
  virtual void layer_norm(const float* x, float* y, int64_t rows, const LayerNormW& w) = 0;

  // ---- pointwise ------------------------------------------------------------------------------
  // x [rows, width] contiguous: x = act(x).
  virtual void act(float* x, int64_t rows, int64_t width, VAct a) = 0;
  // gate, up [rows, width] contiguous: gate = act(gate) * up.
  virtual void act_mul(float* gate, const float* up, int64_t rows, int64_t width, VAct a) = 0;
  // Gated MLP: y [n, down.out] = down(act(gate(x)) * up(x)) (+ biases). x [n, gate.in] contiguous; g, u: scratch
  // [n, gate.out] each. y may alias x. Default: linear, linear, act_mul, linear; the CPU reads x once for gate and up
  // (one dispatch, one quantization of x), bitwise the same values.
  virtual void gated_mlp(const Linear& gate, const Linear& up, const Linear& down, const float* x, float* y, float* g,
                         float* u, int64_t n, VAct a, Precision p);
  // y[i] += x[i] for i < n.
  virtual void add(float* y, const float* x, int64_t n) = 0;
  // x[i] = (x[i] - sub) * mul for i < n.
  virtual void scale_shift(float* x, int64_t n, float sub, float mul) = 0;
  // x [rows, width = sub.size()] contiguous: x[r, c] = (x[r, c] - sub[c]) * mul[c]. sub, mul: weights [width].
  virtual void scale_shift_cols(float* x, int64_t rows, const std::vector<float>& sub,
                                const std::vector<float>& mul) = 0;
  // y[r, c] = clamp(x[r, c], lo, hi) for r < rows, c < width; rows at x + r*ldx, y + r*ldy. y may alias x.
  virtual void clamp(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t width, float lo,
                     float hi) = 0;

  // ---- data movement ---------------------------------------------------------------------------
  // y row i = x row idx[i] for i < idx.size(); rows of `width` floats at x + r*ldx, y + i*ldy. idx: host.
  virtual void gather_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t width,
                           const std::vector<int32_t>& idx) = 0;
  // y row idx[i] = x row i for i < idx.size() (idx distinct); rows as in gather_rows. idx: host.
  virtual void scatter_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t width,
                            const std::vector<int32_t>& idx) = 0;
  // x [batch, rows, cols] -> y [batch, cols, rows], both contiguous.
  virtual void transpose(const float* x, float* y, int64_t batch, int64_t rows, int64_t cols) = 0;
  // y row i [width] = taps over rows of x (x row r at x + r*ldx) for i < taps.rows(); y row i at y + i*ldy.
  virtual void pool_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t width, const Taps& taps) = 0;
  // x row i [table.in] += taps over rows of `table` (a weight of any load_embedding format, dequantized to
  // f32 row by row), for i < taps.rows(); x row i at x + i*ldx. Position-table adds (learned, interpolated).
  virtual void add_table_rows(const Weight& table, const Taps& taps, float* x, int64_t ldx) = 0;

  // ---- RoPE -----------------------------------------------------------------------------------
  // Rotate-half RoPE in place: for t < n, h < heads, u = x + t*ld + h*head_stride, j < half:
  // (u[j], u[j+half]) = (u[j]*c - u[j+half]*s, u[j+half]*c + u[j]*s), c = cos[t*half + j], s = sin[t*half + j].
  // cos, sin: backend memory [n, half]. Whole head: head_stride = head_dim, half = head_dim/2. Gemma 4's 2-D
  // variant: two calls, at x (x table) and x + head_dim/2 (y table), with head_stride = head_dim, half = head_dim/4.
  virtual void rope(float* x, int64_t ld, int64_t n, int heads, int64_t head_stride, int half, const float* cos,
                    const float* sin) = 0;

  // ---- decoders -------------------------------------------------------------------------------
  // y row i [table.in] = row ids[i] of `table` (any load_embedding format, dequantized as embedding_rows does)
  // * scale, for i < ids.size(); y row i at y + i*ldy. ids: host, each in [0, table.out).
  virtual void embed_rows(const Weight& table, const std::vector<int32_t>& ids, float scale, float* y,
                          int64_t ldy) = 0;
  // x[i] = cap * tanh(x[i] / cap) for i < n (final logit softcapping).
  virtual void softcap(float* x, int64_t n, float cap) = 0;
  // k, v [T, n_kv_heads, head_dim] contiguous (the layer's KV shape) -> the pool slots of `layer` of every span
  // (token sp.start + i at position sp.context_len + i), stored in the pool's KvDtype. The backend keeps the
  // cache: the CPU in the pool itself, another backend in its own memory of the pool's geometry and bytes.
  // `layer` must own its cache (KvLayerSpec::cache_of < 0).
  virtual void write_kv(KvPool& kv, int layer, const float* k, const float* v, const std::vector<SeqSpan>& spans) = 0;
  // q [T, n_heads, head_dim] -> out [T, n_heads, head_dim], both contiguous: causal attention of each span's new
  // tokens over its cached keys (written by write_kv, this step's included), softmax(q·kᵀ * s.scale) · v, with
  // s.window (keys k > q - W), GQA, and the span's bidirectional blocks. A layer with cache_of reads that layer's
  // cache. Spans: host metadata, as in layers/attention.h. f32 arithmetic under both precisions.
  virtual void paged_attention(KvPool& kv, int layer, const float* q, float* out, const std::vector<SeqSpan>& spans,
                               const AttnShape& s) = 0;
  // A mixture-of-experts block (Gemma 4 26B-A4B): route route_x [T, hidden] with `router` (top_k), run
  // expert_x [T, hidden] through the chosen `experts`, out [T, hidden] = the weighted sum. Optional: a backend
  // without it throws std::runtime_error (moe_supported() is false).
  virtual bool moe_supported() const { return false; }
  virtual void moe(const MoeRouter& router, const MoeExperts& experts, const float* route_x, const float* expert_x,
                   float* out, int64_t T, int top_k, Precision p, MoeStats* stats);

  // ---- attention ------------------------------------------------------------------------------
  // Bidirectional attention within segments: query t in [cu[s], cu[s+1]) attends to every key of that
  // segment. q row t, head h at q + t*ldq + h*head_dim; k and v rows at k/v + t*ldkv + g*head_dim for kv head
  // g = h / (heads / kv_heads) (GQA); out row t, head h at out + t*ldo + h*head_dim.
  // out = softmax(q·kᵀ * scale) · v. cu: host [segments + 1], cu[0] = 0, non-decreasing.
  virtual void attention(const float* q, int64_t ldq, const float* k, const float* v, int64_t ldkv, float* out,
                         int64_t ldo, int heads, int kv_heads, int head_dim, float scale,
                         const std::vector<int64_t>& cu, Precision p) = 0;

 protected:
  // For implementations: wrap / release memory this backend allocated.
  Buf make_buf(float* p, int64_t n) { return Buf(this, p, n); }
  virtual void release(float* p) noexcept = 0;
  friend class Buf;
};

inline void Backend::moe(const MoeRouter&, const MoeExperts&, const float*, const float*, float*, int64_t, int,
                         Precision, MoeStats*) {
  throw std::runtime_error(name() + " backend: mixture-of-experts blocks are not implemented");
}

inline void Backend::gated_mlp(const Linear& gate, const Linear& up, const Linear& down, const float* x, float* y,
                               float* g, float* u, int64_t n, VAct a, Precision p) {
  linear(gate, x, g, n, p);
  linear(up, x, u, n, p);
  act_mul(g, u, n, gate.out(), a);
  linear(down, g, y, n, p);
}

inline void Backend::linear_epilogue(const Linear& l, const float* x, float* y, int64_t n, Precision p,
                                     const LinearEpilogue& e) {
  if (e.act && e.accumulate) throw std::invalid_argument("linear_epilogue: an activation or a residual, not both");
  if (!e.accumulate) {
    linear(l, x, y, n, p);
    if (e.act) act(y, n, l.out(), *e.act);
    return;
  }
  Buf owned;
  float* t = e.scratch;
  if (!t) owned = alloc(n * l.out()), t = owned.data();
  linear(l, x, t, n, p);
  add(y, t, n * l.out());
}

inline void Buf::reset() noexcept {
  if (p_ && be_) be_->release(p_);
  be_ = nullptr, p_ = nullptr, n_ = 0;
}

}  // namespace rapid::ops
