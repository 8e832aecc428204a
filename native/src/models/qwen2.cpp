// Qwen2 / Qwen2.5 text decoder: Llama-shaped with biases on q/k/v (not o), SwiGLU, RMSNorm.
#include <stdexcept>
#include "models/decoder.h"
#include "models/families.h"

namespace rapid {

std::unique_ptr<Model> load_qwen2(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const std::string& arch) {
  const Json& c = text_config(config);
  DecoderConfig d = read_common_config(c, arch);
  d.qkv_bias = true;
  d.act = parse_activation(c.get_string("hidden_act", "silu"), arch);
  d.ropes.push_back(rope_from_params(rope_params(c), d.head_dim, c.get_double("rope_theta", 1e6), arch));
  apply_max_window_layers(c, d);
  return finish_decoder(std::move(ckpt), config, c, std::move(d), arch, "qwen2", false);
}

}  // namespace rapid
