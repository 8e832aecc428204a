// Gemma 4 text decoder (Gemma4ForConditionalGeneration's language model and Gemma4ForCausalLM): its own
// forward because almost every block differs from decoder.cpp — RMSNorm without the +1 offset (v_norm
// without a scale), attention scale 1, sliding layers (head_dim, theta 1e4) next to full layers with
// their own head_dim / KV heads and proportional RoPE, K-eq-V full layers, KV sharing (the last
// num_kv_shared_layers layers own no cache and read the last non-shared layer of their type), the
// double-wide MLP on shared layers, per-layer embeddings (PLE), layer_scalar, the MoE block beside the
// dense MLP (26B-A4B), final logit softcapping, and image blocks attending both ways on sliding layers only.
// The forward is written once over ops::Backend: the CPU backend here, the CUDA one in cuda/cuda_ops_model.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include "backend/ops.h"
#include "cpu/cpu_ops.h"
#include "models/decoder.h"
#include "models/families.h"
#include "models/ops_model.h"

namespace rapid {

namespace {

// transformers writes config.json as a diff against the class defaults: Gemma4TextConfig's defaults.
Json with_gemma4_defaults(const Json& text) {
  Json c = Json::parse(R"({"vocab_size": 262144, "hidden_size": 2304, "intermediate_size": 9216,
    "num_hidden_layers": 30, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
    "sliding_window": 512, "vocab_size_per_layer_input": 262144, "hidden_size_per_layer_input": 256,
    "attention_k_eq_v": false, "num_kv_shared_layers": 0, "enable_moe_block": false,
    "use_double_wide_mlp": false, "global_head_dim": 512, "pad_token_id": 0})");
  for (const auto& [k, v] : text.items()) c.set(k, v);
  return c;
}

int64_t opt_int(const Json& c, const char* key, int64_t dflt) {
  const Json* v = c.find(key);
  return (v && !v->is_null()) ? v->as_int() : dflt;
}

struct G4Config {
  int64_t vocab = 0, hidden = 0, ffn = 0;
  int n_layers = 0, n_heads = 0;
  float eps = 1e-6f;
  float embed_scale = 1.0f, ple_embed_scale = 1.0f;  // sqrt(H), sqrt(P), rounded to the weight dtype
  float softcap = 0;
  int64_t ple = 0, ple_vocab = 0;  // hidden_size_per_layer_input (0 = no PLE)
  int32_t pad_id = 0;
  bool bidir_vision = false;  // use_bidirectional_attention == "vision"
  bool moe = false;
  int64_t n_experts = 0, moe_ffn = 0;
  int top_k = 0;
  Activation act = Activation::GeluTanh;
  // Per layer:
  std::vector<int> head_dim, kv_heads, window;  // window 0 = full attention
  std::vector<int> owner;                        // -1: owns its cache; else the layer whose K/V it reads
  std::vector<uint8_t> k_eq_v;                   // full layers of K-eq-V models: v = raw k projection
  std::vector<int64_t> ffn_of;                   // dense FFN width (2x on shared layers with use_double_wide_mlp)
  std::vector<int> rope_of;                      // 0 sliding, 1 full
  RopeSpec rope_sliding, rope_full;
};

G4Config read_config(const Json& config, const Json& c, const std::string& arch) {
  G4Config g;
  const DecoderConfig d = read_common_config(c, arch);  // sizes, eps, layer_types windows
  g.vocab = d.vocab;
  g.hidden = d.hidden;
  g.ffn = d.ffn;
  g.n_layers = d.n_layers;
  g.n_heads = d.n_heads;
  g.eps = d.rms_eps;
  g.act = parse_activation(c.get_string("hidden_activation", c.get_string("hidden_act", "gelu_pytorch_tanh")), arch);
  const Json* cap = c.find("final_logit_softcapping");
  if (cap && !cap->is_null()) g.softcap = float(cap->as_double());
  g.ple = opt_int(c, "hidden_size_per_layer_input", 0);
  g.ple_vocab = opt_int(c, "vocab_size_per_layer_input", g.vocab);
  g.pad_id = int32_t(opt_int(c, "pad_token_id", 0));
  const Json* bd = c.find("use_bidirectional_attention");
  if (bd && bd->is_string()) {
    if (bd->as_string() == "vision") g.bidir_vision = true;
    else throw std::runtime_error(arch + ": use_bidirectional_attention \"" + bd->as_string() + "\" is not supported");
  }
  g.moe = c.get_bool("enable_moe_block", false);
  if (g.moe) {
    g.n_experts = opt_int(c, "num_experts", 0);
    g.top_k = int(opt_int(c, "top_k_experts", 0));
    g.moe_ffn = opt_int(c, "moe_intermediate_size", 0);
    if (g.n_experts <= 0 || g.top_k <= 0 || g.top_k > g.n_experts || g.moe_ffn <= 0)
      throw std::runtime_error(arch + ": enable_moe_block needs num_experts, top_k_experts <= num_experts and "
                                      "moe_intermediate_size");
  }

  // Layer types: read_common_config filled the windows when layer_types exists; else the 5:1 default
  // pattern, and transformers forces the last layer to full attention either way.
  const int L = g.n_layers;
  std::vector<int> window = d.window;
  if (!c.find("layer_types"))
    for (int i = 0; i < L; ++i) window[size_t(i)] = (i + 1) % 6 ? int(c.get_int("sliding_window", 512)) : 0;
  window[size_t(L - 1)] = 0;
  g.window = window;

  // Full layers: head_dim = global_head_dim and, for K-eq-V models, num_global_key_value_heads. transformers
  // 5.18 writes the resolved values as per_layer_config {"<idx>": {head_dim, num_key_value_heads}} instead.
  const bool k_eq_v = c.get_bool("attention_k_eq_v", false);
  const int global_hd = int(opt_int(c, "global_head_dim", 512));
  const int global_kv = int(opt_int(c, "num_global_key_value_heads", d.n_kv_heads));
  const Json* plc = c.find("per_layer_config");
  g.head_dim.assign(size_t(L), d.head_dim);
  g.kv_heads.assign(size_t(L), d.n_kv_heads);
  g.k_eq_v.assign(size_t(L), 0);
  g.rope_of.assign(size_t(L), 0);
  for (int i = 0; i < L; ++i) {
    if (window[size_t(i)] > 0) continue;
    g.rope_of[size_t(i)] = 1;
    g.k_eq_v[size_t(i)] = k_eq_v;
    if (plc && plc->is_object()) {
      const Json* e = plc->find(std::to_string(i));
      if (e && e->is_object()) {
        g.head_dim[size_t(i)] = int(opt_int(*e, "head_dim", d.head_dim));
        g.kv_heads[size_t(i)] = int(opt_int(*e, "num_key_value_heads", d.n_kv_heads));
      }
    } else {
      g.head_dim[size_t(i)] = global_hd;
      if (k_eq_v) g.kv_heads[size_t(i)] = global_kv;
    }
    if (g.kv_heads[size_t(i)] <= 0 || g.n_heads % g.kv_heads[size_t(i)] != 0)
      throw std::runtime_error(arch + ": layer " + std::to_string(i) + " has " + std::to_string(g.kv_heads[size_t(i)]) +
                               " KV heads for " + std::to_string(g.n_heads) + " query heads");
  }

  // KV sharing: layers from L - kv_shared on read the last earlier layer of the same type.
  const int kv_shared = int(opt_int(c, "num_kv_shared_layers", 0));
  if (kv_shared < 0 || kv_shared >= L) throw std::runtime_error(arch + ": num_kv_shared_layers out of range");
  const int first_shared = L - kv_shared;
  const bool double_wide = c.get_bool("use_double_wide_mlp", false);
  g.owner.assign(size_t(L), -1);
  g.ffn_of.assign(size_t(L), g.ffn);
  for (int i = first_shared; i < L; ++i) {
    const bool sliding = window[size_t(i)] > 0;
    for (int j = first_shared - 1; j >= 0; --j)
      if ((window[size_t(j)] > 0) == sliding) { g.owner[size_t(i)] = j; break; }
    if (g.owner[size_t(i)] < 0)
      throw std::runtime_error(arch + ": KV-shared layer " + std::to_string(i) + " has no earlier " +
                               (sliding ? "sliding" : "full") + " layer to read");
    const int o = g.owner[size_t(i)];
    if (g.head_dim[size_t(o)] != g.head_dim[size_t(i)] || g.kv_heads[size_t(o)] != g.kv_heads[size_t(i)])
      throw std::runtime_error(arch + ": KV-shared layer " + std::to_string(i) + " and its source layer " +
                               std::to_string(o) + " differ in KV shape");
    if (double_wide) g.ffn_of[size_t(i)] = 2 * g.ffn;
  }

  // RoPE: sliding "default" (theta 1e4) over the whole head; full "proportional": the first
  // partial_rotary_factor·hd/2 frequencies theta^(-2j/hd), the rest 0 (identity pairs).
  const Json* rp = c.find("rope_parameters");
  const Json* rs = (rp && rp->is_object()) ? rp->find("sliding_attention") : nullptr;
  const Json* rf = (rp && rp->is_object()) ? rp->find("full_attention") : nullptr;
  const int shd = d.head_dim;
  g.rope_sliding = rope_default(shd, shd, rs ? rs->get_double("rope_theta", 1e4) : 1e4, 1.0);
  int fhd = global_hd;
  for (int i = 0; i < L; ++i)
    if (window[size_t(i)] == 0) fhd = g.head_dim[size_t(i)];
  const std::string ftype = rf ? rf->get_string("rope_type", "proportional") : "proportional";
  const double ftheta = rf ? rf->get_double("rope_theta", 1e6) : 1e6;
  if (ftype == "proportional") {
    const double partial = rf ? rf->get_double("partial_rotary_factor", 1.0) : 0.25;
    const double factor = rf ? rf->get_double("factor", 1.0) : 1.0;
    RopeSpec s;
    s.head_dim = s.rot_dim = fhd;
    s.type = "proportional";
    s.inv_freq.assign(size_t(fhd / 2), 0.0f);
    const int angles = int(partial * double(fhd) / 2.0);
    for (int j = 0; j < angles && j < fhd / 2; ++j)
      s.inv_freq[size_t(j)] = float(1.0 / std::pow(ftheta, double(float(2 * j) / float(fhd)))) / float(factor);
    g.rope_full = s;
  } else {
    g.rope_full = rope_from_params(rf, fhd, ftheta, arch);
  }

  // transformers multiplies by the embedding scale cast to the weight dtype (bf16 checkpoints see it rounded).
  const std::string dtype = c.get_string("dtype", c.get_string("torch_dtype",
                                          config.get_string("dtype", config.get_string("torch_dtype", "float32"))));
  auto round_dtype = [&](float x) {
    if (dtype == "bfloat16") return bf16_to_f32(f32_to_bf16(x));
    if (dtype == "float16") return f16_to_f32(f32_to_f16(x));
    return x;
  };
  g.embed_scale = round_dtype(std::sqrt(float(g.hidden)));
  g.ple_embed_scale = round_dtype(std::sqrt(float(g.ple)));
  return g;
}

NormWeight unit_norm(int64_t dim, float eps) {
  NormWeight n;
  n.w.assign(size_t(dim), 1.0f);
  n.eps = eps;
  return n;
}

struct G4Layer {
  NormWeight input_norm, post_attn_norm, pre_ffn_norm, post_ffn_norm;  // [hidden]
  NormWeight q_norm, k_norm, v_norm;                                   // [head_dim]; v_norm has no scale
  Linear q, k, v, o;  // q [heads*hd, H]; k/v [kv*hd, H] (absent on KV-shared layers; v absent when K-eq-V)
  GatedMlp mlp;
  // MoE (26B-A4B): router on the residual, experts on pre_feedforward_layernorm_2(residual).
  MoeRouter router;
  MoeExperts experts;
  NormWeight post_ffn_norm_1, post_ffn_norm_2, pre_ffn_norm_2;
  // PLE
  Linear ple_gate, ple_proj;  // gate [P, H], proj [H, P]
  NormWeight post_ple_norm;   // [hidden]
  float layer_scalar = 1.0f;
};

class Gemma4Model final : public Model, public OpsModel {
 public:
  Gemma4Model(std::shared_ptr<const Checkpoint> ckpt, const QuantConfig& qc, G4Config cfg, const std::string& m,
              ModelInfo info, std::unique_ptr<VisionEncoder> vision)
      : ckpt_(std::move(ckpt)), g_(std::move(cfg)), info_(std::move(info)), vision_(std::move(vision)) {
    const Checkpoint& c = *ckpt_;
    const G4Config& g = g_;
    const int64_t H = g.hidden;
    embed_ = load_embedding(c, qc, m + ".embed_tokens");
    if (embed_.out != g.vocab || embed_.in != H)
      throw std::runtime_error("module " + m + ".embed_tokens has shape [" + std::to_string(embed_.out) + ", " +
                               std::to_string(embed_.in) + "], expected [" + std::to_string(g.vocab) + ", " +
                               std::to_string(H) + "]");
    head_.w = embed_;
    final_norm_ = load_norm(c, m + ".norm", H, g.eps, false);
    if (g.ple > 0) {
      const int64_t LP = int64_t(g.n_layers) * g.ple;
      ple_embed_ = load_embedding(c, qc, m + ".embed_tokens_per_layer");
      if (ple_embed_.out != g.ple_vocab || ple_embed_.in != LP)
        throw std::runtime_error("module " + m + ".embed_tokens_per_layer has shape [" +
                                 std::to_string(ple_embed_.out) + ", " + std::to_string(ple_embed_.in) +
                                 "], expected [" + std::to_string(g.ple_vocab) + ", " + std::to_string(LP) + "]");
      ple_model_proj_ = load_linear(c, qc, m + ".per_layer_model_projection", LP, H, false);
      ple_proj_norm_ = load_norm(c, m + ".per_layer_projection_norm", g.ple, g.eps, false);
    }
    layers_.resize(size_t(g.n_layers));
    for (int i = 0; i < g.n_layers; ++i) {
      const std::string p = m + ".layers." + std::to_string(i);
      G4Layer& L = layers_[size_t(i)];
      const int hd = g.head_dim[size_t(i)], kv = g.kv_heads[size_t(i)];
      const int64_t qd = int64_t(g.n_heads) * hd, kd = int64_t(kv) * hd;
      L.input_norm = load_norm(c, p + ".input_layernorm", H, g.eps, false);
      L.post_attn_norm = load_norm(c, p + ".post_attention_layernorm", H, g.eps, false);
      L.pre_ffn_norm = load_norm(c, p + ".pre_feedforward_layernorm", H, g.eps, false);
      L.post_ffn_norm = load_norm(c, p + ".post_feedforward_layernorm", H, g.eps, false);
      L.q = load_linear(c, qc, p + ".self_attn.q_proj", qd, H, false);
      L.q_norm = load_norm(c, p + ".self_attn.q_norm", hd, g.eps, false);
      L.o = load_linear(c, qc, p + ".self_attn.o_proj", H, qd, false);
      if (g.owner[size_t(i)] < 0) {  // KV-shared layers have no k/v projections or norms (ignored if present)
        L.k = load_linear(c, qc, p + ".self_attn.k_proj", kd, H, false);
        if (!g.k_eq_v[size_t(i)]) L.v = load_linear(c, qc, p + ".self_attn.v_proj", kd, H, false);
        L.k_norm = load_norm(c, p + ".self_attn.k_norm", hd, g.eps, false);
        L.v_norm = unit_norm(hd, g.eps);
      }
      L.mlp = load_gated_mlp(c, qc, p + ".mlp", H, g.ffn_of[size_t(i)], g.act);
      if (g.moe) {
        RouterOptions opt;
        opt.top_k = g.top_k;
        opt.renormalize = true;
        opt.input_rmsnorm = true;
        opt.input_eps = g.eps;
        opt.input_scale = load_vector_f32(c, p + ".router.scale", H);
        opt.input_mult = 1.0f / std::sqrt(float(H));
        opt.per_expert_scale = load_vector_f32(c, p + ".router.per_expert_scale", g.n_experts);
        L.router = load_moe_router(c, qc, p + ".router.proj", g.n_experts, H, opt);
        L.experts = load_moe_experts(c, qc, p + ".experts", p + ".experts.switch_glu", g.n_experts, H, g.moe_ffn,
                                     g.act);
        L.post_ffn_norm_1 = load_norm(c, p + ".post_feedforward_layernorm_1", H, g.eps, false);
        L.post_ffn_norm_2 = load_norm(c, p + ".post_feedforward_layernorm_2", H, g.eps, false);
        L.pre_ffn_norm_2 = load_norm(c, p + ".pre_feedforward_layernorm_2", H, g.eps, false);
      }
      if (g.ple > 0) {
        L.ple_gate = load_linear(c, qc, p + ".per_layer_input_gate", g.ple, H, false);
        L.ple_proj = load_linear(c, qc, p + ".per_layer_projection", H, g.ple, false);
        L.post_ple_norm = load_norm(c, p + ".post_per_layer_input_norm", H, g.eps, false);
      }
      if (c.has(p + ".layer_scalar")) L.layer_scalar = load_vector_f32(c, p + ".layer_scalar", 1)[0];
    }
    info_.vocab_size = g.vocab;
    info_.hidden_size = H;
    info_.num_layers = g.n_layers;
    info_.quantization = qc.describe();
    info_.weight_bytes = ckpt_->mapped_bytes();
    if (vision_ && vision_->text_hidden() != H)
      throw std::runtime_error("vision tower projects to width " + std::to_string(vision_->text_hidden()) +
                               ", the text decoder's hidden_size is " + std::to_string(H));
  }

