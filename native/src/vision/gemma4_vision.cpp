// Gemma 4 vision (transformers Gemma4VisionModel + Gemma4MultimodalEmbedder): patch rows in (py, px, c)
// order -> 2(x - 0.5) -> input_proj + 2-D position table; blocks with sandwich RMSNorms (weight used as is,
// no +1), q/k norms, a no-scale v norm, attention scale 1, 2-D RoPE (x on the first half of each head,
// y on the second), gated gelu_tanh MLP, optional clipped linears; k x k average pooling by position
// times sqrt(hidden); optional standardize; embed_vision = no-scale RMSNorm + Linear to the text width.
//
// Input: only the image's real patches ([h*w, 3*P*P], row-major over the [1, h, w] grid); the processor's
// trailing padding rows (position -1) are not passed. The (x, y) positions are the row-major meshgrid of
// the grid, computed here. Dropping padding is exact: HF masks padding keys out of every attention row
// and zeroes padding patches before pooling, so real patches never see them.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include "vision/vision_blocks.h"
#include "vision/vision_families.h"

namespace rapid {
namespace {

using namespace vision;

// Gemma4ClippableLinear: clamp the input to [in_lo, in_hi] and the output to [out_lo, out_hi]
// (scalar buffers; absent buffers mean no clamp).
struct ClipLinear {
  Linear l;  // [out, in], no bias
  float in_lo = -std::numeric_limits<float>::infinity(), in_hi = std::numeric_limits<float>::infinity();
  float out_lo = -std::numeric_limits<float>::infinity(), out_hi = std::numeric_limits<float>::infinity();
  bool clips_input() const { return std::isfinite(in_lo) || std::isfinite(in_hi); }
  bool clips_output() const { return std::isfinite(out_lo) || std::isfinite(out_hi); }
};

struct Gemma4VisionLayer {
  NormWeight input_ln, post_attn_ln, pre_ffn_ln, post_ffn_ln;  // [hidden]
  NormWeight q_norm, k_norm;                                   // [head_dim]
  ClipLinear q, k, v, o;        // [heads*hd, hidden], [kv*hd, hidden] x2, [hidden, heads*hd]
  ClipLinear gate, up, down;    // [ffn, hidden] x2, [hidden, ffn]
};

// A 0-d (or one-element) float tensor as f32.
float load_scalar(const Checkpoint& ck, const std::string& name) {
  const TensorView& t = ck.get(name);
  if (!is_float_dtype(t.dtype) || t.numel() != 1)
    throw std::runtime_error("tensor " + t.name + " has dtype " + dtype_name(t.dtype) + " shape " + t.shape_str() +
                             ", expected one float (a clipped-linear bound)");
  return load_float(t.data, t.dtype, 0);
}

// HF names the weight `<path>.linear.weight` (the ClippableLinear wraps an nn.Linear) and the bounds
// `<path>.{input,output}_{min,max}`; a plain `<path>.weight` is accepted too.
ClipLinear load_clip_linear(const Checkpoint& ck, const QuantConfig& qc, const std::string& path, int64_t out,
                            int64_t in) {
  ClipLinear c;
  const bool wrapped = ck.has(path + ".linear.weight");
  c.l = load_tower_linear(ck, qc, wrapped ? path + ".linear" : path, out, in, false);
  if (ck.has(path + ".input_min")) c.in_lo = load_scalar(ck, path + ".input_min");
  if (ck.has(path + ".input_max")) c.in_hi = load_scalar(ck, path + ".input_max");
  if (ck.has(path + ".output_min")) c.out_lo = load_scalar(ck, path + ".output_min");
  if (ck.has(path + ".output_max")) c.out_hi = load_scalar(ck, path + ".output_max");
  return c;
}

// y [n, ldy] (first l.out() columns) = clamp(clamp(x [n, in]) · Wᵀ). `scratch` holds n*in floats when the
// input is clamped (x is shared by q/k/v and must stay intact).
void clip_linear(ThreadPool& pool, const ClipLinear& c, const float* x, std::vector<float>& scratch, float* y,
                 int64_t ldy, int64_t n, Precision p) {
  const int64_t in = c.l.in(), out = c.l.out();
  const float* src = x;
  auto rows = [&](const std::function<void(int64_t)>& f) {  // elementwise work, split over rows when large
    auto body = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) f(r);
    };
    if (n * std::max(in, out) >= 32768) pool.parallel_for(n, body);
    else body(0, n);
  };
  if (c.clips_input()) {
    scratch.resize(size_t(n * in));  // [n, in]
    rows([&](int64_t r) {
      for (int64_t i = r * in; i < (r + 1) * in; ++i) scratch[size_t(i)] = std::clamp(x[i], c.in_lo, c.in_hi);
    });
    src = scratch.data();
  }
  linear_strided(pool, c.l, src, y, ldy, n, p);
  if (!c.clips_output()) return;
  rows([&](int64_t r) {
    for (int64_t o = 0; o < out; ++o) y[r * ldy + o] = std::clamp(y[r * ldy + o], c.out_lo, c.out_hi);
  });
}

