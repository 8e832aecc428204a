// Qwen3-VL-MoE text lane: Qwen3-VL's (q/k norm, interleaved mRoPE, DeepStack) with Qwen3-MoE's expert
// layers. transformers' Qwen3VLMoe router always renormalises the top-k weights (norm_topk_prob is not
// read), so renormalisation is the default here. The vision tower is Qwen3-VL's.
#include <stdexcept>
#include "models/decoder.h"
#include "models/families.h"

namespace rapid {

std::unique_ptr<Model> load_qwen3_vl_moe(std::shared_ptr<const Checkpoint> ckpt, const Json& config,
                                         const std::string& arch) {
  const Json& c = text_config(config);
  DecoderConfig d = read_common_config(c, arch);
  d.qk_norm = true;
  d.qkv_bias = d.o_bias = c.get_bool("attention_bias", false);
  d.act = parse_activation(c.get_string("hidden_act", "silu"), arch);
  RopeSpec rope = rope_from_params(rope_params(c), d.head_dim, c.get_double("rope_theta", 5e6), arch);
  d.mrope_sections = mrope_sections(c, config, arch);
  set_mrope_sections(rope, d.mrope_sections, true, arch);
  d.ropes.push_back(std::move(rope));
  const Json* vc = config.find("vision_config");
  const Json* ds = (vc && vc->is_object()) ? vc->find("deepstack_visual_indexes") : nullptr;
  d.deepstack_layers = (ds && ds->is_array()) ? int(ds->size()) : 0;
  apply_qwen3_moe(c, d, true, arch);
  d.router.renormalize = true;
  return finish_decoder(std::move(ckpt), config, c, std::move(d), arch, "qwen3_vl_moe", false, "qwen3_vl_moe");
}

}  // namespace rapid
