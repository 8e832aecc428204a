// Pixtral vision tower + Mistral 3 projector (transformers PixtralVisionModel, Mistral3MultiModalProjector):
// Conv2d patch embedding without bias, ln_pre RMSNorm, RMSNorm blocks with 2-D axial RoPE and a SiLU-gated
// MLP, then RMSNorm (text eps), the 2x2 PatchMerger (unfold, channel-major) and linear_1 -> GELU -> linear_2.
// One image per call, so the block-diagonal mask of a multi-image batch is one full segment here.
#include <cmath>
#include <stdexcept>
#include "vision/vision_blocks.h"
#include "vision/vision_families.h"

namespace rapid {
namespace {

using namespace vision;

struct PixtralLayer {
  NormWeight attn_norm, ffn_norm;  // RMSNorm 1e-5 over hidden
  Linear q, k, v, o;               // [heads*hd, hidden] x3, [hidden, heads*hd], no bias
  Linear gate, up, down;           // [ffn, hidden] x2, [hidden, ffn], no bias
};

class PixtralVision final : public VisionEncoder {
 public:
  PixtralVision(std::shared_ptr<const Checkpoint> ckpt, const Json& config) : ckpt_(std::move(ckpt)) {
    const Checkpoint& ck = *ckpt_;
    const Json& vc = vision_config(config, "mistral3");
    const QuantConfig qc = QuantConfig::from_config(config);
    // mlx-vlm inserts `vision_model.` after vision_tower; transformers (legacy and new layouts) does not.
    vprefix_ = probe_prefix(ck,
                            {"model.vision_tower.vision_model.", "model.vision_tower.", "vision_tower.vision_model.",
                             "vision_tower."},
                            "patch_conv.weight", "Pixtral vision tower");
    pprefix_ = probe_prefix(ck, {"model.multi_modal_projector.", "multi_modal_projector."}, "norm.weight",
                            "Mistral 3 multi-modal projector");
    channels_ = cfg_int(vc, {"num_channels", "in_channels"}, 3);
    const TensorView& conv = ck.get(vprefix_ + "patch_conv.weight");
    patch_ = cfg_int(vc, {"patch_size"}, conv.shape.size() == 4 ? conv.shape[2] : 14);
    hidden_ = conv.shape.at(0);
    heads_ = cfg_int(vc, {"num_attention_heads", "num_heads"}, 16);
    const Json* hdj = vc.find("head_dim");
    hd_ = (hdj && hdj->is_number()) ? hdj->as_int() : hidden_ / heads_;
    if (hd_ <= 0 || hd_ % 4 != 0)
      throw std::runtime_error("mistral3 vision: head_dim " + std::to_string(hd_) + " is not a positive multiple of 4");
    const int64_t layers = cfg_int(vc, {"num_hidden_layers", "depth"}, 24);
    act_ = parse_act(vc.get_string("hidden_act", "gelu"), "mistral3 vision");
    merge_ = cfg_int(config, {"spatial_merge_size"}, 2);
    const Json& tc = config.find("text_config") ? *config.find("text_config") : config;
    const float text_eps = float(tc.get_double("rms_norm_eps", 1e-5));
    if (const Json* fl = config.find("vision_feature_layer"); fl && fl->is_number()) {
      const int64_t l = fl->as_int();
      if (l != -1 && l != layers)
        throw std::runtime_error("mistral3 vision: vision_feature_layer " + std::to_string(l) +
                                 " is not supported (only the last layer, -1)");
    } else if (fl && !fl->is_null()) {
      throw std::runtime_error("mistral3 vision: a list vision_feature_layer is not supported");
    }
    const std::string proj_act = config.get_string("projector_hidden_act", "gelu");
    proj_act_ = parse_act(proj_act, "mistral3 projector");
    const bool proj_bias = config.get_bool("multimodal_projector_bias", false);
    const double theta = rope_theta(vc, vc.get_double("rope_theta", 10000.0));

    pe_ = load_patch_embed(ck, vprefix_ + "patch_conv", hidden_, channels_, 0, patch_, false);
    ln_pre_ = load_norm(ck, vprefix_ + "ln_pre", hidden_, 1e-5f, false);
    const int64_t qd = heads_ * hd_;
    ffn_ = load_weight(ck, qc, vprefix_ + "transformer.layers.0.feed_forward.gate_proj").out;
    for (int64_t i = 0; i < layers; ++i) {
      const std::string p = vprefix_ + "transformer.layers." + std::to_string(i) + ".";
      PixtralLayer l;
      l.attn_norm = load_norm(ck, p + "attention_norm", hidden_, 1e-5f, false);
      l.ffn_norm = load_norm(ck, p + "ffn_norm", hidden_, 1e-5f, false);
      l.q = load_tower_linear(ck, qc, p + "attention.q_proj", qd, hidden_, false);
      l.k = load_tower_linear(ck, qc, p + "attention.k_proj", qd, hidden_, false);
      l.v = load_tower_linear(ck, qc, p + "attention.v_proj", qd, hidden_, false);
      l.o = load_tower_linear(ck, qc, p + "attention.o_proj", hidden_, qd, false);
      l.gate = load_tower_linear(ck, qc, p + "feed_forward.gate_proj", ffn_, hidden_, false);
      l.up = load_tower_linear(ck, qc, p + "feed_forward.up_proj", ffn_, hidden_, false);
      l.down = load_tower_linear(ck, qc, p + "feed_forward.down_proj", hidden_, ffn_, false);
      layers_.push_back(std::move(l));
    }
    norm_ = load_norm(ck, pprefix_ + "norm", hidden_, text_eps, false);
    merging_ = load_tower_linear(ck, qc, pprefix_ + "patch_merger.merging_layer", hidden_, hidden_ * merge_ * merge_, false);
    out_ = load_weight(ck, qc, pprefix_ + "linear_1").out;
    linear1_ = load_tower_linear(ck, qc, pprefix_ + "linear_1", out_, hidden_, proj_bias);
    linear2_ = load_tower_linear(ck, qc, pprefix_ + "linear_2", out_, out_, proj_bias);

    // PixtralVisionRotaryEmbedding: f_i = theta^(-2i/hd) (f32); h angles use f[0::2], w angles f[1::2].
    const int64_t q4 = hd_ / 4;
    for (int64_t j = 0; j < q4; ++j) {
      const auto f = [&](int64_t i) { return float(1.0 / std::pow(theta, double(float(2 * i) / float(hd_)))); };
      f_h_.push_back(f(2 * j));
      f_w_.push_back(f(2 * j + 1));
    }
    bytes_ = prefix_bytes(ck, {vprefix_, pprefix_});
    std::vector<const Weight*> ws{&merging_.w, &linear1_.w, &linear2_.w};
    for (const auto& l : layers_)
      for (const Linear* x : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) ws.push_back(&x->w);
    quant_ = describe_quant(ws);
  }

