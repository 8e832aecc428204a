// Dense GEMMs of device-resident weights for the vision towers: y[n, ldy] = x[n, ldx] · Wᵀ + b. Fast: W stored
// bf16, x rounded to bf16 as it is staged, f32 sums on tensor cores; Exact: f32 throughout (SIMT). Deterministic:
// each output is one fixed-order chain over k, whatever n or the launch shape.
#pragma once
#include <cuda_runtime.h>
#include <cstdint>
#include <string>
#include <vector>

namespace rapid::cuda {

// The device layout both GEMMs read: W [rows_pad(out), k_pad(in)] row-major, zero beyond [out, in], so a tile
// never reads past it and padded k adds exact zeros.
constexpr int64_t kGemmRowPad = 128;
constexpr int64_t kGemmKPad = 32;
inline int64_t gemm_rows_pad(int64_t out) { return (out + kGemmRowPad - 1) / kGemmRowPad * kGemmRowPad; }
inline int64_t gemm_k_pad(int64_t in) { return (in + kGemmKPad - 1) / kGemmKPad * kGemmKPad; }

// The tile widths (BN) of the v3 (wgmma) kernel, each selectable as RAPID_CUDA_TOWER_GEMM=v3-<width> for A/B runs.
inline constexpr int kGemmV3Widths[] = {64, 96, 128, 192};

// The kernel choices RAPID_CUDA_TOWER_GEMM names: "v2", "v3-<width>" for each width, then "v3" (the width picked).
inline std::vector<std::string> gemm_kernel_names() {
  std::vector<std::string> names{"v2"};
  for (const int w : kGemmV3Widths) names.push_back("v3-" + std::to_string(w));
  names.push_back("v3");
  return names;
}

// What a GEMM does with v = x · Wᵀ + b as it stores it: act 1: y = gelu_tanh(v) (vision_act, device_math.cuh); accumulate:
// y = y + v (a residual); -1 / false: neither. Bitwise the GEMM followed by tower::act or tower::add. Other
// activations, or both at once, throw std::invalid_argument (callers run tower::act after the GEMM instead).
struct GemmEpilogue {
  int act = -1;
  bool accumulate = false;
};

// w: bf16 bits [gemm_rows_pad(out), gemm_k_pad(in)]; x [n, ldx] f32 (ldx >= in); bias [out] or null;
// y [n, ldy] f32 (ldy >= out). y must not overlap x.
void gemm_bf16(const float* x, int64_t ldx, const uint16_t* w, const float* bias, float* y, int64_t ldy, int64_t n,
               int64_t out, int64_t in, cudaStream_t s, GemmEpilogue ep = {});

// w: f32 [gemm_rows_pad(out), gemm_k_pad(in)]; otherwise as gemm_bf16.
void gemm_f32(const float* x, int64_t ldx, const float* w, const float* bias, float* y, int64_t ldy, int64_t n,
              int64_t out, int64_t in, cudaStream_t s, GemmEpilogue ep = {});

}  // namespace rapid::cuda
