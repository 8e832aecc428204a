// Qwen2.5-VL text lane: the Qwen2 decoder (q/k/v bias, SwiGLU) with chunked mRoPE — frequency j
// takes its position from T for j < s0, H for j < s0+s1, else W (positions are [3, n]) — plus the
// vision tower (visual.* / model.visual.* / vision_tower.*) when the checkpoint holds it.
#include <stdexcept>
#include "models/decoder.h"
#include "models/families.h"

namespace rapid {

std::unique_ptr<Model> load_qwen2_5_vl(std::shared_ptr<const Checkpoint> ckpt, const Json& config,
                                       const std::string& arch) {
  const Json& c = text_config(config);
  DecoderConfig d = read_common_config(c, arch);
  d.qkv_bias = true;
  d.act = parse_activation(c.get_string("hidden_act", "silu"), arch);
  // Flat (transformers 4.x) configs keep rope_theta at the top level next to the text keys.
  RopeSpec rope = rope_from_params(rope_params(c), d.head_dim, c.get_double("rope_theta", 1e6), arch);
  d.mrope_sections = mrope_sections(c, config, arch);
  set_mrope_sections(rope, d.mrope_sections, false, arch);
  d.ropes.push_back(std::move(rope));
  apply_max_window_layers(c, d);
  return finish_decoder(std::move(ckpt), config, c, std::move(d), arch, "qwen2_5_vl", false, "qwen2_5_vl");
}

}  // namespace rapid
