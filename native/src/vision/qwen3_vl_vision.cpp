// Qwen3-VL vision tower + mergers (transformers Qwen3VLVisionModel): Conv3d patch embedding with
// bias, bilinearly interpolated learned position embedding, LayerNorm blocks with full attention per
// frame and 2-D RoPE, gelu_tanh MLP, the final 2x2 merger and the DeepStack mergers.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include "vision/vision_blocks.h"
#include "vision/vision_families.h"

namespace rapid {
namespace {

using namespace vision;

struct Qwen3Block {
  LayerNormW norm1, norm2;  // LayerNorm 1e-6 over hidden
  Linear qkv, proj;         // [3*hidden, hidden], [hidden, hidden], with bias
  Linear fc1, fc2;          // [ffn, hidden], [hidden, ffn], with bias
};

// Qwen3VLVisionPatchMerger: norm (before the 2x2 view, or after it for DeepStack), fc1, GELU, fc2.
struct Merger {
  LayerNormW norm;  // [hidden] or [4*hidden] (postshuffle)
  bool postshuffle = false;
  Linear fc1, fc2;  // [4h, 4h], [out, 4h]
};

class Qwen3VLVision final : public VisionEncoder {
 public:
  Qwen3VLVision(std::shared_ptr<const Checkpoint> ckpt, const Json& config) : ckpt_(std::move(ckpt)) {
    const Checkpoint& ck = *ckpt_;
    const Json& vc = vision_config(config, "qwen3_vl");
    const QuantConfig qc = QuantConfig::from_config(config);
    prefix_ = probe_prefix(ck, {"model.visual.", "visual.", "vision_tower.", "model.vision_tower."},
                           "patch_embed.proj.weight", "Qwen3-VL vision tower");
    channels_ = cfg_int(vc, {"in_channels", "in_chans"}, 3);
    patch_ = cfg_int(vc, {"patch_size"}, 16);
    kt_ = cfg_int(vc, {"temporal_patch_size"}, 2);
    merge_ = cfg_int(vc, {"spatial_merge_size"}, 2);
    heads_ = cfg_int(vc, {"num_heads", "num_attention_heads"}, 16);
    act_ = parse_act(vc.get_string("hidden_act", "gelu_pytorch_tanh"), "qwen3_vl vision");
    const double theta = rope_theta(vc, 10000.0);
    const int64_t depth = cfg_int(vc, {"depth", "num_hidden_layers"}, 27);
    std::vector<int64_t> ds_idx;
    if (const Json* d = vc.find("deepstack_visual_indexes"); d && d->is_array()) {
      for (const Json& i : d->array()) ds_idx.push_back(i.as_int());
    } else {
      ds_idx = {8, 16, 24};  // transformers' Qwen3VLVisionConfig default
    }

    hidden_ = ck.get(prefix_ + "patch_embed.proj.weight").shape.at(0);
    if (hidden_ % heads_ != 0 || (hidden_ / heads_) % 4 != 0)
      throw std::runtime_error("qwen3_vl vision: hidden " + std::to_string(hidden_) + " / num_heads " +
                               std::to_string(heads_) + " does not give a head_dim divisible by 4");
    hd_ = hidden_ / heads_;
    pe_ = load_patch_embed(ck, prefix_ + "patch_embed.proj", hidden_, channels_, kt_, patch_, true);
    pos_ = load_embedding(ck, qc, prefix_ + "pos_embed");
    if (pos_.in != hidden_)
      throw std::runtime_error("qwen3_vl vision: pos_embed has width " + std::to_string(pos_.in) + ", expected " +
                               std::to_string(hidden_));
    side_ = int64_t(std::lround(std::sqrt(double(pos_.out))));
    if (side_ * side_ != pos_.out)
      throw std::runtime_error("qwen3_vl vision: pos_embed has " + std::to_string(pos_.out) +
                               " rows, not a square grid");
    ffn_ = load_weight(ck, qc, prefix_ + "blocks.0.mlp.linear_fc1").out;
    for (int64_t i = 0; i < depth; ++i) {
      const std::string p = prefix_ + "blocks." + std::to_string(i) + ".";
      Qwen3Block b;
      b.norm1 = load_layer_norm(ck, p + "norm1", hidden_, 1e-6f);
      b.norm2 = load_layer_norm(ck, p + "norm2", hidden_, 1e-6f);
      b.qkv = load_tower_linear(ck, qc, p + "attn.qkv", 3 * hidden_, hidden_, true);
      b.proj = load_tower_linear(ck, qc, p + "attn.proj", hidden_, hidden_, true);
      b.fc1 = load_tower_linear(ck, qc, p + "mlp.linear_fc1", ffn_, hidden_, true);
      b.fc2 = load_tower_linear(ck, qc, p + "mlp.linear_fc2", hidden_, ffn_, true);
      blocks_.push_back(std::move(b));
    }
    out_ = load_weight(ck, qc, prefix_ + "merger.linear_fc2").out;
    merger_ = load_merger(ck, qc, prefix_ + "merger.", false);
    for (size_t k = 0; k < ds_idx.size(); ++k) {
      if (ds_idx[k] < 0 || ds_idx[k] >= depth)
        throw std::runtime_error("qwen3_vl vision: deepstack_visual_indexes entry " + std::to_string(ds_idx[k]) +
                                 " is outside the " + std::to_string(depth) + " blocks");
      ds_layer_.push_back(ds_idx[k]);
      ds_.push_back(load_merger(ck, qc, prefix_ + "deepstack_merger_list." + std::to_string(k) + ".", true));
    }
    inv_freq_ = vision_inv_freq(int(hd_), theta);
    bytes_ = prefix_bytes(ck, {prefix_});
    std::vector<const Weight*> ws{&merger_.fc1.w, &merger_.fc2.w, &pos_};
    for (const Merger& m : ds_) ws.insert(ws.end(), {&m.fc1.w, &m.fc2.w});
    for (const auto& b : blocks_)
      for (const Linear* l : {&b.qkv, &b.proj, &b.fc1, &b.fc2}) ws.push_back(&l->w);
    quant_ = describe_quant(ws);
  }