NormWeight unit_norm(int64_t dim, float eps) {
  NormWeight nw;
  nw.w.assign(size_t(dim), 1.0f);  // with_scale=False: x * rsqrt(mean(x^2) + eps) * 1 (exact)
  nw.eps = eps;
  return nw;
}

// Rotates every head of x (row t, head h at x + t*ld + h*hd): channels [0, hd/2) by angle px[t]*inv[j]
// and [hd/2, hd) by py[t]*inv[j], each half with its own rotate_half (dim j pairs with j + hd/4).
void rope_2d(ThreadPool& pool, float* x, int64_t ld, int64_t n, int heads, int hd, const std::vector<float>& cx,
             const std::vector<float>& sx, const std::vector<float>& cy, const std::vector<float>& sy) {
  const int q = hd / 4;
  auto body = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int h = 0; h < heads; ++h) {
        float* v = x + t * ld + int64_t(h) * hd;  // [hd]
        for (int half = 0; half < 2; ++half) {
          const float* c = (half == 0 ? cx : cy).data() + t * q;  // [q]
          const float* s = (half == 0 ? sx : sy).data() + t * q;  // [q]
          float* u = v + half * 2 * q;                            // [2q]
          for (int j = 0; j < q; ++j) {
            const float a = u[j], b = u[j + q];
            u[j] = a * c[j] - b * s[j];
            u[j + q] = b * c[j] + a * s[j];
          }
        }
      }
    }
  };
  if (n >= 64) pool.parallel_for(n, body);
  else body(0, n);
}