  std::string family() const override { return "mistral3"; }
  int64_t text_hidden() const override { return out_; }
  size_t weight_bytes() const override { return bytes_; }
  std::string quantization() const override { return quant_; }

  ImageEmbedding encode(const ImageInput& img, ops::Backend& be, Precision prec) const override {
    if (!img.pixels) throw std::invalid_argument("mistral3 vision: no pixel values given");
    const int64_t gh = img.grid_h, gw = img.grid_w, unit = patch_ * merge_;
    if (img.grid_t != 1 || gh < merge_ || gw < merge_ || gh % merge_ != 0 || gw % merge_ != 0 || gh * gw > (1 << 16))
      throw std::invalid_argument("mistral3 vision: image grid [" + std::to_string(img.grid_t) + ", " +
                                  std::to_string(gh) + ", " + std::to_string(gw) + "] must be [1, h, w] with h and w " +
                                  "multiples of " + std::to_string(merge_) + " (image sides multiples of " +
                                  std::to_string(unit) + " px) and at most 65536 patches");
    const int64_t ph = gh * patch_, pw = gw * patch_;
    if (img.n_values != channels_ * ph * pw)
      throw std::invalid_argument("mistral3 vision: got " + std::to_string(img.n_values) + " pixel values, expected " +
                                  std::to_string(channels_ * ph * pw) + " ([" + std::to_string(channels_) + ", " +
                                  std::to_string(ph) + ", " + std::to_string(pw) + "])");
    const int64_t n = gh * gw;  // patches, row-major
    const ops::Buf x = be.alloc(n * hidden_);  // [n, hidden]
    {
      const ops::Buf px = be.upload(img.pixels, img.n_values);  // [C, H, W] as rows of P floats
      const ops::Buf rows = be.alloc(n * pe_.in());              // [n, C*P*P]
      be.gather_rows(px.data(), patch_, rows.data(), patch_, patch_, image_patch_index(channels_, gh, gw, patch_));
      be.linear(pe_.lin, rows.data(), x.data(), n, Precision::Exact);
    }
    be.rms_norm(x.data(), x.data(), n, ln_pre_);

    // cos/sin [n, hd/2] = [row * f_h (hd/4), col * f_w (hd/4)]; rotate_half pairs i with i + hd/2.
    RopeTable table;
    table.half = int(hd_ / 2);
    table.head_dim = int(hd_);
    table.cos.resize(size_t(n * table.half));
    table.sin.resize(size_t(n * table.half));
    const int64_t q4 = hd_ / 4;
    for (int64_t i = 0; i < n; ++i) {
      float* c = table.cos.data() + i * table.half;  // [hd/2]
      float* s = table.sin.data() + i * table.half;  // [hd/2]
      for (int64_t j = 0; j < q4; ++j) {
        const float ah = float(i / gw) * f_h_[size_t(j)], aw = float(i % gw) * f_w_[size_t(j)];
        c[j] = std::cos(ah);
        s[j] = std::sin(ah);
        c[q4 + j] = std::cos(aw);
        s[q4 + j] = std::sin(aw);
      }
    }
    const RopeBufs rope = upload_rope(be, table);

    const int64_t qd = heads_ * hd_, ld = 3 * qd;
    const ops::Buf hn = be.alloc(n * hidden_);  // [n, hidden]
    const ops::Buf qkv = be.alloc(n * ld);      // [n, (q, k, v), heads, hd]
    const ops::Buf att = be.alloc(n * qd);      // [n, heads*hd]
    const ops::Buf g = be.alloc(n * ffn_), u = be.alloc(n * ffn_);  // [n, ffn]
    const std::vector<int64_t> cu{0, n};
    const float scale = 1.0f / std::sqrt(float(hd_));
    float* q = qkv.data();
    for (const PixtralLayer& l : layers_) {
      be.rms_norm(x.data(), hn.data(), n, l.attn_norm);
      be.linear(l.q, hn.data(), hidden_, q, ld, n, prec);
      be.linear(l.k, hn.data(), hidden_, q + qd, ld, n, prec);
      be.linear(l.v, hn.data(), hidden_, q + 2 * qd, ld, n, prec);
      rope_heads(be, q, ld, n, int(heads_), rope);
      rope_heads(be, q + qd, ld, n, int(heads_), rope);
      be.attention(q, ld, q + qd, q + 2 * qd, ld, att.data(), qd, int(heads_), int(heads_), int(hd_), scale, cu, prec);
      be.linear(l.o, att.data(), hn.data(), n, prec);
      be.add(x.data(), hn.data(), n * hidden_);
      be.rms_norm(x.data(), hn.data(), n, l.ffn_norm);
      be.gated_mlp(l.gate, l.up, l.down, hn.data(), hn.data(), g.data(), u.data(), n, act_, prec);  // in place
      be.add(x.data(), hn.data(), n * hidden_);
    }

    // Projector: RMSNorm, then PatchMerger = F.unfold(kernel = stride = merge) over the [hidden, gh, gw] grid:
    // merged cell (R, C) in raster order, feature c*m*m + kh*m + kw (channel-major): gather each cell's m*m
    // patch rows [m*m, hidden], then transpose them to [hidden, m*m].
    be.rms_norm(x.data(), x.data(), n, norm_);
    const int64_t mh = gh / merge_, mw = gw / merge_, units = mh * mw, mm = merge_ * merge_;
    std::vector<int32_t> cell;  // [units * m*m] patch rows, cell-major, (kh, kw) inside
    for (int64_t r = 0; r < mh; ++r)
      for (int64_t cc = 0; cc < mw; ++cc)
        for (int64_t kh = 0; kh < merge_; ++kh)
          for (int64_t kw = 0; kw < merge_; ++kw) cell.push_back(int32_t((r * merge_ + kh) * gw + cc * merge_ + kw));
    const ops::Buf cat = be.alloc(units * hidden_ * mm);  // [units, hidden*m*m]
    be.gather_rows(x.data(), hidden_, hn.data(), hidden_, hidden_, cell);  // [units, m*m, hidden] (n rows)
    be.transpose(hn.data(), cat.data(), units, mm, hidden_);
    const ops::Buf merged = be.alloc(units * hidden_);  // [units, hidden]
    be.linear(merging_, cat.data(), merged.data(), units, prec);
    const ops::Buf h1 = be.alloc(units * out_);  // [units, text_hidden]
    be.linear(linear1_, merged.data(), h1.data(), units, prec);
    be.act(h1.data(), units, out_, proj_act_);
    const ops::Buf y = be.alloc(units * out_);  // [units, text_hidden], rows of the [IMG] tokens in order
    be.linear(linear2_, h1.data(), y.data(), units, prec);
    ImageEmbedding e;
    e.tokens = units;
    e.embeddings.resize(size_t(units * out_));
    be.download(y.data(), units * out_, e.embeddings.data());
    return e;
  }

 private:
  std::shared_ptr<const Checkpoint> ckpt_;  // keeps the mapped weights alive
  std::string vprefix_, pprefix_;
  int64_t channels_ = 3, patch_ = 14, merge_ = 2;
  int64_t hidden_ = 0, heads_ = 0, hd_ = 0, ffn_ = 0, out_ = 0;
  VAct act_ = VAct::GeluErf, proj_act_ = VAct::GeluErf;
  PatchEmbed pe_;
  NormWeight ln_pre_, norm_;
  std::vector<PixtralLayer> layers_;
  Linear merging_, linear1_, linear2_;
  std::vector<float> f_h_, f_w_;  // [hd/4] each
  size_t bytes_ = 0;
  std::string quant_;
};

}  // namespace

std::unique_ptr<VisionEncoder> load_pixtral_vision(std::shared_ptr<const Checkpoint> ckpt, const Json& config) {
  return std::make_unique<PixtralVision>(std::move(ckpt), config);
}

}  // namespace rapid
