// The CUDA Model of a family written over the op backend (models/ops_model.h, today Gemma 4): the family's one
// forward run on the CUDA ops backend, whose device KV mirrors the pool's geometry and whose weights are uploaded
// on first use and kept. Host-only header.
#pragma once
#include <memory>
#include "models/model.h"

namespace rapid::cuda {

// host->ops_model() must be non-null. Logits come back to the host (no DeviceLogits). precision: the one the model
// runs (its MoE experts are uploaded for it).
std::unique_ptr<Model> make_cuda_ops_model(std::unique_ptr<Model> host, Precision precision);

}  // namespace rapid::cuda