  const ModelInfo& info() const override { return info_; }
  const VisionEncoder* vision() const override { return vision_.get(); }
  const MoeStats* moe_stats() const override { return g_.moe ? &moe_stats_ : nullptr; }

  std::vector<KvLayerSpec> kv_layers() const override {
    std::vector<KvLayerSpec> out;
    for (int i = 0; i < g_.n_layers; ++i)
      out.push_back(KvLayerSpec{g_.kv_heads[size_t(i)], g_.head_dim[size_t(i)], g_.owner[size_t(i)]});
    return out;
  }

  OpsModel* ops_model() override { return this; }
  const OpsModel* ops_model() const override { return this; }
  bool uses_moe() const override { return g_.moe; }
  std::vector<MoeBlockRef> moe_blocks() const override {
    std::vector<MoeBlockRef> out;
    if (g_.moe)
      for (const G4Layer& L : layers_) out.push_back(MoeBlockRef{&L.router, &L.experts});
    return out;
  }

  void forward(const Batch& b, KvPool& kv, ThreadPool& pool, Precision prec, float* logits) override {
    ops::CpuBackend cpu(pool);
    forward_ops(cpu, b, kv, prec, logits);
  }

  void forward_ops(ops::Backend& be, const Batch& b, KvPool& kv, Precision prec, float* logits) override {
    const G4Config& g = g_;
    const int64_t T = int64_t(b.tokens.size());
    const int64_t H = g.hidden;
    if (T == 0) return;
    int max_hd = 0, max_kv = 0;
    int64_t max_ffn = 0;
    for (int i = 0; i < g.n_layers; ++i) {
      max_hd = std::max(max_hd, g.head_dim[size_t(i)]);
      max_kv = std::max(max_kv, g.kv_heads[size_t(i)]);
      max_ffn = std::max(max_ffn, g.ffn_of[size_t(i)]);
    }
    const int64_t qd_max = int64_t(g.n_heads) * max_hd, kd_max = int64_t(max_kv) * max_hd;
    ops::Buf h = be.alloc(T * H);         // [T, hidden] residual stream
    ops::Buf xn = be.alloc(T * H);        // [T, hidden] normed input of a sub-block
    ops::Buf q = be.alloc(T * qd_max);    // [T, n_heads, hd]
    ops::Buf k = be.alloc(T * kd_max);    // [T, n_kv, hd]
    ops::Buf v = be.alloc(T * kd_max);    // [T, n_kv, hd]
    ops::Buf att = be.alloc(T * qd_max);  // [T, n_heads, hd]
    ops::Buf o = be.alloc(T * H);         // [T, hidden] sub-block output
    ops::Buf gate = be.alloc(T * max_ffn), up = be.alloc(T * max_ffn);  // [T, ffn] each
    moe_stats_ = MoeStats{};
    std::vector<int32_t> rows(static_cast<size_t>(T));  // [T] 0..T-1: row copies
    for (int64_t t = 0; t < T; ++t) rows[size_t(t)] = int32_t(t);

    // Embeddings × sqrt(H); image features replace their placeholders and are not scaled. Multimodal
    // positions look up the pad id (transformers replaces them before embedding).
    std::vector<int32_t> ids(b.tokens);  // [T]
    for (const TokenEmbed& e : b.embeds) ids[size_t(e.token)] = g.pad_id;
    be.embed_rows(embed_, ids, g.embed_scale, h.data(), H);
    if (!b.embeds.empty()) {
      std::vector<float> feats(b.embeds.size() * size_t(H));  // [n_embeds, hidden]
      std::vector<int32_t> at(b.embeds.size());
      for (size_t i = 0; i < b.embeds.size(); ++i) {
        std::memcpy(feats.data() + i * size_t(H), b.embeds[i].data, size_t(H) * sizeof(float));
        at[i] = int32_t(b.embeds[i].token);
      }
      const ops::Buf f = be.upload(feats.data(), int64_t(feats.size()));
      be.scatter_rows(f.data(), H, h.data(), H, H, at);
    }

    // PLE: ple[l, t, :] = (norm(proj(E_merged) · H^-0.5) + embed_per_layer(id) · sqrt(P)) · 2^-0.5.
    const int64_t P = g.ple, LP = int64_t(g.n_layers) * P;
    ops::Buf ple, pg;  // [n_layers, T, P] (layer-major: each layer's rows contiguous); [T, P] PLE gate
    if (P > 0) {
      const ops::Buf tok = be.alloc(T * LP);  // [T, n_layers * P]
      be.embed_rows(ple_embed_, ids, g.ple_embed_scale, tok.data(), LP);
      ple = be.alloc(T * LP);
      be.linear(ple_model_proj_, h.data(), ple.data(), T, prec);
      be.scale_shift(ple.data(), T * LP, 0.0f, 1.0f / std::sqrt(float(H)));
      be.rms_norm(ple.data(), ple.data(), T * g.n_layers, ple_proj_norm_);
      be.add(ple.data(), tok.data(), T * LP);
      be.scale_shift(ple.data(), T * LP, 0.0f, 1.0f / std::sqrt(2.0f));
      // One gather to layer-major order, not one per layer: a device backend uploads each index list.
      std::vector<int32_t> by_layer(static_cast<size_t>(T * g.n_layers));  // [n_layers, T] rows of [T * n_layers, P]
      for (int l = 0; l < g.n_layers; ++l)
        for (int64_t t = 0; t < T; ++t) by_layer[size_t(l * T + t)] = int32_t(t * g.n_layers + l);
      ops::Buf lt = be.alloc(T * LP);
      be.gather_rows(ple.data(), P, lt.data(), P, P, by_layer);
      ple = std::move(lt);
      pg = be.alloc(T * P);
    }

    const RopeTable rope_s = rope_table(g.rope_sliding, b.positions.data(), T);
    const RopeTable rope_f = rope_table(g.rope_full, b.positions.data(), T);
    const ops::Buf cos_s = be.upload(rope_s.cos.data(), T * rope_s.half), sin_s = be.upload(rope_s.sin.data(), T * rope_s.half);
    const ops::Buf cos_f = be.upload(rope_f.cos.data(), T * rope_f.half), sin_f = be.upload(rope_f.sin.data(), T * rope_f.half);
    // Image blocks attend both ways on sliding layers only (transformers 5.18); full layers stay causal.
    std::vector<SeqSpan> causal_spans(b.spans);
    for (SeqSpan& s : causal_spans) { s.bidir = nullptr; s.n_bidir = 0; }
    const std::vector<SeqSpan>& sliding_spans = g.bidir_vision ? b.spans : causal_spans;
    ops::Buf m1, e_in, e_out;  // MoE: [T, hidden] each
    if (g.moe) m1 = be.alloc(T * H), e_in = be.alloc(T * H), e_out = be.alloc(T * H);
    const ops::VAct act = g.act == Activation::Silu ? ops::VAct::Silu : ops::VAct::GeluTanh;

    for (int l = 0; l < g.n_layers; ++l) {
      const G4Layer& L = layers_[size_t(l)];
      const int hd = g.head_dim[size_t(l)], nkv = g.kv_heads[size_t(l)];
      const int64_t qd = int64_t(g.n_heads) * hd, kd = int64_t(nkv) * hd;
      const bool sliding = g.window[size_t(l)] > 0;
      const RopeTable& rope = sliding ? rope_s : rope_f;
      const float* cs = sliding ? cos_s.data() : cos_f.data();
      const float* sn = sliding ? sin_s.data() : sin_f.data();

      be.rms_norm(h.data(), xn.data(), T, L.input_norm);
      be.linear(L.q, xn.data(), q.data(), T, prec);
      be.rms_norm_heads(q.data(), qd, T, g.n_heads, hd, L.q_norm);
      be.rope(q.data(), qd, T, g.n_heads, hd, rope.half, cs, sn);
      if (g.owner[size_t(l)] < 0) {
        be.linear(L.k, xn.data(), k.data(), T, prec);
        // K-eq-V: v is the raw k projection (before k_norm and RoPE).
        if (g.k_eq_v[size_t(l)]) be.gather_rows(k.data(), kd, v.data(), kd, kd, rows);
        else be.linear(L.v, xn.data(), v.data(), T, prec);
        be.rms_norm_heads(k.data(), kd, T, nkv, hd, L.k_norm);
        be.rope(k.data(), kd, T, nkv, hd, rope.half, cs, sn);
        be.rms_norm_heads(v.data(), kd, T, nkv, hd, L.v_norm);
        be.write_kv(kv, l, k.data(), v.data(), b.spans);
      }
      // KV-shared layers read their source layer's cache (the pool resolves cache_of).
      const AttnShape shape{g.n_heads, nkv, hd, 1.0f, g.window[size_t(l)]};
      be.paged_attention(kv, l, q.data(), att.data(), sliding ? sliding_spans : causal_spans, shape);
      be.linear(L.o, att.data(), o.data(), T, prec);
      be.rms_norm(o.data(), o.data(), T, L.post_attn_norm);
      be.add(h.data(), o.data(), T * H);

      be.rms_norm(h.data(), xn.data(), T, L.pre_ffn_norm);
      be.gated_mlp(L.mlp.gate, L.mlp.up, L.mlp.down, xn.data(), o.data(), gate.data(), up.data(), T, act, prec);
      if (g.moe) {
        // o = post_ffn_norm_1(mlp) + post_ffn_norm_2(experts(pre_ffn_norm_2(r), router(r))), r = h.
        be.rms_norm(o.data(), m1.data(), T, L.post_ffn_norm_1);
        be.rms_norm(h.data(), e_in.data(), T, L.pre_ffn_norm_2);
        be.moe(L.router, L.experts, h.data(), e_in.data(), e_out.data(), T, g.top_k, prec, &moe_stats_);
        be.rms_norm(e_out.data(), e_out.data(), T, L.post_ffn_norm_2);
        be.add(m1.data(), e_out.data(), T * H);
        be.rms_norm(m1.data(), o.data(), T, L.post_ffn_norm);
      } else {
        be.rms_norm(o.data(), o.data(), T, L.post_ffn_norm);
      }
      be.add(h.data(), o.data(), T * H);

      if (P > 0) {
        // h += post_ple_norm(proj(gelu_tanh(gate(h)) · ple[:, l]))
        be.linear(L.ple_gate, h.data(), pg.data(), T, prec);
        be.act_mul(pg.data(), ple.data() + int64_t(l) * T * P, T, P, ops::VAct::GeluTanh);
        be.linear(L.ple_proj, pg.data(), o.data(), T, prec);
        be.rms_norm(o.data(), o.data(), T, L.post_ple_norm);
        be.add(h.data(), o.data(), T * H);
      }
      if (L.layer_scalar != 1.0f) be.scale_shift(h.data(), T * H, 0.0f, L.layer_scalar);
    }

    // Tied head on the requested rows only, after the final norm; pooled rows take the normed hidden state.
    auto final_rows = [&](const std::vector<int64_t>& want) {
      std::vector<int32_t> sel(want.begin(), want.end());
      ops::Buf x = be.alloc(int64_t(sel.size()) * H);  // [m, hidden]
      be.gather_rows(h.data(), H, x.data(), H, H, sel);
      be.rms_norm(x.data(), x.data(), int64_t(sel.size()), final_norm_);
      return x;
    };
    const int64_t m = int64_t(b.logit_rows.size());
    if (m > 0 && logits) {
      const ops::Buf x = final_rows(b.logit_rows);
      const ops::Buf lg = be.alloc(m * g.vocab);  // [m, vocab]
      be.linear(head_, x.data(), lg.data(), m, prec);
      if (g.softcap > 0) be.softcap(lg.data(), m * g.vocab, g.softcap);
      be.download(lg.data(), m * g.vocab, logits);
    }
    if (!b.hidden_rows.empty() && b.hidden) {
      const ops::Buf x = final_rows(b.hidden_rows);
      be.download(x.data(), int64_t(b.hidden_rows.size()) * H, b.hidden);
    }
  }