class Gemma4Vision final : public VisionEncoder {
 public:
  Gemma4Vision(std::shared_ptr<const Checkpoint> ckpt, const Json& config) : ckpt_(std::move(ckpt)) {
    const Checkpoint& ck = *ckpt_;
    const Json& vc = vision_config(config, "gemma4");
    const QuantConfig qc = QuantConfig::from_config(config);
    vprefix_ = probe_prefix(ck, {"model.vision_tower.", "vision_tower."}, "patch_embedder.position_embedding_table",
                            "Gemma 4 vision tower");
    eprefix_ = probe_prefix(ck, {"model.embed_vision.", "embed_vision."}, "embedding_projection.weight",
                            "Gemma 4 embed_vision projector");
    patch_ = cfg_int(vc, {"patch_size"}, 16);
    pool_k_ = cfg_int(vc, {"pooling_kernel_size"}, 3);
    heads_ = cfg_int(vc, {"num_attention_heads"}, 12);
    kv_heads_ = cfg_int(vc, {"num_key_value_heads"}, heads_);
    const int64_t layers = cfg_int(vc, {"num_hidden_layers"}, 16);
    const float eps = float(vc.get_double("rms_norm_eps", 1e-6));
    act_ = parse_act(vc.get_string("hidden_activation", vc.get_string("hidden_act", "gelu_pytorch_tanh")),
                     "gemma4 vision");
    const double theta = rope_theta(vc, 100.0);
    standardize_ = false;
    if (const Json* s = vc.find("standardize"); s && s->is_bool()) standardize_ = s->as_bool();

    const TensorView& table = ck.get(vprefix_ + "patch_embedder.position_embedding_table");
    if (table.shape.size() != 3 || table.shape[0] != 2 || !is_float_dtype(table.dtype))
      throw std::runtime_error("tensor " + table.name + " has shape " + table.shape_str() + " dtype " +
                               dtype_name(table.dtype) + ", expected float [2, positions, hidden]");
    n_pos_ = table.shape[1];
    hidden_ = table.shape[2];
    hd_ = cfg_int(vc, {"head_dim"}, hidden_ / heads_);
    if (hd_ % 4 != 0 || heads_ % kv_heads_ != 0)
      throw std::runtime_error("gemma4 vision: head_dim " + std::to_string(hd_) + " must be a multiple of 4 and " +
                               std::to_string(heads_) + " heads a multiple of " + std::to_string(kv_heads_) +
                               " kv heads");
    table_.resize(size_t(2 * n_pos_ * hidden_));  // [2, positions, hidden]
    for (size_t i = 0; i < table_.size(); ++i) table_[i] = load_float(table.data, table.dtype, i);
    row_len_ = 3 * patch_ * patch_;
    input_proj_ = load_tower_linear(ck, qc, vprefix_ + "patch_embedder.input_proj", hidden_, row_len_, false);

    const std::string l0 = vprefix_ + "encoder.layers.0.mlp.gate_proj";
    ffn_ = load_weight(ck, qc, ck.has(l0 + ".linear.weight") ? l0 + ".linear" : l0).out;
    for (int64_t i = 0; i < layers; ++i) {
      const std::string p = vprefix_ + "encoder.layers." + std::to_string(i) + ".";
      Gemma4VisionLayer l;
      l.input_ln = load_norm(ck, p + "input_layernorm", hidden_, eps, false);
      l.post_attn_ln = load_norm(ck, p + "post_attention_layernorm", hidden_, eps, false);
      l.pre_ffn_ln = load_norm(ck, p + "pre_feedforward_layernorm", hidden_, eps, false);
      l.post_ffn_ln = load_norm(ck, p + "post_feedforward_layernorm", hidden_, eps, false);
      l.q_norm = load_norm(ck, p + "self_attn.q_norm", hd_, eps, false);
      l.k_norm = load_norm(ck, p + "self_attn.k_norm", hd_, eps, false);
      l.q = load_clip_linear(ck, qc, p + "self_attn.q_proj", heads_ * hd_, hidden_);
      l.k = load_clip_linear(ck, qc, p + "self_attn.k_proj", kv_heads_ * hd_, hidden_);
      l.v = load_clip_linear(ck, qc, p + "self_attn.v_proj", kv_heads_ * hd_, hidden_);
      l.o = load_clip_linear(ck, qc, p + "self_attn.o_proj", hidden_, heads_ * hd_);
      l.gate = load_clip_linear(ck, qc, p + "mlp.gate_proj", ffn_, hidden_);
      l.up = load_clip_linear(ck, qc, p + "mlp.up_proj", ffn_, hidden_);
      l.down = load_clip_linear(ck, qc, p + "mlp.down_proj", hidden_, ffn_);
      layers_.push_back(std::move(l));
    }
    v_norm_ = unit_norm(hd_, eps);
    embed_norm_ = unit_norm(hidden_, eps);
    if (standardize_) {
      std_bias_ = load_vector_f32(ck, vprefix_ + "std_bias", hidden_);
      std_scale_ = load_vector_f32(ck, vprefix_ + "std_scale", hidden_);
    }
    inv_freq_ = vision_inv_freq(int(hd_), theta);
    out_ = load_weight(ck, qc, eprefix_ + "embedding_projection").out;
    proj_ = load_tower_linear(ck, qc, eprefix_ + "embedding_projection", out_, hidden_, false);

    bytes_ = prefix_bytes(ck, {vprefix_, eprefix_});
    std::vector<const Weight*> ws{&input_proj_.w, &proj_.w};
    for (const auto& l : layers_)
      for (const ClipLinear* x : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) ws.push_back(&x->l.w);
    quant_ = describe_quant(ws);
  }

  std::string family() const override { return "gemma4"; }
  int64_t text_hidden() const override { return out_; }
  size_t weight_bytes() const override { return bytes_; }
  std::string quantization() const override { return quant_; }

