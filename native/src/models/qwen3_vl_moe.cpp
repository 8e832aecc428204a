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
  DecoderConfig d = read_qwen3_vl_config(c, config, arch);
  apply_qwen3_moe(c, d, true, arch);
  d.router.renormalize = true;
  return finish_decoder(std::move(ckpt), config, c, std::move(d), arch, "qwen3_vl_moe", false, "qwen3_vl_moe");
}

}  // namespace rapid
