// Gemma 3 vision: the SigLIP tower (Conv2d patch embedding with bias + learned positions, pre-LN
// blocks with q/k/v/out biases, gelu_tanh MLP, post_layernorm) and Gemma3MultiModalProjector
// (average pool to tokens_per_side^2, Gemma RMSNorm (1 + w), x @ mm_input_projection_weight).
#include <cmath>
#include <stdexcept>
#include "vision/vision_blocks.h"
#include "vision/vision_families.h"

namespace rapid {
namespace {

using namespace vision;

struct SiglipLayer {
  LayerNormW ln1, ln2;          // [hidden]
  Linear q, k, v, o;            // [hidden, hidden] with bias
  Linear fc1, fc2;              // [ffn, hidden], [hidden, ffn] with bias
};

class Gemma3Vision final : public VisionEncoder {
 public:
  Gemma3Vision(std::shared_ptr<const Checkpoint> ckpt, const Json& config) : ckpt_(std::move(ckpt)) {
    const Checkpoint& ck = *ckpt_;
    const Json& vc = vision_config(config, "gemma3");
    const QuantConfig qc = QuantConfig::from_config(config);
    // The SigLIP `vision_model.` segment is optional (transformers 5 save_pretrained drops it).
    vprefix_ = probe_prefix(ck,
                            {"model.vision_tower.vision_model.", "model.vision_tower.", "vision_tower.vision_model.",
                             "vision_tower.", "vision_model."},
                            "embeddings.patch_embedding.weight", "Gemma 3 SigLIP vision tower");
    pprefix_ = probe_prefix(ck, {"model.multi_modal_projector.", "multi_modal_projector."},
                            "mm_input_projection_weight", "Gemma 3 multi-modal projector");
    channels_ = cfg_int(vc, {"num_channels", "in_channels"}, 3);
    // Missing sizes fall back to the weights: the conv kernel side (shape[2] in both the HF and MLX
    // layouts) and the square position table.
    const TensorView& conv = ck.get(vprefix_ + "embeddings.patch_embedding.weight");
    patch_ = cfg_int(vc, {"patch_size"}, conv.shape.size() == 4 ? conv.shape[2] : 14);
    const int64_t n_pos = ck.get(vprefix_ + "embeddings.position_embedding.weight").shape.at(0);
    image_ = cfg_int(vc, {"image_size"}, int64_t(std::lround(std::sqrt(double(n_pos)))) * patch_);
    heads_ = cfg_int(vc, {"num_attention_heads", "num_heads"}, 16);
    const int64_t layers = cfg_int(vc, {"num_hidden_layers", "depth"}, 27);
    const float eps = float(vc.get_double("layer_norm_eps", 1e-6));
    act_ = parse_act(vc.get_string("hidden_act", "gelu_pytorch_tanh"), "gemma3 vision");
    pps_ = image_ / patch_;
    const int64_t mm_tokens = cfg_int(config, {"mm_tokens_per_image"}, 256);
    tps_ = int64_t(std::lround(std::sqrt(double(mm_tokens))));
    if (tps_ * tps_ != mm_tokens || tps_ < 1 || pps_ % tps_ != 0)
      throw std::runtime_error("gemma3 vision: mm_tokens_per_image " + std::to_string(mm_tokens) +
                               " is not a square that divides the " + std::to_string(pps_) + "x" +
                               std::to_string(pps_) + " patch grid");

    hidden_ = ck.get(vprefix_ + "embeddings.patch_embedding.weight").shape.at(0);
    if (hidden_ % heads_ != 0)
      throw std::runtime_error("gemma3 vision: hidden " + std::to_string(hidden_) + " is not divisible by " +
                               std::to_string(heads_) + " heads");
    hd_ = hidden_ / heads_;
    pe_ = load_patch_embed(ck, vprefix_ + "embeddings.patch_embedding", hidden_, channels_, 0, patch_, true);
    pos_ = load_embedding(ck, qc, vprefix_ + "embeddings.position_embedding");
    if (pos_.in != hidden_ || pos_.out < pps_ * pps_)
      throw std::runtime_error("gemma3 vision: position_embedding is [" + std::to_string(pos_.out) + ", " +
                               std::to_string(pos_.in) + "], expected [" + std::to_string(pps_ * pps_) + ", " +
                               std::to_string(hidden_) + "]");
    ffn_ = load_weight(ck, qc, vprefix_ + "encoder.layers.0.mlp.fc1").out;
    for (int64_t i = 0; i < layers; ++i) {
      const std::string p = vprefix_ + "encoder.layers." + std::to_string(i) + ".";
      SiglipLayer l;
      l.ln1 = load_layer_norm(ck, p + "layer_norm1", hidden_, eps);
      l.ln2 = load_layer_norm(ck, p + "layer_norm2", hidden_, eps);
      l.q = load_tower_linear(ck, qc, p + "self_attn.q_proj", hidden_, hidden_, true);
      l.k = load_tower_linear(ck, qc, p + "self_attn.k_proj", hidden_, hidden_, true);
      l.v = load_tower_linear(ck, qc, p + "self_attn.v_proj", hidden_, hidden_, true);
      l.o = load_tower_linear(ck, qc, p + "self_attn.out_proj", hidden_, hidden_, true);
      l.fc1 = load_tower_linear(ck, qc, p + "mlp.fc1", ffn_, hidden_, true);
      l.fc2 = load_tower_linear(ck, qc, p + "mlp.fc2", hidden_, ffn_, true);
      layers_.push_back(std::move(l));
    }
    post_ln_ = load_layer_norm(ck, vprefix_ + "post_layernorm", hidden_, eps);
    soft_norm_ = load_norm(ck, pprefix_ + "mm_soft_emb_norm", hidden_, eps, true);

    // mm_input_projection_weight is [vision_hidden, text_hidden] and used as x @ W (not transposed);
    // transposed once into the [out, in] f32 layout the matmul kernels take.
    const TensorView& pw = ck.get(pprefix_ + "mm_input_projection_weight");
    if (pw.shape.size() != 2 || pw.shape[0] != hidden_ || !is_float_dtype(pw.dtype))
      throw std::runtime_error("tensor " + pw.name + " has shape " + pw.shape_str() + " dtype " +
                               dtype_name(pw.dtype) + ", expected float [" + std::to_string(hidden_) +
                               ", text_hidden]");
    out_ = pw.shape[1];
    proj_t_.resize(size_t(out_ * hidden_));
    for (int64_t i = 0; i < hidden_; ++i)
      for (int64_t o = 0; o < out_; ++o) proj_t_[size_t(o * hidden_ + i)] = load_float(pw.data, pw.dtype, size_t(i * out_ + o));
    proj_.w = f32_weight(proj_t_.data(), out_, hidden_, pw.name);

    bytes_ = prefix_bytes(ck, {vprefix_, pprefix_});
    std::vector<const Weight*> ws{&pos_};
    for (const auto& l : layers_)
      for (const Linear* x : {&l.q, &l.k, &l.v, &l.o, &l.fc1, &l.fc2}) ws.push_back(&x->w);
    quant_ = describe_quant(ws);
  }