  ImageEmbedding encode(const ImageInput& img, ThreadPool& pool, Precision prec) const override {
    if (img.grid_h > 0 && img.grid_w > 0 && (img.grid_h % pool_k_ != 0 || img.grid_w % pool_k_ != 0))
      throw std::invalid_argument("gemma4 vision: image grid [" + std::to_string(img.grid_t) + ", " +
                                  std::to_string(img.grid_h) + ", " + std::to_string(img.grid_w) +
                                  "] has h or w not a multiple of pooling_kernel_size " + std::to_string(pool_k_) +
                                  "; both image sides must be multiples of " + std::to_string(pool_k_ * patch_) +
                                  " px");
    // The largest processor budget (max_soft_tokens 1120) times k^2 patches bounds the input.
    check_patch_grid(img, "gemma4", row_len_, pool_k_, patch_, std::min(1120 * pool_k_ * pool_k_, n_pos_ * n_pos_));
    if (img.grid_t != 1)
      throw std::invalid_argument("gemma4 vision: image grid must be [1, h, w] (one frame), got t = " +
                                  std::to_string(img.grid_t));
    const int64_t gh = img.grid_h, gw = img.grid_w;
    if (gh > n_pos_ || gw > n_pos_)
      throw std::invalid_argument("gemma4 vision: image grid [1, " + std::to_string(gh) + ", " + std::to_string(gw) +
                                  "] exceeds the position table (" + std::to_string(n_pos_) + " per side)");
    const int64_t n = gh * gw;  // real patches, row-major: patch i is at x = i % gw, y = i / gw
    const int64_t H = hidden_, hd = hd_, nh = heads_, nkv = kv_heads_;

    // 2(x - 0.5), input_proj, + table[0][x] + table[1][y].
    std::vector<float> rows(img.pixels, img.pixels + n * row_len_);  // [n, 3*P*P] (py, px, c)
    for (float& v : rows) v = 2.0f * (v - 0.5f);
    std::vector<float> x(size_t(n * H));  // [n, hidden]
    linear(pool, input_proj_, rows.data(), x.data(), n, prec);
    rows = {};
    pool.parallel_for(n, [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0; i < r1; ++i) {
        const float* ex = table_.data() + (i % gw) * H;            // [hidden]
        const float* ey = table_.data() + (n_pos_ + i / gw) * H;  // [hidden]
        float* xr = x.data() + i * H;
        for (int64_t d = 0; d < H; ++d) xr[d] += ex[d] + ey[d];
      }
    });

