// Mistral 3 / Ministral 3 (Mistral3ForConditionalGeneration with `mistral` or `ministral3` text, and
// Ministral3ForCausalLM): a Llama-type decoder (RMSNorm, SwiGLU, GQA, no bias) whose Ministral 3 text lane
// uses YaRN RoPE plus the Llama-4 query scaling after RoPE; the Pixtral tower when the files hold one.
#include <stdexcept>
#include "models/decoder.h"
#include "models/families.h"

namespace rapid {

std::unique_ptr<Model> load_mistral3(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const std::string& arch) {
  const Json& c = text_config(config);
  DecoderConfig d = read_common_config(c, arch);
  if (c.get_bool("attention_bias", false) || c.get_bool("mlp_bias", false))
    throw std::runtime_error(arch + ": attention_bias / mlp_bias are not part of Mistral 3 and are not supported");
  d.act = parse_activation(c.get_string("hidden_act", "silu"), arch);
  const Json* rp = rope_params(c);
  d.ropes.push_back(rope_from_params(rp, d.head_dim, c.get_double("rope_theta", 1e6), arch));
  // transformers applies the Llama-4 scaling in Ministral3Attention only (MistralAttention has none).
  if (c.get_string("model_type", "") == "ministral3" && rp) {
    const Json* beta = rp->find("llama_4_scaling_beta");
    if (beta && beta->is_number() && beta->as_double() != 0) {
      const Json* period = rp->find("original_max_position_embeddings");
      if (!period || !period->is_number() || period->as_int() <= 0)
        throw std::runtime_error(arch + ": llama_4_scaling_beta needs rope_parameters.original_max_position_embeddings");
      d.q_pos_beta = float(beta->as_double());
      d.q_pos_period = period->as_int();
    }
  }
  // Mistral's sliding_window (null in Mistral 3 configs) applies to every layer when set.
  const Json* sw = c.find("sliding_window");
  if (!c.find("layer_types") && sw && sw->is_number())
    for (int& w : d.window) w = int(sw->as_int());
  // Ministral3ForCausalLM (no vision_config) loads the text lane only, even from a file that holds a tower.
  const char* vision = config.find("vision_config") ? "mistral3" : nullptr;
  return finish_decoder(std::move(ckpt), config, c, std::move(d), arch, "mistral3", false, vision);
}

}  // namespace rapid
