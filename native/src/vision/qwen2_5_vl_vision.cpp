// Qwen2.5-VL vision tower + merger (transformers Qwen2_5_VisionTransformerPretrainedModel): Conv3d
// patch embedding, RMSNorm blocks with window attention (full attention on fullatt_block_indexes),
// 2-D RoPE, SiLU-gated MLP, and the 2x2 patch merger, with the window permutation undone at the end.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include "vision/vision_blocks.h"
#include "vision/vision_families.h"

namespace rapid {
namespace {

using namespace vision;

struct Qwen25Block {
  NormWeight norm1, norm2;       // RMSNorm 1e-6 over hidden
  Linear qkv, proj;              // [3*hidden, hidden] + bias, [hidden, hidden] + bias
  Linear gate, up, down;         // [ffn, hidden] x2, [hidden, ffn], all with bias
};

class Qwen25VLVision final : public VisionEncoder {
 public:
  Qwen25VLVision(std::shared_ptr<const Checkpoint> ckpt, const Json& config) : ckpt_(std::move(ckpt)) {
    const Checkpoint& ck = *ckpt_;
    const Json& vc = vision_config(config, "qwen2_5_vl");
    const QuantConfig qc = QuantConfig::from_config(config);
    prefix_ = probe_prefix(ck, {"model.visual.", "visual.", "vision_tower.", "model.vision_tower."},
                           "patch_embed.proj.weight", "Qwen2.5-VL vision tower");
    channels_ = cfg_int(vc, {"in_channels", "in_chans"}, 3);
    patch_ = cfg_int(vc, {"patch_size"}, 14);
    kt_ = cfg_int(vc, {"temporal_patch_size"}, 2);
    merge_ = cfg_int(vc, {"spatial_merge_size"}, 2);
    const int64_t window_px = cfg_int(vc, {"window_size"}, 112);
    window_ = window_px / merge_ / patch_;
    if (window_ < 1)
      throw std::runtime_error("qwen2_5_vl vision: window_size " + std::to_string(window_px) +
                               " is smaller than one merged unit (" + std::to_string(merge_ * patch_) + " px)");
    heads_ = cfg_int(vc, {"num_heads", "num_attention_heads"}, 16);
    act_ = parse_act(vc.get_string("hidden_act", "silu"), "qwen2_5_vl vision");
    const double theta = rope_theta(vc, 10000.0);
    const int64_t depth = cfg_int(vc, {"depth", "num_hidden_layers"}, 32);
    if (const Json* fa = vc.find("fullatt_block_indexes"); fa && fa->is_array()) {
      for (const Json& i : fa->array()) fullatt_.push_back(int(i.as_int()));
    } else {
      fullatt_ = {7, 15, 23, 31};  // transformers' Qwen2_5_VLVisionConfig default
    }

    // Widths come from the tensors (hub configs disagree on vision hidden_size defaults).
    hidden_ = ck.get(prefix_ + "patch_embed.proj.weight").shape.at(0);
    if (hidden_ % heads_ != 0 || (hidden_ / heads_) % 4 != 0)
      throw std::runtime_error("qwen2_5_vl vision: hidden " + std::to_string(hidden_) + " / num_heads " +
                               std::to_string(heads_) + " does not give a head_dim divisible by 4");
    hd_ = hidden_ / heads_;
    pe_ = load_patch_embed(ck, prefix_ + "patch_embed.proj", hidden_, channels_, kt_, patch_, false);
    const Weight ffn_probe = load_weight(ck, qc, prefix_ + "blocks.0.mlp.gate_proj");
    ffn_ = ffn_probe.out;
    for (int64_t i = 0; i < depth; ++i) {
      const std::string p = prefix_ + "blocks." + std::to_string(i) + ".";
      Qwen25Block b;
      b.norm1 = load_norm(ck, p + "norm1", hidden_, 1e-6f, false);
      b.norm2 = load_norm(ck, p + "norm2", hidden_, 1e-6f, false);
      b.qkv = load_tower_linear(ck, qc, p + "attn.qkv", 3 * hidden_, hidden_, true);
      b.proj = load_tower_linear(ck, qc, p + "attn.proj", hidden_, hidden_, true);
      b.gate = load_tower_linear(ck, qc, p + "mlp.gate_proj", ffn_, hidden_, true);
      b.up = load_tower_linear(ck, qc, p + "mlp.up_proj", ffn_, hidden_, true);
      b.down = load_tower_linear(ck, qc, p + "mlp.down_proj", hidden_, ffn_, true);
      blocks_.push_back(std::move(b));
    }
    const int64_t mw = hidden_ * merge_ * merge_;
    ln_q_ = load_norm(ck, prefix_ + "merger.ln_q", hidden_, 1e-6f, false);
    mlp0_ = load_tower_linear(ck, qc, prefix_ + "merger.mlp.0", mw, mw, true);
    out_ = load_weight(ck, qc, prefix_ + "merger.mlp.2").out;
    mlp2_ = load_tower_linear(ck, qc, prefix_ + "merger.mlp.2", out_, mw, true);
    inv_freq_ = vision_inv_freq(int(hd_), theta);
    bytes_ = prefix_bytes(ck, {prefix_});
    std::vector<const Weight*> ws{&mlp0_.w, &mlp2_.w};
    for (const auto& b : blocks_)
      for (const Linear* l : {&b.qkv, &b.proj, &b.gate, &b.up, &b.down}) ws.push_back(&l->w);
    quant_ = describe_quant(ws);
  }

