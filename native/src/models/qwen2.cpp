// Qwen2 / Qwen2.5 text decoder: Llama-shaped with biases on q/k/v (not o), SwiGLU, RMSNorm.
#include <stdexcept>
#include "models/decoder.h"
#include "models/families.h"

namespace rapid {

std::unique_ptr<Model> load_qwen2(std::unique_ptr<Checkpoint> ckpt, const Json& config, const std::string& arch) {
  const Json& c = text_config(config);
  DecoderConfig d = read_common_config(c, arch);
  d.qkv_bias = true;
  d.act = parse_activation(c.get_string("hidden_act", "silu"), arch);
  d.ropes.push_back(rope_from_params(rope_params(c), d.head_dim, c.get_double("rope_theta", 1e6), arch));
  // Without layer_types (transformers 4.x), layers from max_window_layers on slide when enabled.
  if (!c.find("layer_types") && c.get_bool("use_sliding_window", false)) {
    const int64_t w = c.get_int("sliding_window", 0);
    for (int i = int(c.get_int("max_window_layers", d.n_layers)); i < d.n_layers; ++i) d.window[size_t(i)] = int(w);
  }
  const bool tie = config.get_bool("tie_word_embeddings", c.get_bool("tie_word_embeddings", false));
  const DecoderNames names = find_decoder_names(*ckpt, tie);
  const QuantConfig qc = QuantConfig::from_config(config);
  ModelInfo info;
  info.architecture = arch;
  info.family = "qwen2";
  return make_decoder(std::move(ckpt), qc, std::move(d), names, std::move(info));
}

}  // namespace rapid
