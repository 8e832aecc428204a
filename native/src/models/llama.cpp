// Llama / Mistral text decoder: RMSNorm, SwiGLU, GQA, optional attention_bias, RoPE default,
// linear or llama3 scaling; Mistral's sliding_window applies to every layer when set.
#include <stdexcept>
#include "models/decoder.h"
#include "models/families.h"

namespace rapid {

std::unique_ptr<Model> load_llama(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const std::string& arch) {
  const Json& c = text_config(config);
  DecoderConfig d = read_common_config(c, arch);
  d.qkv_bias = d.o_bias = c.get_bool("attention_bias", false);
  if (c.get_bool("mlp_bias", false)) throw std::runtime_error(arch + ": mlp_bias is not supported");
  d.act = parse_activation(c.get_string("hidden_act", "silu"), arch);
  d.ropes.push_back(rope_from_params(rope_params(c), d.head_dim, c.get_double("rope_theta", 10000.0), arch));
  const Json* sw = c.find("sliding_window");
  if (!c.find("layer_types") && sw && sw->is_number() && c.get_string("model_type", "") == "mistral")
    for (int& w : d.window) w = int(sw->as_int());
  return finish_decoder(std::move(ckpt), config, c, std::move(d), arch, "llama", false);
}

}  // namespace rapid
