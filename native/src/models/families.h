// Loader entry points of the text families; registry.cpp maps config.json to one of them.
#pragma once
#include <memory>
#include <string>
#include <vector>
#include "format/json.h"
#include "format/safetensors.h"
#include "layers/activations.h"
#include "models/model.h"

namespace rapid {

using FamilyLoader = std::unique_ptr<Model> (*)(std::shared_ptr<const Checkpoint> ckpt, const Json& config,
                                                const std::string& arch);

std::unique_ptr<Model> load_qwen2(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const std::string& arch);
std::unique_ptr<Model> load_qwen3(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const std::string& arch);
std::unique_ptr<Model> load_llama(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const std::string& arch);
std::unique_ptr<Model> load_qwen2_5_vl(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const std::string& arch);
std::unique_ptr<Model> load_qwen3_vl(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const std::string& arch);
std::unique_ptr<Model> load_qwen3_moe(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const std::string& arch);
std::unique_ptr<Model> load_qwen3_vl_moe(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const std::string& arch);
std::unique_ptr<Model> load_gemma3(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const std::string& arch);
std::unique_ptr<Model> load_mistral3(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const std::string& arch);
std::unique_ptr<Model> load_gemma4(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const std::string& arch);

struct DecoderConfig;
// Qwen3-MoE expert layout of a text config (num_experts, num_experts_per_tok, moe_intermediate_size,
// decoder_sparse_step, mlp_only_layers, norm_topk_prob) into d; no-op when num_experts is 0.
void apply_qwen3_moe(const Json& c, DecoderConfig& d, bool norm_topk_default, const std::string& arch);

// The Qwen3 attention of a text config c (q/k norm, attention_bias, hidden_act) on top of the common
// fields; every Qwen3 lane (dense, MoE, VL, VL-MoE) starts from it.
DecoderConfig read_qwen3_config(const Json& c, const std::string& arch);

// Qwen3-VL's text lane config: Qwen3 attention, interleaved mRoPE and the DeepStack layer count (Qwen3-VL-MoE
// adds its experts to it).
DecoderConfig read_qwen3_vl_config(const Json& c, const Json& config, const std::string& arch);

// HF hidden_act names → Activation; throws naming the value when unsupported.
Activation parse_activation(const std::string& name, const std::string& arch);

// The RoPE object of a text config: rope_parameters (transformers 5) or rope_scaling + rope_theta (4.x).
const Json* rope_params(const Json& c);

// mRoPE sections of a Qwen-VL text config: rope_parameters / rope_scaling "mrope_section", else
// at the top level of the config; throws naming the architecture when absent.
std::vector<int> mrope_sections(const Json& text, const Json& config, const std::string& arch);

}  // namespace rapid
