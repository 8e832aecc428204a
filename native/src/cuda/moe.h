// The mixture-of-experts block (layers/moe.*) on the device, for the fused CUDA decoder: router (GEMV, softmax,
// top-k, renormalize: layers/moe.cpp's arithmetic and tie rule), a device-side counting sort of the (token, slot)
// pairs by expert, then each active expert reads its weights once for all its rows (gate/up·act·mul, down), and a
// weighted sum per token in slot order. Nothing waits on the host, so the block runs inside a captured step graph.
// Batch invariance: every (token, row) dot product has one fixed reduction order, whatever shares its expert.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "cuda/cuda_kernels.h"
#include "layers/moe.h"

namespace rapid::cuda {

// One MoE block's weights on the device, row-major in the host's MLX affine / dense layout (never tiled): the router
// gate [E, hidden] and the experts stacked, gate and up [E * ffn, hidden], down [E * hidden, ffn].
struct DevMoe {
  DevWeight router, gate, up, down;
  int64_t n_experts = 0, hidden = 0, ffn = 0;
  int top_k = 0;
  bool renormalize = true;
  int act = 0;  // 0 = silu, 1 = gelu_tanh
};

// Why the CUDA MoE kernels cannot run block `b` (empty: they can): Gemma 4's router options, more experts or a
// larger top-k than the kernels take, experts stored in more than one format. Per-weight formats are the caller's.
std::string moe_unsupported(const MoeBlock& b);

// Copies block `b`'s router and experts to the device (the experts gathered into stacked buffers); every allocation
// is appended to `allocations` (the caller frees them with cudaFree).
DevMoe upload_moe(const MoeBlock& b, std::vector<void*>& allocations);

// Bytes of moe_forward's scratch for up to `tokens` tokens of block `m` (allocate once, outside any capture).
size_t moe_scratch_bytes(const DevMoe& m, int64_t tokens);

// h[T, hidden] += moe(x[T, hidden]) with x the normed rows. scratch: moe_scratch_bytes(m, >= T) bytes of device
// memory (256-byte aligned). Enqueued on s without synchronizing.
void moe_forward(const DevMoe& m, const float* x, int64_t T, float* h, void* scratch, cudaStream_t s);

// The router alone: idx [T, top_k] and w [T, top_k] (device) as layers/moe.cpp's moe_route (for tests).
void moe_route_dev(const DevMoe& m, const float* x, int64_t T, int32_t* idx, float* w, cudaStream_t s);

}  // namespace rapid::cuda