    // RoPE angles per patch: [n, hd/4] for x and for y.
    const int64_t q4 = hd / 4;
    std::vector<float> cx(size_t(n * q4)), sx(size_t(n * q4)), cy(size_t(n * q4)), sy(size_t(n * q4));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < q4; ++j) {
        const float ax = float(i % gw) * inv_freq_[size_t(j)], ay = float(i / gw) * inv_freq_[size_t(j)];
        cx[size_t(i * q4 + j)] = std::cos(ax);
        sx[size_t(i * q4 + j)] = std::sin(ax);
        cy[size_t(i * q4 + j)] = std::cos(ay);
        sy[size_t(i * q4 + j)] = std::sin(ay);
      }

    const int64_t qw = nh * hd, kw = nkv * hd, ld = 3 * qw;
    std::vector<float> hn(size_t(n * H));          // [n, hidden]
    std::vector<float> kv(size_t(n * 2 * kw));     // [n, (k, v), kv_heads, hd]
    std::vector<float> qkv(size_t(n * ld));        // [n, (q, k, v), heads, hd] (k/v repeated per group)
    std::vector<float> att(size_t(n * qw));        // [n, heads*hd]
    std::vector<float> gate(size_t(n * ffn_)), up(size_t(n * ffn_));  // [n, ffn]
    std::vector<float> scratch;
    const std::vector<int64_t> cu{0, n};
    const int64_t group = nh / nkv;
    for (const Gemma4VisionLayer& l : layers_) {
      rms_norm_rows(pool, x.data(), hn.data(), n, l.input_ln);
      clip_linear(pool, l.q, hn.data(), scratch, qkv.data(), ld, n, prec);
      clip_linear(pool, l.k, hn.data(), scratch, kv.data(), 2 * kw, n, prec);
      clip_linear(pool, l.v, hn.data(), scratch, kv.data() + kw, 2 * kw, n, prec);
      pool.parallel_for(n, [&](int64_t r0, int64_t r1) {
        for (int64_t t = r0; t < r1; ++t) {
          rms_norm(qkv.data() + t * ld, qkv.data() + t * ld, nh, l.q_norm);              // q heads
          rms_norm(kv.data() + t * 2 * kw, kv.data() + t * 2 * kw, nkv, l.k_norm);        // k heads
          rms_norm(kv.data() + t * 2 * kw + kw, kv.data() + t * 2 * kw + kw, nkv, v_norm_);  // v heads
        }
      });
      rope_2d(pool, qkv.data(), ld, n, int(nh), int(hd), cx, sx, cy, sy);
      rope_2d(pool, kv.data(), 2 * kw, n, int(nkv), int(hd), cx, sx, cy, sy);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t h = 0; h < nh; ++h) {
          const float* ks = kv.data() + t * 2 * kw + (h / group) * hd;  // [hd]
          std::copy_n(ks, hd, qkv.data() + t * ld + qw + h * hd);
          std::copy_n(ks + kw, hd, qkv.data() + t * ld + 2 * qw + h * hd);
        }
      segment_attention(pool, qkv.data(), qkv.data() + qw, qkv.data() + 2 * qw, ld, att.data(), qw, int(nh),
                        int(hd), 1.0f, cu);
      clip_linear(pool, l.o, att.data(), scratch, hn.data(), H, n, prec);
      rms_norm_rows(pool, hn.data(), hn.data(), n, l.post_attn_ln);
      add_inplace(pool, x.data(), hn.data(), n * H);

      rms_norm_rows(pool, x.data(), hn.data(), n, l.pre_ffn_ln);
      clip_linear(pool, l.gate, hn.data(), scratch, gate.data(), ffn_, n, prec);
      clip_linear(pool, l.up, hn.data(), scratch, up.data(), ffn_, n, prec);
      activate_mul_rows(pool, gate.data(), up.data(), n, ffn_, act_);
      clip_linear(pool, l.down, gate.data(), scratch, hn.data(), H, n, prec);
      rms_norm_rows(pool, hn.data(), hn.data(), n, l.post_ffn_ln);
      add_inplace(pool, x.data(), hn.data(), n * H);
    }

    // k x k average pooling by position (token x/k + (w/k)*(y/k)), each patch weighted 1/k^2 as HF's
    // one-hot matmul does, then * sqrt(hidden) in f32.
    const int64_t k = pool_k_, tw = gw / k, tokens = (gh / k) * tw;
    const float wk = 1.0f / float(k * k), root = float(std::sqrt(double(H)));
    std::vector<float> pooled(size_t(tokens * H), 0.0f);  // [tokens, hidden]
    pool.parallel_for(tokens, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* dst = pooled.data() + t * H;
        const int64_t by = t / tw, bx = t % tw;
        for (int64_t a = 0; a < k; ++a)      // patches in row-major order, as the matmul sums them
          for (int64_t b = 0; b < k; ++b) {
            const float* src = x.data() + ((by * k + a) * gw + bx * k + b) * H;
            for (int64_t d = 0; d < H; ++d) dst[d] += wk * src[d];
          }
        for (int64_t d = 0; d < H; ++d) {
          dst[d] *= root;
          if (standardize_) dst[d] = (dst[d] - std_bias_[size_t(d)]) * std_scale_[size_t(d)];
        }
      }
    });
    rms_norm_rows(pool, pooled.data(), pooled.data(), tokens, embed_norm_);

    ImageEmbedding e;
    e.tokens = tokens;
    e.embeddings.resize(size_t(tokens * out_));  // [tokens, text_hidden]
    linear(pool, proj_, pooled.data(), e.embeddings.data(), tokens, prec);
    return e;
  }

 private:
  std::shared_ptr<const Checkpoint> ckpt_;  // keeps the mapped weights alive
  std::string vprefix_, eprefix_;
  int64_t patch_ = 16, pool_k_ = 3, heads_ = 12, kv_heads_ = 12, hidden_ = 0, hd_ = 0, ffn_ = 0, out_ = 0;
  int64_t n_pos_ = 0, row_len_ = 0;
  bool standardize_ = false;
  VAct act_ = VAct::GeluTanh;
  std::vector<float> table_;  // [2, positions, hidden]: x table then y table
  Linear input_proj_;         // [hidden, 3*P*P]
  std::vector<Gemma4VisionLayer> layers_;
  NormWeight v_norm_, embed_norm_;          // no-scale RMSNorms ([head_dim], [hidden])
  std::vector<float> std_bias_, std_scale_;  // [hidden] when standardize
  std::vector<float> inv_freq_;              // [head_dim/4]
  Linear proj_;                              // embed_vision.embedding_projection [text_hidden, hidden]
  size_t bytes_ = 0;
  std::string quant_;
};

}  // namespace

std::unique_ptr<VisionEncoder> load_gemma4_vision(std::shared_ptr<const Checkpoint> ckpt, const Json& config) {
  return std::make_unique<Gemma4Vision>(std::move(ckpt), config);
}

}  // namespace rapid
