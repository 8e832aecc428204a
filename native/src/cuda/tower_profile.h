// Per-op-class GPU time of a CudaOps backend (cuda_ops.h), for cuda_tower_bench --profile: cudaEvents around each
// GEMM and attention launch, summed until taken. Host-only header, like cuda_ops.h.
#pragma once
#include <cstdint>
#include "backend/ops.h"

namespace rapid::cuda {

struct TowerProfile {
  double gemm_ms = 0, gemm_flop = 0, attention_ms = 0;  // flop: 2 * n * out * in summed over the GEMMs
  int64_t gemm_calls = 0, attention_calls = 0;
};

// Starts (on) or stops timing a CudaOps backend's ops; false for another backend.
bool set_tower_profile(ops::Backend& be, bool on);

// Waits for the backend's stream, returns the sums since the last take and resets them.
TowerProfile take_tower_profile(ops::Backend& be);

}  // namespace rapid::cuda
