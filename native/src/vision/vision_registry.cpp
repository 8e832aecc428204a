// load_vision_encoder: picks the family's tower from the text family's VLM name (or, when that is
// empty, config.json's model_type / architectures).
#include <stdexcept>
#include "vision/vision.h"
#include "vision/vision_families.h"

namespace rapid {

namespace {

std::string infer_family(const Json& config) {
  const std::string mt = config.get_string("model_type", "");
  if (!mt.empty()) return mt;
  if (const Json* a = config.find("architectures"); a && a->is_array() && a->size() > 0 && (*a)[0].is_string()) {
    const std::string& arch = (*a)[0].as_string();
    if (arch.rfind("Qwen2_5_VL", 0) == 0) return "qwen2_5_vl";
    if (arch.rfind("Qwen3VLMoe", 0) == 0) return "qwen3_vl_moe";
    if (arch.rfind("Qwen3VL", 0) == 0) return "qwen3_vl";
    if (arch.rfind("Gemma3ForConditional", 0) == 0) return "gemma3";
    if (arch.rfind("Mistral3ForConditional", 0) == 0) return "mistral3";
  }
  return "";
}

}  // namespace

std::unique_ptr<VisionEncoder> load_vision_encoder(std::shared_ptr<const Checkpoint> ckpt, const Json& config,
                                                   const std::string& family) {
  if (!ckpt) throw std::invalid_argument("load_vision_encoder: no checkpoint");
  const std::string f = family.empty() ? infer_family(config) : family;
  if (f == "qwen2_5_vl") return load_qwen2_5_vl_vision(std::move(ckpt), config);
  // Qwen3-VL-MoE shares the dense model's vision tower.
  if (f == "qwen3_vl" || f == "qwen3_vl_moe") return load_qwen3_vl_vision(std::move(ckpt), config);
  if (f == "gemma3") return load_gemma3_vision(std::move(ckpt), config);
  if (f == "mistral3") return load_pixtral_vision(std::move(ckpt), config);  // Pixtral tower
  if (f == "gemma4") return load_gemma4_vision(std::move(ckpt), config);
  throw std::runtime_error("no vision encoder for family \"" + f +
                           "\" (supported: qwen2_5_vl, qwen3_vl, qwen3_vl_moe, gemma3, gemma4, mistral3)");
}

}  // namespace rapid
