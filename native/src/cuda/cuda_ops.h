// The CUDA implementation of the op backend (backend/ops.h) that the vision towers run over. Host-only header:
// includes no CUDA header, so the model and test code compile the same way in both variants.
#pragma once
#include <cstdint>
#include <memory>
#include "backend/ops.h"

namespace rapid::cuda {

class CudaOps;

// Ops on the current device, on a stream of their own. Activations come from the stream-ordered pool
// (cudaMallocAsync); weights are uploaded on first use and kept, keyed by the host struct's address: Linear
// weights of any format dequantized once to bf16 (Fast) or f32 (Exact), norms, tables and per-column vectors
// as f32. Every op enqueues only; download() waits. write_kv / paged_attention keep the KV in device memory of the
// pool's geometry.
// decoder_matmuls: linear() runs the fused decoder's matmul (cuda_kernels.h) instead, weights uploaded as that
// decoder uploads them: MLX 4/8-bit codes tiled for the tensor cores under Fast (exact weights, x rounded to bf16),
// 16/32-bit weights as stored (f32 math); fast for the few rows of a decode step and batch invariant. The towers keep
// the dense GEMMs over many rows (the default).
std::unique_ptr<ops::Backend> make_cuda_ops(bool decoder_matmuls = false);

// Uploads a MoE block's router and experts to a CudaOps backend now (what its first moe() call would do), so a
// model's experts (most of a MoE checkpoint) take their GPU memory at load and a shortage is a load error. Throws
// when cuda/moe.h cannot run the block; another backend: nothing. p: the precision the model runs (Fast stores
// 4-bit experts as tensor-core tiles).
void preload_moe(ops::Backend& be, const MoeRouter& router, const MoeExperts& experts, Precision p);

// Device bytes of the weights a CudaOps backend has uploaded so far (0 for another backend).
int64_t uploaded_weight_bytes(const ops::Backend& be);

// Device bytes of a CudaOps backend's KV cache (made by the first write_kv / paged_attention; 0 before, or for
// another backend). The cache mirrors the KvPool passed to those ops (cuda/paged_ops.h).
int64_t device_kv_bytes(const ops::Backend& be);

}  // namespace rapid::cuda
