// Maps a checkpoint's config.json (architectures[0], else model_type) to a model family and loads it.
#pragma once
#include <memory>
#include <string>
#include <vector>
#include "models/model.h"

namespace rapid {

// Opens <dir> (config.json + safetensors) and builds its model. Unknown architecture → an error
// naming it and listing the supported ones.
std::unique_ptr<Model> load_model(const std::string& dir);

// "Qwen2ForCausalLM", ... in registry order.
std::vector<std::string> supported_architectures();

}  // namespace rapid
