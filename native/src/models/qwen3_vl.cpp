// Qwen3-VL text lane: the Qwen3 decoder (q/k norm, no bias) with interleaved mRoPE (transformers
// apply_interleaved_mrope: j%3 == 1 → H and j%3 == 2 → W within 3·section, else T) and DeepStack:
// the tower's per-level features are added at image tokens after the first len(deepstack) layers.
#include <stdexcept>
#include "models/decoder.h"
#include "models/families.h"

namespace rapid {

DecoderConfig read_qwen3_vl_config(const Json& c, const Json& config, const std::string& arch) {
  DecoderConfig d = read_qwen3_config(c, arch);
  RopeSpec rope = rope_from_params(rope_params(c), d.head_dim, c.get_double("rope_theta", 5e6), arch);
  d.mrope_sections = mrope_sections(c, config, arch);
  set_mrope_sections(rope, d.mrope_sections, true, arch);
  d.ropes.push_back(std::move(rope));
  const Json* vc = config.find("vision_config");
  const Json* ds = (vc && vc->is_object()) ? vc->find("deepstack_visual_indexes") : nullptr;
  d.deepstack_layers = (ds && ds->is_array()) ? int(ds->size()) : 0;
  return d;
}

std::unique_ptr<Model> load_qwen3_vl(std::shared_ptr<const Checkpoint> ckpt, const Json& config,
                                     const std::string& arch) {
  const Json& c = text_config(config);
  return finish_decoder(std::move(ckpt), config, c, read_qwen3_vl_config(c, config, arch), arch, "qwen3_vl", false,
                        "qwen3_vl");
}

}  // namespace rapid