  std::string family() const override { return "qwen3_vl"; }
  int64_t text_hidden() const override { return out_; }
  int deepstack_layers() const override { return int(ds_.size()); }
  size_t weight_bytes() const override { return bytes_; }
  std::string quantization() const override { return quant_; }

  ImageEmbedding encode(const ImageInput& img, ops::Backend& be, Precision prec) const override {
    return std::move(encode_batch({img}, be, prec).front());
  }

  // The images' patch rows stacked (each in merge-block order); attention stays within each frame.
  std::vector<ImageEmbedding> encode_batch(const std::vector<ImageInput>& imgs, ops::Backend& be,
                                           Precision prec) const override {
    const int64_t row_len = channels_ * kt_ * patch_ * patch_;
    for (const ImageInput& img : imgs) check_patch_grid(img, "qwen3_vl", row_len, merge_, patch_, int64_t(1) << 18);
    const int64_t unit = merge_ * merge_;
    std::vector<int64_t> off{0};  // first patch row of each image, then the total
    for (const ImageInput& img : imgs) off.push_back(off.back() + int64_t(img.grid_t) * img.grid_h * img.grid_w);
    const int64_t n = off.back(), n_units = n / unit;

    const ops::Buf x = be.alloc(n * hidden_);  // [n, hidden]
    std::vector<int32_t> hpos, wpos;           // [n] each, image after image
    ops::Taps taps;
    std::vector<int64_t> cu{0};  // full attention within each frame of each image
    for (size_t i = 0; i < imgs.size(); ++i) {
      const ImageInput& img = imgs[i];
      const int64_t t = img.grid_t, h = img.grid_h, w = img.grid_w, ni = off[i + 1] - off[i];
      {
        const ops::Buf px = be.upload(img.pixels, ni * row_len);  // [ni, row_len]
        be.linear(pe_.lin, px.data(), x.data() + off[i] * hidden_, ni, Precision::Exact);
      }
      std::vector<int32_t> hp, wp;
      merge_block_positions(t, h, w, merge_, hp, wp);
      const ops::Taps ti = position_taps(hp, wp, h, w);
      taps.k = ti.k;
      taps.idx.insert(taps.idx.end(), ti.idx.begin(), ti.idx.end());
      taps.w.insert(taps.w.end(), ti.w.begin(), ti.w.end());
      hpos.insert(hpos.end(), hp.begin(), hp.end());
      wpos.insert(wpos.end(), wp.begin(), wp.end());
      for (int64_t f = 0; f < t; ++f) cu.push_back(cu.back() + h * w);
    }
    be.add_table_rows(pos_, taps, x.data(), hidden_);
    const RopeBufs rope = upload_rope(be, vision_rope_table(inv_freq_, hpos.data(), wpos.data(), n, int(hd_)));

    const int64_t per = n_units * out_;  // floats of one merger output
    const ops::Buf ds = be.alloc(int64_t(ds_.size()) * per);  // [k, n_units, out]
    const ops::Buf hn = be.alloc(n * hidden_);                 // [n, hidden]
    const QkvScratch qs{be.alloc(n * 3 * hidden_), be.alloc(n * hidden_)};
    const ops::Buf f1 = be.alloc(n * ffn_);                    // [n, ffn]
    for (size_t li = 0; li < blocks_.size(); ++li) {
      const Qwen3Block& b = blocks_[li];
      be.layer_norm(x.data(), hn.data(), n, b.norm1);
      fused_qkv_attention(be, b.qkv, b.proj, hn.data(), x.data(), qs, n, hidden_, int(heads_), int(hd_), rope, cu,
                          prec);
      be.layer_norm(x.data(), hn.data(), n, b.norm2);
      plain_mlp(be, b.fc1, b.fc2, hn.data(), f1.data(), x.data(), n, act_, prec);
      for (size_t k = 0; k < ds_.size(); ++k)
        if (ds_layer_[k] == int64_t(li)) run_merger(be, ds_[k], x.data(), n, ds.data() + int64_t(k) * per, prec);
    }
    const ops::Buf y = be.alloc(per);  // [n_units, out]
    run_merger(be, merger_, x.data(), n, y.data(), prec);

    std::vector<ImageEmbedding> out(imgs.size());
    for (size_t i = 0; i < imgs.size(); ++i) {
      const int64_t u0 = off[i] / unit, nu = (off[i + 1] - off[i]) / unit;  // this image's merged tokens
      ImageEmbedding& e = out[i];
      e.tokens = nu;
      e.embeddings.resize(size_t(nu * out_));
      be.download(y.data() + u0 * out_, nu * out_, e.embeddings.data());
      e.deepstack.resize(ds_.size() * size_t(nu * out_));
      for (size_t k = 0; k < ds_.size(); ++k)  // [k, nu, out] of [k, n_units, out]
        be.download(ds.data() + int64_t(k) * per + u0 * out_, nu * out_, e.deepstack.data() + k * size_t(nu * out_));
    }
    return out;
  }

