// Matrix kernels over Weight views: y[n, out] = x[n, in] · Wᵀ for Dense (F32/F16/BF16) and MLX
// Affine (2..8 bits) weights, with runtime SIMD dispatch (AVX-512 VNNI or AVX2+FMA+F16C on x86-64; NEON on arm64,
// with sdot where the CPU has ARMv8.2 dotprod; scalar elsewhere).
// Quantized weights are dequantized on the fly inside the kernel; no dequantized copy is ever made.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include "cpu/threadpool.h"
#include "tensor/weight.h"

namespace rapid {

enum class Precision {
  Exact,  // f32 activations, f32 accumulation (matches an f64 reference to ~1e-5 relative)
  Fast,   // Affine 4/8-bit: activations quantized to int8 per 64-element block (32 for group-32
          // weights) with exact f32 group sums for the bias term; other weights run Exact
};

// y[n, W.out] = x[n, W.in] · Wᵀ. x and y are row-major, contiguous, and must not alias.
// Parallel over output rows. Bitwise batch-invariant: row r of y depends only on row r of x (not
// on n, the row's position, or the thread count). Dense weights ignore `p`.
void matmul(ThreadPool& pool, const Weight& W, const float* x, float* y, int64_t n,
            Precision p = Precision::Exact);

// Same, but with explicit strides (elements between consecutive rows of x and y).
void matmul_strided(ThreadPool& pool, const Weight& W, const float* x, int64_t ldx, float* y,
                    int64_t ldy, int64_t n, Precision p = Precision::Exact);

// Gathers and dequantizes rows: out[i, :] = E[ids[i], :], out is [n, E.in] f32.
// Throws std::runtime_error if an id is outside [0, E.out).
void embedding_rows(const Weight& E, const int32_t* ids, int64_t n, float* out);

// Detected CPU features used for dispatch, e.g. {"avx2","fma","f16c"} or {"neon","asimddp"} or {}.
std::vector<std::string> cpu_simd_features();

// Name of the kernel family chosen at runtime: "avx512-vnni", "avx2", "neon-dotprod", "neon" or "scalar".
// RAPID_CPU_ISA=<name> (or "avx512") picks one of those the CPU has; RAPID_NO_SIMD=1 forces "scalar".
const char* matmul_kernel_name();

// The kernel families this CPU can run, best first (the last is always "scalar").
std::vector<std::string> cpu_kernel_families();

// Forces the named family (tests compare them); nullptr returns to the run-time pick. False, and no
// change, when the CPU cannot run it.
bool force_kernels(const char* isa);

// Forces the scalar kernels (tests compare both paths); returns the previous setting.
bool force_scalar_kernels(bool on);

// Measures sustained multi-threaded read bandwidth over a buffer of `bytes` (bytes/s).
double measure_read_bandwidth(ThreadPool& pool, size_t bytes);

}  // namespace rapid
