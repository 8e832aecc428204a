// Qwen3-MoE text decoder (Qwen3MoeForCausalLM): the Qwen3 decoder whose MLP is a mixture of experts in
// every layer l with (l + 1) % decoder_sparse_step == 0 that is not in mlp_only_layers. Router: fp32
// softmax over mlp.gate logits, top num_experts_per_tok, renormalised when norm_topk_prob. Also holds
// apply_qwen3_moe, which the Qwen3-VL-MoE text lane shares.
#include <stdexcept>
#include "models/decoder.h"
#include "models/families.h"

namespace rapid {

void apply_qwen3_moe(const Json& c, DecoderConfig& d, bool norm_topk_default, const std::string& arch) {
  // Hub configs say num_experts; transformers 5.x save_pretrained writes num_local_experts.
  d.n_experts = c.get_int("num_experts", c.get_int("num_local_experts", 0));
  if (d.n_experts <= 0) return;  // a MoE config without experts is a dense model
  d.moe_ffn = c.get_int("moe_intermediate_size", 0);
  if (d.moe_ffn <= 0) throw std::runtime_error(arch + ": config.json has num_experts but no moe_intermediate_size");
  d.router.top_k = int(c.get_int("num_experts_per_tok", 8));
  d.router.renormalize = c.get_bool("norm_topk_prob", norm_topk_default);
  if (d.router.top_k <= 0 || d.router.top_k > d.n_experts)
    throw std::runtime_error(arch + ": num_experts_per_tok " + std::to_string(d.router.top_k) + " is outside [1, " +
                             std::to_string(d.n_experts) + "]");
  const int64_t step = c.get_int("decoder_sparse_step", 1);
  if (step <= 0) throw std::runtime_error(arch + ": decoder_sparse_step must be positive");
  d.moe_layer.assign(size_t(d.n_layers), 0);
  for (int l = 0; l < d.n_layers; ++l) d.moe_layer[size_t(l)] = (l + 1) % step == 0;
  if (const Json* only = c.find("mlp_only_layers"); only && only->is_array())
    for (size_t i = 0; i < only->size(); ++i) {
      const int64_t l = only->at(i).as_int();
      if (l >= 0 && l < d.n_layers) d.moe_layer[size_t(l)] = 0;
    }
}

std::unique_ptr<Model> load_qwen3_moe(std::shared_ptr<const Checkpoint> ckpt, const Json& config,
                                      const std::string& arch) {
  const Json& c = text_config(config);
  DecoderConfig d = read_qwen3_config(c, arch);
  d.ropes.push_back(rope_from_params(rope_params(c), d.head_dim, c.get_double("rope_theta", 1e6), arch));
  apply_max_window_layers(c, d);
  apply_qwen3_moe(c, d, false, arch);  // Qwen3MoeConfig.norm_topk_prob defaults to false
  return finish_decoder(std::move(ckpt), config, c, std::move(d), arch, "qwen3_moe", false);
}

}  // namespace rapid
