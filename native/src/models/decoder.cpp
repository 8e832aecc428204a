#include "models/decoder.h"
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace rapid {

const Json& text_config(const Json& config) {
  const Json* t = config.find("text_config");
  return (t && t->is_object()) ? *t : config;
}

static int64_t req_int(const Json& c, const char* key, const std::string& arch) {
  const Json* v = c.find(key);
  if (!v || v->is_null())
    throw std::runtime_error(arch + ": config.json is missing \"" + std::string(key) + "\"");
  return v->as_int();
}

DecoderConfig read_common_config(const Json& c, const std::string& arch) {
  DecoderConfig d;
  d.vocab = req_int(c, "vocab_size", arch);
  d.hidden = req_int(c, "hidden_size", arch);
  d.ffn = req_int(c, "intermediate_size", arch);
  d.n_layers = int(req_int(c, "num_hidden_layers", arch));
  d.n_heads = int(req_int(c, "num_attention_heads", arch));
  // Sizes are divided by and allocated from below: refuse non-positive or absurd values first.
  const auto positive = [&](const char* key, int64_t v, int64_t max) {
    if (v <= 0 || v > max)
      throw std::runtime_error(arch + ": config.json " + key + " is " + std::to_string(v) + ", expected 1.." +
                               std::to_string(max));
  };
  positive("vocab_size", d.vocab, int64_t(1) << 22);
  positive("hidden_size", d.hidden, int64_t(1) << 16);
  positive("intermediate_size", d.ffn, int64_t(1) << 20);
  positive("num_hidden_layers", d.n_layers, 1024);
  positive("num_attention_heads", d.n_heads, 1024);
  d.n_kv_heads = int(c.get_int("num_key_value_heads", d.n_heads));
  d.head_dim = int(c.get_int("head_dim", d.hidden / d.n_heads));
  positive("head_dim", d.head_dim, 1024);
  d.max_positions = c.get_int("max_position_embeddings", 0);
  d.rms_eps = float(c.get_double("rms_norm_eps", 1e-6));
  if (d.n_heads <= 0 || d.n_kv_heads <= 0 || d.n_heads % d.n_kv_heads != 0)
    throw std::runtime_error(arch + ": num_attention_heads " + std::to_string(d.n_heads) +
                             " is not a multiple of num_key_value_heads " + std::to_string(d.n_kv_heads));
  d.attn_scale = 1.0f / std::sqrt(float(d.head_dim));
  d.window.assign(size_t(d.n_layers), 0);
  d.rope_of.assign(size_t(d.n_layers), 0);
  const Json* lt = c.find("layer_types");
  if (lt && lt->is_array()) {
    if (int(lt->size()) != d.n_layers)
      throw std::runtime_error(arch + ": layer_types has " + std::to_string(lt->size()) + " entries for " +
                               std::to_string(d.n_layers) + " layers");
    const int64_t w = c.get_int("sliding_window", 0);
    for (int i = 0; i < d.n_layers; ++i) {
      const std::string& t = lt->at(size_t(i)).as_string();
      if (t == "sliding_attention") {
        if (w <= 0) throw std::runtime_error(arch + ": layer " + std::to_string(i) + " is sliding but sliding_window is unset");
        d.window[size_t(i)] = int(w);
      } else if (t != "full_attention") {
        throw std::runtime_error(arch + ": unsupported layer type \"" + t + "\" at layer " + std::to_string(i));
      }
    }
  }
  return d;
}

static bool has_module(const Checkpoint& ckpt, const std::string& path) {
  return ckpt.has(path + ".weight") || ckpt.has(path + ".scales");
}

DecoderNames find_decoder_names(const Checkpoint& ckpt, bool tie_word_embeddings) {
  DecoderNames n;
  bool found = false;
  for (const char* p : {"model", "language_model.model", "model.language_model"})
    if (has_module(ckpt, std::string(p) + ".embed_tokens")) { n.model = p; found = true; break; }
  // A bare decoder saved without its causal-LM wrapper (Qwen3-Embedding's Qwen3Model): no prefix.
  if (!found && has_module(ckpt, "embed_tokens")) found = true;
  if (!found)
    throw std::runtime_error("missing tensor embed_tokens.weight in " + ckpt.dir() +
                             " (tried prefixes model., language_model.model., model.language_model., none)");
  if (!tie_word_embeddings)
    for (const char* h : {"lm_head", "language_model.lm_head"})
      if (has_module(ckpt, h)) { n.head = h; break; }
  return n;
}

namespace {

class DecoderModel final : public Model {
 public:
  DecoderModel(std::shared_ptr<const Checkpoint> ckpt, const QuantConfig& qc, DecoderConfig cfg,
               const DecoderNames& names, ModelInfo info, std::unique_ptr<VisionEncoder> vision)
      : ckpt_(std::move(ckpt)), cfg_(std::move(cfg)), info_(std::move(info)), vision_(std::move(vision)) {
    const Checkpoint& c = *ckpt_;
    const std::string m = names.model.empty() ? "" : names.model + ".";  // key prefix, with its dot
    const DecoderConfig& d = cfg_;
    embed_ = load_embedding(c, qc, m + "embed_tokens");
    if (embed_.out != d.vocab || embed_.in != d.hidden)
      throw std::runtime_error("module " + m + "embed_tokens has shape [" + std::to_string(embed_.out) + ", " +
                               std::to_string(embed_.in) + "], expected [" + std::to_string(d.vocab) + ", " +
                               std::to_string(d.hidden) + "]");
    if (!names.head.empty()) {
      head_ = load_linear(c, qc, names.head, d.vocab, d.hidden, false).w;
    } else {
      head_ = embed_;  // tied: x · Eᵀ, quantized or not
    }
    final_norm_ = load_norm(c, m + "norm", d.hidden, d.rms_eps, d.norm_offset);
    const int64_t qd = int64_t(d.n_heads) * d.head_dim, kd = int64_t(d.n_kv_heads) * d.head_dim;
    layers_.resize(size_t(d.n_layers));
    for (int i = 0; i < d.n_layers; ++i) {
      const std::string p = m + "layers." + std::to_string(i);
      DecoderLayer& L = layers_[size_t(i)];
      L.input_norm = load_norm(c, p + ".input_layernorm", d.hidden, d.rms_eps, d.norm_offset);
      L.post_attn_norm = load_norm(c, p + ".post_attention_layernorm", d.hidden, d.rms_eps, d.norm_offset);
      if (d.sandwich_norms) {
        L.pre_ffn_norm = load_norm(c, p + ".pre_feedforward_layernorm", d.hidden, d.rms_eps, d.norm_offset);
        L.post_ffn_norm = load_norm(c, p + ".post_feedforward_layernorm", d.hidden, d.rms_eps, d.norm_offset);
      }
      L.q = load_linear(c, qc, p + ".self_attn.q_proj", qd, d.hidden, d.qkv_bias);
      L.k = load_linear(c, qc, p + ".self_attn.k_proj", kd, d.hidden, d.qkv_bias);
      L.v = load_linear(c, qc, p + ".self_attn.v_proj", kd, d.hidden, d.qkv_bias);
      L.o = load_linear(c, qc, p + ".self_attn.o_proj", d.hidden, qd, d.o_bias);
      if (d.qk_norm) {
        L.q_norm = load_norm(c, p + ".self_attn.q_norm", d.head_dim, d.rms_eps, d.norm_offset);
        L.k_norm = load_norm(c, p + ".self_attn.k_norm", d.head_dim, d.rms_eps, d.norm_offset);
      }
      L.is_moe = !d.moe_layer.empty() && d.moe_layer[size_t(i)] != 0;
      if (L.is_moe) {
        L.moe.router = load_moe_router(c, qc, p + ".mlp.gate", d.n_experts, d.hidden, d.router);
        L.moe.experts = load_moe_experts(c, qc, p + ".mlp.experts", p + ".mlp.switch_mlp", d.n_experts, d.hidden,
                                         d.moe_ffn, d.act);
        has_moe_ = true;
      } else {
        L.mlp = load_gated_mlp(c, qc, p + ".mlp", d.hidden, d.ffn, d.act);
      }
    }
    info_.vocab_size = d.vocab;
    info_.hidden_size = d.hidden;
    info_.num_layers = d.n_layers;
    info_.context_length = d.max_positions;
    info_.quantization = qc.describe();
    info_.weight_bytes = ckpt_->mapped_bytes();
    info_.deepstack_layers = d.deepstack_layers;
    info_.embedding_only = d.embedding_only;
    info_.mrope_sections = d.mrope_sections;
    info_.pos_axes = d.mrope_sections.empty() ? 1 : 3;
    if (d.deepstack_layers > d.n_layers)
      throw std::runtime_error("config has " + std::to_string(d.deepstack_layers) +
                               " DeepStack layers, the text decoder only " + std::to_string(d.n_layers));
    if (vision_ && vision_->text_hidden() != d.hidden)
      throw std::runtime_error("vision tower projects to width " + std::to_string(vision_->text_hidden()) +
                               ", the text decoder's hidden_size is " + std::to_string(d.hidden));
    if (vision_ && vision_->deepstack_layers() != d.deepstack_layers)
      throw std::runtime_error("vision tower yields " + std::to_string(vision_->deepstack_layers()) +
                               " DeepStack features, the config names " + std::to_string(d.deepstack_layers));
  }

  const ModelInfo& info() const override { return info_; }
  const VisionEncoder* vision() const override { return vision_.get(); }
  const MoeStats* moe_stats() const override { return has_moe_ ? &moe_stats_ : nullptr; }
  const DecoderParts* decoder_parts() const override { return &parts_; }

  std::vector<KvLayerSpec> kv_layers() const override {
    return std::vector<KvLayerSpec>(size_t(cfg_.n_layers), KvLayerSpec{cfg_.n_kv_heads, cfg_.head_dim, -1});
  }

  void forward(const Batch& b, KvPool& kv, ThreadPool& pool, Precision prec, float* logits) override {
    const DecoderConfig& d = cfg_;
    const int64_t T = int64_t(b.tokens.size());
    const int64_t H = d.hidden;
    const int64_t qd = int64_t(d.n_heads) * d.head_dim, kd = int64_t(d.n_kv_heads) * d.head_dim;
    std::vector<float> h(static_cast<size_t>(T * H));     // [T, hidden] residual stream
    std::vector<float> xn(static_cast<size_t>(T * H));    // [T, hidden] normed input of a sub-block
    std::vector<float> q(static_cast<size_t>(T * qd));    // [T, n_heads, hd]
    std::vector<float> k(static_cast<size_t>(T * kd));    // [T, n_kv, hd]
    std::vector<float> v(static_cast<size_t>(T * kd));    // [T, n_kv, hd]
    std::vector<float> att(static_cast<size_t>(T * qd));  // [T, n_heads, hd]
    std::vector<float> o(static_cast<size_t>(T * H));     // [T, hidden] sub-block output
    std::vector<float> scratch;
    moe_stats_ = MoeStats{};

    embedding_rows(embed_, b.tokens.data(), T, h.data());
    if (d.embed_scale != 1.0f)
      for (float& x : h) x *= d.embed_scale;
    // Image features replace their placeholders' (scaled) embeddings; they are not scaled themselves.
    for (const TokenEmbed& e : b.embeds) std::memcpy(h.data() + e.token * H, e.data, size_t(H) * sizeof(float));

    std::vector<RopeTable> rope_tables;  // one per distinct RoPE spec, shared by its layers
    for (const RopeSpec& rs : d.ropes) rope_tables.push_back(rope_table(rs, b.positions.data(), T));
    std::vector<float> q_scale;  // [T] Llama-4 position-dependent query scale (f32 as transformers computes it)
    if (d.q_pos_beta != 0.0f)
      for (int64_t t = 0; t < T; ++t)
        q_scale.push_back(1.0f + d.q_pos_beta * std::log(1.0f + std::floor(float(b.positions[size_t(t)]) /
                                                                           float(d.q_pos_period))));

    for (int l = 0; l < d.n_layers; ++l) {
      const DecoderLayer& L = layers_[size_t(l)];
      AttnShape shape{d.n_heads, d.n_kv_heads, d.head_dim, d.attn_scale, d.window[size_t(l)]};
      rms_norm_rows(pool, h.data(), xn.data(), T, L.input_norm);
      linear_parts(pool, {{&L.q, q.data()}, {&L.k, k.data()}, {&L.v, v.data()}}, xn.data(), T, prec);
      if (d.qk_norm) {
        rms_norm_rows(pool, q.data(), q.data(), T * d.n_heads, L.q_norm);
        rms_norm_rows(pool, k.data(), k.data(), T * d.n_kv_heads, L.k_norm);
      }
      const RopeTable& rope = rope_tables[size_t(d.rope_of[size_t(l)])];
      apply_rope(q.data(), T, d.n_heads, rope);
      for (size_t t = 0; t < q_scale.size(); ++t)
        for (int64_t i = 0; i < qd; ++i) q[t * size_t(qd) + size_t(i)] *= q_scale[t];
      apply_rope(k.data(), T, d.n_kv_heads, rope);
      write_kv(kv, l, k.data(), v.data(), b.spans);
      paged_attention(pool, kv, l, q.data(), att.data(), b.spans, shape);
      linear(pool, L.o, att.data(), o.data(), T, prec);
      if (d.sandwich_norms) rms_norm_rows(pool, o.data(), o.data(), T, L.post_attn_norm);
      for (int64_t i = 0; i < T * H; ++i) h[size_t(i)] += o[size_t(i)];

      rms_norm_rows(pool, h.data(), xn.data(), T, d.sandwich_norms ? L.pre_ffn_norm : L.post_attn_norm);
      if (L.is_moe)
        moe_block_forward(pool, L.moe, xn.data(), T, o.data(), prec, moe_scratch_, &moe_stats_);
      else
        gated_mlp(pool, L.mlp, xn.data(), o.data(), T, prec, scratch);
      if (d.sandwich_norms) rms_norm_rows(pool, o.data(), o.data(), T, L.post_ffn_norm);
      for (int64_t i = 0; i < T * H; ++i) h[size_t(i)] += o[size_t(i)];
      // Qwen3-VL DeepStack: the vision tower's layer-l features join the residual after decoder layer l.
      if (l < info_.deepstack_layers)
        for (const TokenEmbed& e : b.embeds) {
          float* hr = h.data() + e.token * H;                // [hidden]
          const float* ds = e.deepstack + l * e.ds_stride;   // [hidden]
          for (int64_t i = 0; i < H; ++i) hr[i] += ds[i];
        }
    }

    head_logits(pool, h, H, b.logit_rows, final_norm_, head_, d.vocab, d.final_softcap, logits, prec);
    final_hidden(pool, h, H, b.hidden_rows, final_norm_, b.hidden);
  }

 private:
  std::shared_ptr<const Checkpoint> ckpt_;  // owns the mappings every Weight points into (shared with vision_)
  DecoderConfig cfg_;
  ModelInfo info_;
  std::unique_ptr<VisionEncoder> vision_;  // null for text-only checkpoints
  Weight embed_;   // [vocab, hidden]
  Weight head_;    // [vocab, hidden]
  NormWeight final_norm_;
  std::vector<DecoderLayer> layers_;
  DecoderParts parts_{&cfg_, &embed_, &head_, &final_norm_, &layers_};
  bool has_moe_ = false;
  MoeScratch moe_scratch_;  // reused across layers and steps; holds no meaning between calls
  MoeStats moe_stats_;      // expert work of the last forward
};

}  // namespace

std::unique_ptr<Model> make_decoder(std::shared_ptr<const Checkpoint> ckpt, const QuantConfig& qc, DecoderConfig cfg,
                                    const DecoderNames& names, ModelInfo info, std::unique_ptr<VisionEncoder> vision) {
  return std::make_unique<DecoderModel>(std::move(ckpt), qc, std::move(cfg), names, std::move(info), std::move(vision));
}

bool has_vision_tower(const Checkpoint& ckpt) {
  for (const TensorView& t : ckpt.tensors())
    for (const char* p : {"vision_tower.", "model.vision_tower.", "visual.", "model.visual."})
      if (t.name.rfind(p, 0) == 0) return true;
  return false;
}

std::unique_ptr<Model> finish_decoder(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const Json& text,
                                      DecoderConfig d, const std::string& arch, const char* family, bool tie_default,
                                      const char* vision_family) {
  const bool tie = config.get_bool("tie_word_embeddings", text.get_bool("tie_word_embeddings", tie_default));
  const DecoderNames names = find_decoder_names(*ckpt, tie);
  // A bare decoder (no "model." wrapper) is an embedding model whatever its config names: Qwen3-Embedding
  // ships Qwen3Model's weights under a Qwen3ForCausalLM config.
  if (names.model.empty()) d.embedding_only = true;
  const QuantConfig qc = QuantConfig::from_config(config);
  ModelInfo info;
  info.architecture = arch;
  info.family = family;
  // A VLM architecture whose files hold only the text weights (a text-only export) loads as text.
  std::unique_ptr<VisionEncoder> vision;
  if (vision_family && has_vision_tower(*ckpt)) {
    info.accepts_embeds = true;
    vision = load_vision_encoder(ckpt, config, vision_family);
  }
  return make_decoder(std::move(ckpt), qc, std::move(d), names, std::move(info), std::move(vision));
}

void final_hidden(ThreadPool& pool, const std::vector<float>& h, int64_t hidden, const std::vector<int64_t>& rows,
                  const NormWeight& final_norm, float* out) {
  const int64_t m = int64_t(rows.size());
  if (m == 0) return;
  for (int64_t i = 0; i < m; ++i)
    std::memcpy(out + i * hidden, h.data() + rows[size_t(i)] * hidden, size_t(hidden) * sizeof(float));
  rms_norm_rows(pool, out, out, m, final_norm);
}

void head_logits(ThreadPool& pool, const std::vector<float>& h, int64_t hidden, const std::vector<int64_t>& rows,
                 const NormWeight& final_norm, const Weight& head, int64_t vocab, float softcap, float* logits,
                 Precision prec) {
  // Only the requested rows go through the final norm and the (large) head.
  const int64_t m = int64_t(rows.size());
  if (m == 0) return;
  std::vector<float> sel(static_cast<size_t>(m * hidden));  // [m, hidden]
  final_hidden(pool, h, hidden, rows, final_norm, sel.data());
  matmul(pool, head, sel.data(), logits, m, prec);
  if (softcap > 0)
    for (int64_t i = 0; i < m * vocab; ++i) logits[i] = softcap * std::tanh(logits[i] / softcap);
}

void apply_max_window_layers(const Json& c, DecoderConfig& d) {
  if (c.find("layer_types") || !c.get_bool("use_sliding_window", false)) return;
  const int64_t w = c.get_int("sliding_window", 0);
  for (int i = int(c.get_int("max_window_layers", d.n_layers)); i < d.n_layers; ++i) d.window[size_t(i)] = int(w);
}

}  // namespace rapid
