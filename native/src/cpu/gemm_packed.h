// Dense f32/bf16/f16 GEMM over weights repacked once at load: y[n, out] = x[n, in] · Wᵀ.
// The weight is stored as panels of 16 output columns, k-major ([panels][in][16], source dtype, the last
// panel zero padded), so the micro-kernel reads one contiguous vector per k and widens bf16/f16 in
// registers. Cache-blocked over k (kKc) and register-tiled (rows x 16 columns), run-time ISA pick:
// AVX-512 (14 x 16 tiles), AVX2+FMA (6 x 16), portable scalar.
//
// Every output is one fused multiply-add chain over k = 0..in-1 in order, from 0: results are bitwise
// identical across ISAs, tile shapes, row counts and thread counts (batch invariance for free).
#pragma once
#include <cstdint>
#include <memory>
#include "cpu/threadpool.h"
#include "tensor/weight.h"

namespace rapid {

struct PackedDense {
  DType dtype = DType::F32;  // element type of the panels (the weight's own)
  int64_t out = 0, in = 0, panels = 0;
  std::unique_ptr<uint8_t[]> buf;  // owns the panels (64-byte aligned start at `data`)
  const void* data = nullptr;      // [panels][in][16] elements of dtype
};

// Columns per panel (one zmm, two ymm).
constexpr int64_t kPackedPanel = 16;

// Repacks a Dense F32/BF16/F16 weight; nullptr for any other kind or dtype (those keep the row kernels).
std::shared_ptr<const PackedDense> pack_dense(const Weight& W);

// y[c*ldy + o] = Σ_k x[c*ldx + k] · W[o, k] for c < n, o < P.out. x and y must not alias.
// `isa` is the row kernels' family name (matmul_kernel_name()): "avx512-vnni", "avx2", anything else
// runs the portable kernel. Parallel over 16-column panels.
void gemm_packed(ThreadPool& pool, const PackedDense& P, const float* x, int64_t ldx, float* y, int64_t ldy,
                 int64_t n, const char* isa);

}  // namespace rapid
