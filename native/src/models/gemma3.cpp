// Gemma 3 text decoder: offset RMSNorm (1 + w), sandwich norms, q/k norms, GeGLU (gelu_tanh),
// sliding/full layers with their own RoPE (theta, linear factor), scale query_pre_attn_scalar^-0.5,
// embeddings × sqrt(hidden) rounded to bf16 for bf16 checkpoints. Also the text lane of
// Gemma3ForConditionalGeneration (language_model.model.* or model.language_model.* keys).
#include <cmath>
#include <stdexcept>
#include "models/decoder.h"
#include "models/families.h"

namespace rapid {

// transformers writes config.json as a diff against the class defaults, so hub Gemma 3 configs omit
// these (gemma-3-4b's text_config has no head counts or head_dim). Gemma3TextConfig defaults:
static Json with_gemma3_defaults(const Json& text) {
  Json c = Json::parse(R"({"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
    "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256,
    "sliding_window": 4096, "sliding_window_pattern": 6})");
  for (const auto& [k, v] : text.items()) c.set(k, v);
  return c;
}

std::unique_ptr<Model> load_gemma3(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const std::string& arch) {
  const Json c = with_gemma3_defaults(text_config(config));
  DecoderConfig d = read_common_config(c, arch);
  d.norm_offset = true;
  d.qk_norm = true;
  d.sandwich_norms = true;
  d.qkv_bias = d.o_bias = c.get_bool("attention_bias", false);
  d.act = parse_activation(c.get_string("hidden_activation", c.get_string("hidden_act", "gelu_pytorch_tanh")), arch);
  d.attn_scale = 1.0f / std::sqrt(float(c.get_double("query_pre_attn_scalar", d.head_dim)));
  const Json* attn_cap = c.find("attn_logit_softcapping");
  if (attn_cap && !attn_cap->is_null()) throw std::runtime_error(arch + ": attn_logit_softcapping is not supported");
  const Json* cap = c.find("final_logit_softcapping");
  if (cap && !cap->is_null()) d.final_softcap = float(cap->as_double());

  // Without layer_types (older configs) every sliding_window_pattern-th layer is full.
  if (!c.find("layer_types")) {
    const int64_t pattern = c.get_int("sliding_window_pattern", 6), w = c.get_int("sliding_window", 4096);
    if (pattern <= 0) throw std::runtime_error(arch + ": config.json sliding_window_pattern must be positive");
    for (int i = 0; i < d.n_layers; ++i) d.window[size_t(i)] = ((i + 1) % pattern == 0) ? 0 : int(w);
  }
  // RoPE: transformers 5 nests per-layer-type parameters in rope_parameters; 4.x uses rope_theta +
  // rope_scaling for full layers and rope_local_base_freq for sliding layers.
  const Json* rp = c.find("rope_parameters");
  if (rp && rp->is_object() && rp->find("full_attention")) {
    d.ropes.push_back(rope_from_params(rp->find("full_attention"), d.head_dim, 1e6, arch));
    d.ropes.push_back(rope_from_params(rp->find("sliding_attention"), d.head_dim, 1e4, arch));
  } else {
    d.ropes.push_back(rope_from_params(rope_params(c), d.head_dim, c.get_double("rope_theta", 1e6), arch));
    d.ropes.push_back(rope_default(d.head_dim, d.head_dim, c.get_double("rope_local_base_freq", 1e4), 1.0));
  }
  for (int i = 0; i < d.n_layers; ++i) d.rope_of[size_t(i)] = d.window[size_t(i)] > 0 ? 1 : 0;

  // transformers multiplies by embed_scale cast to the weight dtype: bf16 checkpoints see the rounded value.
  const std::string dtype = c.get_string("torch_dtype", c.get_string("dtype", config.get_string("torch_dtype", config.get_string("dtype", "float32"))));
  d.embed_scale = std::sqrt(float(d.hidden));
  if (dtype == "bfloat16") d.embed_scale = bf16_to_f32(f32_to_bf16(d.embed_scale));
  else if (dtype == "float16") d.embed_scale = f16_to_f32(f32_to_f16(d.embed_scale));

  // Gemma3ForConditionalGeneration also loads the SigLIP tower when its weights are present.
  const char* vision = arch == "Gemma3ForConditionalGeneration" ? "gemma3" : nullptr;
  return finish_decoder(std::move(ckpt), config, c, std::move(d), arch, "gemma3", true, vision);
}

}  // namespace rapid
