// The mixture-of-experts block (layers/moe.*) on the device, for the fused CUDA decoder and the op backend's moe()
// (cuda_ops.cu): router (Gemma 4's input norm, GEMV, softmax, top-k, renormalize, per-expert scale: layers/moe.cpp's
// arithmetic and tie rule), a device-side counting sort of the (token, slot) pairs by expert into tiles of up to 8
// slots of one expert, each of whose weight rows is read once per tile (gate/up·act·mul, down: f32 chains, or in the
// Fast mode 4-bit codes on tensor cores), and a weighted sum per token in slot order; in f32, steps of at most 8
// tokens skip the sort (a block per slot).
// Nothing waits on the host, so the block runs inside a captured step graph.
// Batch invariance: every (token, row) dot product has one fixed reduction order, whatever shares its expert.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "cuda/cuda_kernels.h"
#include "layers/moe.h"

namespace rapid::cuda {

// One MoE block's weights on the device, row-major in the host's MLX affine / dense layout (or, upload_moe's
// tensor_cores, tile_codes' tiles for 4-bit experts): the router
// gate [E, hidden] and the experts stacked, gate and up [E * ffn, hidden], down [E * hidden, ffn]. Gemma 4's router
// options (RouterOptions) ride along: the router input rmsnorm_noscale(x) · input_scale · input_mult, and the final
// weights times expert_scale[e].
struct DevMoe {
  DevWeight router, gate, up, down;
  int64_t n_experts = 0, hidden = 0, ffn = 0;
  int top_k = 0;
  bool renormalize = true;
  int act = 0;  // 0 = silu, 1 = gelu_tanh
  bool input_rmsnorm = false;
  float input_eps = 1e-6f, input_mult = 1.0f;
  const float* input_scale = nullptr;   // [hidden] (device) or null (= 1)
  const float* expert_scale = nullptr;  // [n_experts] (device) or null (= 1)
};

// Why the CUDA MoE kernels cannot run this router and these experts (empty: they can): more experts or a larger
// top-k than the kernels take, experts stored in more than one format, a weight format the kernels do not read.
std::string moe_unsupported(const MoeRouter& r, const MoeExperts& ex);
inline std::string moe_unsupported(const MoeBlock& b) { return moe_unsupported(b.router, b.experts); }

// Copies the router (and its options' vectors) and the experts to the device (the experts gathered into stacked
// buffers); every allocation is appended to `allocations` (the caller frees them with cudaFree). tensor_cores (the
// Fast precision): 4-bit experts in whole 16-row tiles are stored as tensor-core tiles (DevWeight::tiled, unless
// RAPID_CUDA_MOE_MMA=0), which only moe_forward's Fast mode reads.
DevMoe upload_moe(const MoeRouter& r, const MoeExperts& ex, std::vector<void*>& allocations, bool tensor_cores);
inline DevMoe upload_moe(const MoeBlock& b, std::vector<void*>& allocations, bool tensor_cores) {
  return upload_moe(b.router, b.experts, allocations, tensor_cores);
}

// Bytes of moe_forward's scratch for up to `tokens` tokens of block `m` (allocate once, outside any capture).
size_t moe_scratch_bytes(const DevMoe& m, int64_t tokens);

// out[T, hidden] (+)= Σ_j w_j · expert_{idx_j}(expert_x) with (idx, w) the routing of route_x [T, hidden]
// (Gemma 4 routes on the residual and runs the experts on its pre-norm; Qwen passes one x twice). accumulate: added to
// out, else out is overwritten (layers/moe.cpp's y). Experts uploaded with tensor_cores run on tensor cores (x rounded
// to bf16, codes exact, f32 sums; mode must be Fast), the others in f32 as the CPU. scratch: moe_scratch_bytes(m, >= T) bytes of
// device memory (256-byte aligned). Enqueued on s without synchronizing.
void moe_forward(const DevMoe& m, const float* route_x, const float* expert_x, int64_t T, float* out, bool accumulate,
                 MathMode mode, void* scratch, cudaStream_t s);
// h[T, hidden] += moe(x[T, hidden]) with x the normed rows (the fused decoder's block).
inline void moe_forward(const DevMoe& m, const float* x, int64_t T, float* h, MathMode mode, void* scratch,
                        cudaStream_t s) {
  moe_forward(m, x, x, T, h, true, mode, scratch, s);
}

// The router alone: idx [T, top_k] and w [T, top_k] (device) as layers/moe.cpp's moe_route (for tests).
void moe_route_dev(const DevMoe& m, const float* x, int64_t T, int32_t* idx, float* w, cudaStream_t s);

}  // namespace rapid::cuda
