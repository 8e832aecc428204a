// Per-family vision encoder constructors, dispatched by load_vision_encoder (vision_registry.cpp).
#pragma once
#include <memory>
#include "vision/vision.h"

namespace rapid {

std::unique_ptr<VisionEncoder> load_qwen2_5_vl_vision(std::shared_ptr<const Checkpoint> ckpt, const Json& config);
std::unique_ptr<VisionEncoder> load_qwen3_vl_vision(std::shared_ptr<const Checkpoint> ckpt, const Json& config);
std::unique_ptr<VisionEncoder> load_gemma3_vision(std::shared_ptr<const Checkpoint> ckpt, const Json& config);
std::unique_ptr<VisionEncoder> load_pixtral_vision(std::shared_ptr<const Checkpoint> ckpt, const Json& config);
std::unique_ptr<VisionEncoder> load_gemma4_vision(std::shared_ptr<const Checkpoint> ckpt, const Json& config);

}  // namespace rapid