  std::string family() const override { return "gemma3"; }
  int64_t text_hidden() const override { return out_; }
  size_t weight_bytes() const override { return bytes_; }
  std::string quantization() const override { return quant_; }

  ImageEmbedding encode(const ImageInput& img, ops::Backend& be, Precision prec) const override {
    return std::move(encode_batch({img}, be, prec).front());
  }

  // The images' patch rows stacked ([images * pps^2, hidden]); attention stays within each image.
  std::vector<ImageEmbedding> encode_batch(const std::vector<ImageInput>& imgs, ops::Backend& be,
                                           Precision prec) const override {
    for (const ImageInput& img : imgs) check_image(img);
    const int64_t m = int64_t(imgs.size());
    const int64_t per = pps_ * pps_;  // patches of one image, row-major
    const int64_t n = m * per;
    const ops::Buf x = be.alloc(n * hidden_);  // [n, hidden]
    {
      const int64_t values = channels_ * (pps_ * patch_) * (pps_ * patch_);  // what check_image checked
      const std::vector<int32_t> index = image_patch_index(channels_, pps_, pps_, patch_);
      const ops::Buf rows = be.alloc(per * pe_.in());  // [per, C*P*P], one image at a time
      for (int64_t i = 0; i < m; ++i) {
        const ops::Buf px = be.upload(imgs[size_t(i)].pixels, values);  // [C, H, W] as rows of P floats
        be.gather_rows(px.data(), patch_, rows.data(), patch_, patch_, index);
        be.linear(pe_.lin, rows.data(), x.data() + i * per * hidden_, per, Precision::Exact);
      }
    }
    ops::Taps pos;  // learned position i for patch i of every image
    for (int64_t i = 0; i < n; ++i) pos.idx.push_back(int32_t(i % per));
    be.add_table_rows(pos_, pos, x.data(), hidden_);

    const ops::Buf hn = be.alloc(n * hidden_);       // [n, hidden]
    const ops::Buf qkv = be.alloc(n * 3 * hidden_);  // [n, (q, k, v), heads, hd]
    const ops::Buf att = be.alloc(n * hidden_);      // [n, hidden]
    const ops::Buf f1 = be.alloc(n * ffn_);          // [n, ffn]
    std::vector<int64_t> cu{0};
    for (int64_t i = 0; i < m; ++i) cu.push_back(cu.back() + per);
    const float scale = 1.0f / std::sqrt(float(hd_));
    const int64_t ld = 3 * hidden_;
    float* q = qkv.data();
    for (const SiglipLayer& l : layers_) {
      be.layer_norm(x.data(), hn.data(), n, l.ln1);
      be.linear(l.q, hn.data(), hidden_, q, ld, n, prec);
      be.linear(l.k, hn.data(), hidden_, q + hidden_, ld, n, prec);
      be.linear(l.v, hn.data(), hidden_, q + 2 * hidden_, ld, n, prec);
      be.attention(q, ld, q + hidden_, q + 2 * hidden_, ld, att.data(), hidden_, int(heads_), int(heads_), int(hd_),
                   scale, cu, prec);
      be.linear_epilogue(l.o, att.data(), x.data(), n, prec, ops::Backend::LinearEpilogue::residual(hn.data()));
      be.layer_norm(x.data(), hn.data(), n, l.ln2);
      plain_mlp(be, l.fc1, l.fc2, hn.data(), f1.data(), x.data(), n, act_, prec);
    }
    be.layer_norm(x.data(), x.data(), n, post_ln_);

    // AvgPool2d(k, k) over each image's pps x pps patch grid -> tps x tps tokens, row-major.
    const int64_t k = pps_ / tps_, tokens = tps_ * tps_;
    ops::Taps avg;
    avg.k = int(k * k);
    avg.div = float(k * k);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t ty = 0; ty < tps_; ++ty)
        for (int64_t tx = 0; tx < tps_; ++tx)
          for (int64_t a = 0; a < k; ++a)
            for (int64_t b = 0; b < k; ++b) avg.idx.push_back(int32_t(i * per + (ty * k + a) * pps_ + tx * k + b));
    const ops::Buf pooled = be.alloc(m * tokens * hidden_);  // [m * tokens, hidden]
    be.pool_rows(x.data(), hidden_, pooled.data(), hidden_, hidden_, avg);
    be.rms_norm(pooled.data(), pooled.data(), m * tokens, soft_norm_);