  std::string family() const override { return "qwen2_5_vl"; }
  int64_t text_hidden() const override { return out_; }
  size_t weight_bytes() const override { return bytes_; }
  std::string quantization() const override { return quant_; }

  ImageEmbedding encode(const ImageInput& img, ops::Backend& be, Precision prec) const override {
    return std::move(encode_batch({img}, be, prec).front());
  }

  // The images' patch rows stacked; window and full attention stay within each image (each frame).
  std::vector<ImageEmbedding> encode_batch(const std::vector<ImageInput>& imgs, ops::Backend& be,
                                           Precision prec) const override {
    const int64_t row_len = channels_ * kt_ * patch_ * patch_;
    for (const ImageInput& img : imgs) check_patch_grid(img, "qwen2_5_vl", row_len, merge_, patch_, int64_t(1) << 18);
    const int64_t unit = merge_ * merge_;  // patches per merged unit
    std::vector<int64_t> off{0};           // first patch row of each image, then the total
    for (const ImageInput& img : imgs) off.push_back(off.back() + int64_t(img.grid_t) * img.grid_h * img.grid_w);
    const int64_t n = off.back(), n_units = n / unit;

    // Window partition of the merged units (transformers get_vision_window_index), image after image.
    std::vector<int32_t> win_index;   // [n_units] permuted unit -> original unit
    std::vector<int64_t> cu_win{0};   // window boundaries in patches (permuted order)
    std::vector<int64_t> cu_full{0};  // one segment per frame
    for (size_t i = 0; i < imgs.size(); ++i) {
      const int64_t t = imgs[i].grid_t, h = imgs[i].grid_h, w = imgs[i].grid_w, u0 = off[i] / unit;
      const int64_t lh = h / merge_, lw = w / merge_;
      const int64_t nwh = (lh + window_ - 1) / window_, nww = (lw + window_ - 1) / window_;
      for (int64_t f = 0; f < t; ++f)
        for (int64_t wh = 0; wh < nwh; ++wh)
          for (int64_t ww = 0; ww < nww; ++ww) {
            int64_t count = 0;
            for (int64_t r = wh * window_; r < std::min(lh, (wh + 1) * window_); ++r)
              for (int64_t c = ww * window_; c < std::min(lw, (ww + 1) * window_); ++c) {
                win_index.push_back(int32_t(u0 + f * lh * lw + r * lw + c));
                ++count;
              }
            if (count > 0) cu_win.push_back(cu_win.back() + count * unit);
          }
      for (int64_t f = 0; f < t; ++f) cu_full.push_back(cu_full.back() + h * w);
    }

    // Patch embedding, then permute rows unit-wise into window order.
    const int64_t uw = unit * hidden_;  // floats per merged unit
    ops::Buf x = be.alloc(n * hidden_);  // [n, hidden] window order
    {
      const ops::Buf emb = be.alloc(n * hidden_);  // [n, hidden] processor order
      for (size_t i = 0; i < imgs.size(); ++i) {
        const int64_t ni = off[i + 1] - off[i];
        const ops::Buf px = be.upload(imgs[i].pixels, ni * row_len);  // [ni, row_len]
        be.linear(pe_.lin, px.data(), emb.data() + off[i] * hidden_, ni, Precision::Exact);
      }
      be.gather_rows(emb.data(), uw, x.data(), uw, uw, win_index);
    }

    std::vector<int32_t> hpos, wpos;  // processor order, then window order
    for (const ImageInput& img : imgs) merge_block_positions(img.grid_t, img.grid_h, img.grid_w, merge_, hpos, wpos);
    std::vector<int32_t> hp(static_cast<size_t>(n)), wp(static_cast<size_t>(n));
    for (int64_t u = 0; u < n_units; ++u)
      for (int64_t j = 0; j < unit; ++j) {
        hp[size_t(u * unit + j)] = hpos[size_t(win_index[size_t(u)] * unit + j)];
        wp[size_t(u * unit + j)] = wpos[size_t(win_index[size_t(u)] * unit + j)];
      }
    const RopeBufs rope = upload_rope(be, vision_rope_table(inv_freq_, hp.data(), wp.data(), n, int(hd_)));

    const ops::Buf hn = be.alloc(n * hidden_);  // [n, hidden]
    const QkvScratch qs{be.alloc(n * 3 * hidden_), be.alloc(n * hidden_)};
    const ops::Buf g = be.alloc(n * ffn_), u = be.alloc(n * ffn_);  // [n, ffn]
    for (size_t li = 0; li < blocks_.size(); ++li) {
      const Qwen25Block& b = blocks_[li];
      const bool full = std::find(fullatt_.begin(), fullatt_.end(), int(li)) != fullatt_.end();
      be.rms_norm(x.data(), hn.data(), n, b.norm1);
      fused_qkv_attention(be, b.qkv, b.proj, hn.data(), x.data(), qs, n, hidden_, int(heads_), int(hd_), rope,
                          full ? cu_full : cu_win, prec);
      be.rms_norm(x.data(), hn.data(), n, b.norm2);
      be.gated_mlp(b.gate, b.up, b.down, hn.data(), hn.data(), g.data(), u.data(), n, act_, prec);  // in place
      be.add(x.data(), hn.data(), n * hidden_);
    }

    // Merger over consecutive groups of `unit` rows (one merged unit each, still window order).
    be.rms_norm(x.data(), hn.data(), n, ln_q_);           // [n_units, uw] as a view
    const ops::Buf m0 = be.alloc(n_units * uw);           // [n_units, uw]
    be.linear(mlp0_, hn.data(), m0.data(), n_units, prec);
    be.act(m0.data(), n_units, uw, VAct::GeluErf);
    const ops::Buf m2 = be.alloc(n_units * out_);         // [n_units, out] window order
    be.linear(mlp2_, m0.data(), m2.data(), n_units, prec);
    const ops::Buf m = be.alloc(n_units * out_);          // [n_units, out] processor order
    be.scatter_rows(m2.data(), out_, m.data(), out_, out_, win_index);

    std::vector<ImageEmbedding> out(imgs.size());
    for (size_t i = 0; i < imgs.size(); ++i) {
      const int64_t u0 = off[i] / unit, nu = (off[i + 1] - off[i]) / unit;
      out[i].tokens = nu;
      out[i].embeddings.resize(size_t(nu * out_));
      be.download(m.data() + u0 * out_, nu * out_, out[i].embeddings.data());
    }
    return out;
  }

 private:
  std::shared_ptr<const Checkpoint> ckpt_;  // keeps the mapped weights alive
  std::string prefix_;
  int64_t channels_ = 3, patch_ = 14, kt_ = 2, merge_ = 2, window_ = 4;
  int64_t hidden_ = 0, heads_ = 0, hd_ = 0, ffn_ = 0, out_ = 0;
  VAct act_ = VAct::Silu;
  std::vector<int> fullatt_;
  PatchEmbed pe_;
  std::vector<Qwen25Block> blocks_;
  NormWeight ln_q_;
  Linear mlp0_, mlp2_;
  std::vector<float> inv_freq_;  // [hd/4]
  size_t bytes_ = 0;
  std::string quant_;
};

}  // namespace

std::unique_ptr<VisionEncoder> load_qwen2_5_vl_vision(std::shared_ptr<const Checkpoint> ckpt, const Json& config) {
  return std::make_unique<Qwen25VLVision>(std::move(ckpt), config);
}

}  // namespace rapid
