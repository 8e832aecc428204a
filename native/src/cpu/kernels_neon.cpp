// NEON kernels for arm64, where Advanced SIMD is baseline: the addon is built for generic ARMv8-A.
// The int8 Fast path comes in two variants selected at run time (cpu/matmul.cpp): sdot (ARMv8.2
// dotprod: Graviton 2+, Ampere Altra, Apple M1+, Cortex-A76+) and plain NEON widening multiplies
// for cores without it (Cortex-A53/A72: Raspberry Pi 3/4). One body, compiled twice; all of it has
// internal linkage and every header is included outside the dotprod region, so no ARMv8.2 code can
// reach a function shared with other translation units.
#if defined(__aarch64__)
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "cpu/kernels.h"
#include "quant/packed_bits.h"
#include "tensor/dtype.h"

namespace rapid::kern {

namespace neon_plain {
namespace {
constexpr bool kDot = false;
#include "cpu/kernels_neon_impl.h"
}  // namespace
}  // namespace neon_plain

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("dotprod"))), apply_to = function)
#else
#pragma GCC push_options
// The intrinsics of arm_neon.h carry this exact target; a narrower "+dotprod" cannot inline them.
#pragma GCC target("arch=armv8.2-a+dotprod")
#endif
namespace neon_dot {
namespace {
constexpr bool kDot = true;
#include "cpu/kernels_neon_impl.h"
}  // namespace
}  // namespace neon_dot
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

const Kernels& neon_kernels() {
  using namespace neon_plain;
  static const Kernels k{"neon", quantize_x, fast_rows, row_f32, dot_rows, gemv_exact, read_sum, nullptr, nullptr, nullptr};
  return k;
}

const Kernels& neon_dotprod_kernels() {
  using namespace neon_dot;
  static const Kernels k{"neon-dotprod", quantize_x, fast_rows, row_f32, dot_rows, gemv_exact, read_sum, nullptr, nullptr, nullptr};
  return k;
}

}  // namespace rapid::kern

#endif  // __aarch64__