    const ops::Buf y = be.alloc(m * tokens * out_);  // [m * tokens, text_hidden]
    be.linear(proj_, pooled.data(), y.data(), m * tokens, Precision::Exact);
    std::vector<ImageEmbedding> out(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) {
      ImageEmbedding& e = out[size_t(i)];
      e.tokens = tokens;
      e.embeddings.resize(size_t(tokens * out_));
      be.download(y.data() + i * tokens * out_, tokens * out_, e.embeddings.data());
    }
    return out;
  }

 private:
  void check_image(const ImageInput& img) const {
    const int64_t px = pps_ * patch_;
    if (!img.pixels) throw std::invalid_argument("gemma3 vision: no pixel values given");
    if (img.grid_t != 1 || img.grid_h != pps_ || img.grid_w != pps_)
      throw std::invalid_argument("gemma3 vision: image grid [" + std::to_string(img.grid_t) + ", " +
                                  std::to_string(img.grid_h) + ", " + std::to_string(img.grid_w) + "] must be [1, " +
                                  std::to_string(pps_) + ", " + std::to_string(pps_) + "]: resize the image to " +
                                  std::to_string(px) + "x" + std::to_string(px) + " px");
    if (img.n_values != channels_ * px * px)
      throw std::invalid_argument("gemma3 vision: got " + std::to_string(img.n_values) + " pixel values, expected " +
                                  std::to_string(channels_ * px * px) + " ([" + std::to_string(channels_) + ", " +
                                  std::to_string(px) + ", " + std::to_string(px) + "])");
  }

  std::shared_ptr<const Checkpoint> ckpt_;  // keeps the mapped weights alive
  std::string vprefix_, pprefix_;
  int64_t channels_ = 3, patch_ = 14, image_ = 896, heads_ = 16;
  int64_t pps_ = 0, tps_ = 0, hidden_ = 0, hd_ = 0, ffn_ = 0, out_ = 0;
  VAct act_ = VAct::GeluTanh;
  PatchEmbed pe_;
  Weight pos_;  // [pps*pps, hidden]
  std::vector<SiglipLayer> layers_;
  LayerNormW post_ln_;
  NormWeight soft_norm_;          // Gemma RMSNorm, (1 + w) folded in
  std::vector<float> proj_t_;     // [text_hidden, vision_hidden]
  Linear proj_;                   // Dense F32 view of proj_t_, no bias
  size_t bytes_ = 0;
  std::string quant_;
};

}  // namespace

std::unique_ptr<VisionEncoder> load_gemma3_vision(std::shared_ptr<const Checkpoint> ckpt, const Json& config) {
  return std::make_unique<Gemma3Vision>(std::move(ckpt), config);
}

}  // namespace rapid