 private:
  std::shared_ptr<const Checkpoint> ckpt_;  // owns the mappings every Weight points into (shared with vision_)
  G4Config g_;
  ModelInfo info_;
  std::unique_ptr<VisionEncoder> vision_;
  Weight embed_;      // [vocab, hidden], also the tied head
  Linear head_;       // embed_ as the head's linear (a backend keys its device copy by this address)
  Weight ple_embed_;  // [ple_vocab, n_layers * P]
  Linear ple_model_proj_;  // [n_layers * P, hidden]
  NormWeight ple_proj_norm_, final_norm_;
  std::vector<G4Layer> layers_;
  MoeStats moe_stats_;
};

}  // namespace

std::unique_ptr<Model> load_gemma4(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const std::string& arch) {
  const Json c = with_gemma4_defaults(text_config(config));
  G4Config g = read_config(config, c, arch);
  // Gemma 4 always ties the head to embed_tokens.
  const DecoderNames names = find_decoder_names(*ckpt, true);
  const QuantConfig qc = QuantConfig::from_config(config);
  ModelInfo info;
  info.architecture = arch;
  info.family = "gemma4";
  info.context_length = c.get_int("max_position_embeddings", 0);
  std::unique_ptr<VisionEncoder> vision;
  if (arch == "Gemma4ForConditionalGeneration" && has_vision_tower(*ckpt)) {
    info.accepts_embeds = true;
    vision = load_vision_encoder(ckpt, config, "gemma4");
  }
  return std::make_unique<Gemma4Model>(std::move(ckpt), qc, std::move(g), names.model, std::move(info),
                                       std::move(vision));
}

}  // namespace rapid
