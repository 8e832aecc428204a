// Qwen3 text decoder: no biases, RMSNorm on q and k per head before RoPE, SwiGLU. Also Qwen3Model
// (Qwen3-Embedding): the same decoder without an LM head.
#include <stdexcept>
#include "models/decoder.h"
#include "models/families.h"

namespace rapid {

DecoderConfig read_qwen3_config(const Json& c, const std::string& arch) {
  DecoderConfig d = read_common_config(c, arch);
  d.qk_norm = true;
  d.qkv_bias = d.o_bias = c.get_bool("attention_bias", false);
  d.act = parse_activation(c.get_string("hidden_act", "silu"), arch);
  return d;
}

std::unique_ptr<Model> load_qwen3(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const std::string& arch) {
  const Json& c = text_config(config);
  DecoderConfig d = read_qwen3_config(c, arch);
  d.ropes.push_back(rope_from_params(rope_params(c), d.head_dim, c.get_double("rope_theta", 1e6), arch));
  apply_max_window_layers(c, d);
  d.embedding_only = arch == "Qwen3Model";  // Qwen3-Embedding: the decoder alone, pooled by the caller
  return finish_decoder(std::move(ckpt), config, c, std::move(d), arch, "qwen3", false);
}

}  // namespace rapid
