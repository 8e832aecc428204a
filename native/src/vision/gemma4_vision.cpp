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

// y [n, ldy] (first l.out() columns) = clamp(clamp(x [n, in]) · Wᵀ). `scratch` holds n*in floats (backend
// memory) for the clamped input, used only when the input is clamped (x is shared by q/k/v and must stay intact).
void clip_linear(ops::Backend& be, const ClipLinear& c, const float* x, float* scratch, float* y, int64_t ldy,
                 int64_t n, Precision p) {
  const int64_t in = c.l.in();
  const float* src = x;
  if (c.clips_input()) {
    be.clamp(x, in, scratch, in, n, in, c.in_lo, c.in_hi);
    src = scratch;
  }
  be.linear(c.l, src, in, y, ldy, n, p);
  if (c.clips_output()) be.clamp(y, ldy, y, ldy, n, c.l.out(), c.out_lo, c.out_hi);
}

// The no-scale RMSNorm (with_scale=False): an empty weight, which ops::Backend::rms_norm_heads takes as 1.
NormWeight unit_norm(float eps) {
  NormWeight nw;
  nw.eps = eps;
  return nw;
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
    table_w_ = f32_weight(table_.data(), 2 * n_pos_, hidden_, table.name);
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
    v_norm_ = unit_norm(eps);
    embed_norm_ = unit_norm(eps);
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

  ImageEmbedding encode(const ImageInput& img, ops::Backend& be, Precision prec) const override {
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
    const ops::Buf x = be.alloc(n * H);  // [n, hidden]
    {
      const ops::Buf px = be.upload(img.pixels, n * row_len_);  // [n, 3*P*P] (py, px, c)
      be.scale_shift(px.data(), n * row_len_, 0.5f, 2.0f);
      be.linear(input_proj_, px.data(), x.data(), n, prec);
    }
    ops::Taps pos;  // the x row and the y row of the position table
    pos.k = 2;
    for (int64_t i = 0; i < n; ++i) pos.idx.insert(pos.idx.end(), {int32_t(i % gw), int32_t(n_pos_ + i / gw)});
    be.add_table_rows(table_w_, pos, x.data(), H);

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
    const ops::Buf bcx = be.upload(cx.data(), n * q4), bsx = be.upload(sx.data(), n * q4);  // [n, hd/4]
    const ops::Buf bcy = be.upload(cy.data(), n * q4), bsy = be.upload(sy.data(), n * q4);  // [n, hd/4]
    // 2-D RoPE: the first half of each head by the x angles, the second by the y angles (rotate_half each).
    auto rope_2d = [&](float* t, int64_t ld, int heads) {
      be.rope(t, ld, n, heads, hd, int(q4), bcx.data(), bsx.data());
      be.rope(t + hd / 2, ld, n, heads, hd, int(q4), bcy.data(), bsy.data());
    };

    const int64_t qw = nh * hd, kw = nkv * hd;
    const ops::Buf hn = be.alloc(n * H);                                  // [n, hidden]
    const ops::Buf q = be.alloc(n * qw);                                  // [n, heads, hd]
    const ops::Buf k = be.alloc(n * kw), v = be.alloc(n * kw);            // [n, kv_heads, hd]
    const ops::Buf att = be.alloc(n * qw);                                // [n, heads*hd]
    const ops::Buf gate = be.alloc(n * ffn_), up = be.alloc(n * ffn_);    // [n, ffn]
    const ops::Buf scratch = be.alloc(n * std::max({H, ffn_, qw}));       // [n, in] clamped inputs
    const std::vector<int64_t> cu{0, n};
    float* sc = scratch.data();
    for (const Gemma4VisionLayer& l : layers_) {
      be.rms_norm(x.data(), hn.data(), n, l.input_ln);
      clip_linear(be, l.q, hn.data(), sc, q.data(), qw, n, prec);
      clip_linear(be, l.k, hn.data(), sc, k.data(), kw, n, prec);
      clip_linear(be, l.v, hn.data(), sc, v.data(), kw, n, prec);
      be.rms_norm_heads(q.data(), qw, n, int(nh), int(hd), l.q_norm);
      be.rms_norm_heads(k.data(), kw, n, int(nkv), int(hd), l.k_norm);
      be.rms_norm_heads(v.data(), kw, n, int(nkv), int(hd), v_norm_);
      rope_2d(q.data(), qw, int(nh));
      rope_2d(k.data(), kw, int(nkv));
      be.attention(q.data(), qw, k.data(), v.data(), kw, att.data(), qw, int(nh), int(nkv), int(hd), 1.0f, cu, prec);
      clip_linear(be, l.o, att.data(), sc, hn.data(), H, n, prec);
      be.rms_norm(hn.data(), hn.data(), n, l.post_attn_ln);
      be.add(x.data(), hn.data(), n * H);

      be.rms_norm(x.data(), hn.data(), n, l.pre_ffn_ln);
      clip_linear(be, l.gate, hn.data(), sc, gate.data(), ffn_, n, prec);
      clip_linear(be, l.up, hn.data(), sc, up.data(), ffn_, n, prec);
      be.act_mul(gate.data(), up.data(), n, ffn_, act_);
      clip_linear(be, l.down, gate.data(), sc, hn.data(), H, n, prec);
      be.rms_norm(hn.data(), hn.data(), n, l.post_ffn_ln);
      be.add(x.data(), hn.data(), n * H);
    }

    // k x k average pooling by position (token x/k + (w/k)*(y/k)), each patch weighted 1/k^2 as HF's
    // one-hot matmul does (patches in row-major order, as the matmul sums them), then * sqrt(hidden) in f32.
    const int64_t kk = pool_k_, tw = gw / kk, tokens = (gh / kk) * tw;
    ops::Taps avg;
    avg.k = int(kk * kk);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t a = 0; a < kk; ++a)
        for (int64_t b = 0; b < kk; ++b) avg.idx.push_back(int32_t(((t / tw) * kk + a) * gw + (t % tw) * kk + b));
    avg.w.assign(avg.idx.size(), 1.0f / float(kk * kk));
    const ops::Buf pooled = be.alloc(tokens * H);  // [tokens, hidden]
    be.pool_rows(x.data(), H, pooled.data(), H, H, avg);
    be.scale_shift(pooled.data(), tokens * H, 0.0f, float(std::sqrt(double(H))));
    if (standardize_) be.scale_shift_cols(pooled.data(), tokens, std_bias_, std_scale_);
    be.rms_norm_heads(pooled.data(), H, tokens, 1, int(H), embed_norm_);

    const ops::Buf y = be.alloc(tokens * out_);  // [tokens, text_hidden]
    be.linear(proj_, pooled.data(), y.data(), tokens, prec);
    ImageEmbedding e;
    e.tokens = tokens;
    e.embeddings.resize(size_t(tokens * out_));
    be.download(y.data(), tokens * out_, e.embeddings.data());
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
  Weight table_w_;            // Dense F32 view of table_ as [2 * positions, hidden]
  Linear input_proj_;         // [hidden, 3*P*P]
  std::vector<Gemma4VisionLayer> layers_;
  NormWeight v_norm_, embed_norm_;          // no-scale RMSNorms (over head_dim, over hidden)
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
