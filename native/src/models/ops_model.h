// A family whose forward is written once over the op backend (backend/ops.h): its CPU Model runs it on the CPU
// backend, a device model (cuda/cuda_ops_model.h) on the device's, with the device's own KV cache.
#pragma once
#include <string>
#include <vector>
#include "backend/ops.h"
#include "models/model.h"

namespace rapid {

// One MoE block as the forward passes it to ops::Backend::moe (views into the family's layers).
struct MoeBlockRef {
  const MoeRouter* router = nullptr;
  const MoeExperts* experts = nullptr;
};

class OpsModel {
 public:
  virtual ~OpsModel() = default;
  // Model::forward over `be`: logits [b.logit_rows.size(), vocab] on the host, K/V written through be.write_kv.
  virtual void forward_ops(ops::Backend& be, const Batch& b, KvPool& kv, Precision p, float* logits) = 0;
  // Whether the forward calls ops::Backend::moe (a backend without it cannot run this model).
  virtual bool uses_moe() const = 0;
  // Every MoE block the forward runs, for a device backend to check before it takes the model (empty: none, or the
  // family does not list them, which a device backend must treat as unknown when uses_moe()).
  virtual std::vector<MoeBlockRef> moe_blocks() const { return {}; }
};

}  // namespace rapid