 private:
  Merger load_merger(const Checkpoint& ck, const QuantConfig& qc, const std::string& p, bool postshuffle) const {
    const int64_t mw = hidden_ * merge_ * merge_;
    Merger m;
    m.postshuffle = postshuffle;
    m.norm = load_layer_norm(ck, p + "norm", postshuffle ? mw : hidden_, 1e-6f);
    m.fc1 = load_tower_linear(ck, qc, p + "linear_fc1", mw, mw, true);
    m.fc2 = load_tower_linear(ck, qc, p + "linear_fc2", out_, mw, true);
    return m;
  }

  // x [n, hidden] (merge-block order) -> y [n/4, out] (backend memory).
  void run_merger(ops::Backend& be, const Merger& m, const float* x, int64_t n, float* y, Precision prec) const {
    const int64_t unit = merge_ * merge_, nu = n / unit, mw = hidden_ * unit;
    const ops::Buf a = be.alloc(n * hidden_);  // [nu, mw]
    if (m.postshuffle) be.layer_norm(x, a.data(), nu, m.norm);
    else be.layer_norm(x, a.data(), n, m.norm);
    const ops::Buf b = be.alloc(nu * mw);      // [nu, mw]
    be.linear(m.fc1, a.data(), b.data(), nu, prec);
    be.act(b.data(), nu, mw, VAct::GeluErf);
    be.linear(m.fc2, b.data(), y, nu, prec);
  }

  // Bilinear (align_corners=True) resampling of the side x side pos_embed grid to h x w, per patch in
  // merge-block order (transformers get_vision_interpolation_indices_and_weights): 4 weighted taps a patch.
  ops::Taps position_taps(const std::vector<int32_t>& hpos, const std::vector<int32_t>& wpos, int64_t h,
                          int64_t w) const {
    auto taps = [&](int32_t idx, int64_t size, int64_t tap[2], float wt[2]) {
      const float src = float(idx) * float(side_ - 1) / float(std::max<int64_t>(size - 1, 1));
      const float fl = std::floor(src);
      for (int o = 0; o < 2; ++o) {
        tap[o] = std::clamp<int64_t>(int64_t(fl) + o, 0, side_ - 1);
        wt[o] = std::max(0.0f, 1.0f - std::fabs(src - fl - float(o)));
      }
    };
    ops::Taps t;
    t.k = 4;
    for (size_t i = 0; i < hpos.size(); ++i) {
      int64_t th[2], tw[2];
      float wh[2], ww[2];
      taps(hpos[i], h, th, wh);
      taps(wpos[i], w, tw, ww);
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b) {
          t.idx.push_back(int32_t(th[a] * side_ + tw[b]));
          t.w.push_back(wh[a] * ww[b]);
        }
    }
    return t;
  }

  std::shared_ptr<const Checkpoint> ckpt_;  // keeps the mapped weights alive
  std::string prefix_;
  int64_t channels_ = 3, patch_ = 16, kt_ = 2, merge_ = 2;
  int64_t hidden_ = 0, heads_ = 0, hd_ = 0, ffn_ = 0, out_ = 0, side_ = 0;
  VAct act_ = VAct::GeluTanh;
  PatchEmbed pe_;
  Weight pos_;  // [side*side, hidden]
  std::vector<Qwen3Block> blocks_;
  Merger merger_;
  std::vector<Merger> ds_;
  std::vector<int64_t> ds_layer_;  // block index after which ds_[k] runs
  std::vector<float> inv_freq_;    // [hd/4]
  size_t bytes_ = 0;
  std::string quant_;
};

}  // namespace

std::unique_ptr<VisionEncoder> load_qwen3_vl_vision(std::shared_ptr<const Checkpoint> ckpt, const Json& config) {
  return std::make_unique<Qwen3VLVision>(std::move(ckpt), config);
}

}  // namespace rapid
