#include "models/registry.h"
#include <stdexcept>
#include "models/families.h"

namespace rapid {

namespace {
struct Entry {
  const char* architecture;
  const char* model_type;  // fallback when architectures is absent
  FamilyLoader load;
};
constexpr Entry kEntries[] = {
    {"Qwen2ForCausalLM", "qwen2", load_qwen2},
    {"Qwen3ForCausalLM", "qwen3", load_qwen3},
    {"Qwen3Model", "qwen3", load_qwen3},  // Qwen3-Embedding (model_type qwen3 resolves to the causal LM above)
    {"LlamaForCausalLM", "llama", load_llama},
    {"MistralForCausalLM", "mistral", load_llama},
    {"Gemma3ForCausalLM", "gemma3_text", load_gemma3},
    {"Gemma3ForConditionalGeneration", "gemma3", load_gemma3},
    {"Gemma4ForConditionalGeneration", "gemma4", load_gemma4},
    {"Gemma4ForCausalLM", "gemma4_text", load_gemma4},
    {"Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", load_qwen2_5_vl},
    {"Qwen3VLForConditionalGeneration", "qwen3_vl", load_qwen3_vl},
    {"Mistral3ForConditionalGeneration", "mistral3", load_mistral3},
    {"Ministral3ForCausalLM", "ministral3", load_mistral3},
    {"Qwen3MoeForCausalLM", "qwen3_moe", load_qwen3_moe},
    {"Qwen3VLMoeForConditionalGeneration", "qwen3_vl_moe", load_qwen3_vl_moe},
};
}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const Entry& e : kEntries) out.push_back(e.architecture);
  return out;
}

Activation parse_activation(const std::string& name, const std::string& arch) {
  if (name == "silu" || name == "swish") return Activation::Silu;
  if (name == "gelu_pytorch_tanh" || name == "gelu_tanh") return Activation::GeluTanh;
  throw std::runtime_error(arch + ": unsupported activation \"" + name + "\" (supported: silu, gelu_pytorch_tanh)");
}

const Json* rope_params(const Json& c) {
  const Json* p = c.find("rope_parameters");
  if (p && p->is_object()) return p;
  p = c.find("rope_scaling");
  return (p && p->is_object()) ? p : nullptr;
}

std::vector<int> mrope_sections(const Json& text, const Json& config, const std::string& arch) {
  for (const Json* c : {&text, &config}) {
    const Json* p = rope_params(*c);
    const Json* s = p ? p->find("mrope_section") : nullptr;
    if (s && s->is_array()) {
      std::vector<int> out;
      for (size_t i = 0; i < s->size(); ++i) out.push_back(int(s->at(i).as_int()));
      return out;
    }
  }
  throw std::runtime_error(arch + ": config.json has no mrope_section (rope_parameters or rope_scaling)");
}

std::unique_ptr<Model> load_model(const std::string& dir) {
  std::shared_ptr<const Checkpoint> ckpt = Checkpoint::open(dir);
  const Json config = ckpt->config();
  std::string arch;
  const Json* archs = config.find("architectures");
  if (archs && archs->is_array() && archs->size() > 0) arch = archs->at(size_t(0)).as_string();
  const std::string model_type = config.get_string("model_type", "");
  for (const Entry& e : kEntries)
    if ((!arch.empty() && arch == e.architecture) || (arch.empty() && model_type == e.model_type))
      return e.load(std::move(ckpt), config, arch.empty() ? std::string(e.architecture) : arch);
  std::string list;
  for (const Entry& e : kEntries) list += (list.empty() ? "" : ", ") + std::string(e.architecture);
  throw std::runtime_error("unsupported architecture \"" + (arch.empty() ? "model_type " + model_type : arch) +
                           "\" in " + dir + "/config.json (supported: " + list + ")");
}

}  // namespace rapid
