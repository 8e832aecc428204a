// x86-64 kernels, selected at run time by cpuid (cpu/matmul.cpp); the addon itself is built for
// generic x86-64, so it still loads on CPUs without AVX2 or AVX-512. One body (kernels_x86_impl.h),
// compiled twice: AVX2 + FMA + F16C (Haswell / Zen and newer) and AVX-512 F/BW/VL + VNNI (Ice Lake /
// Sapphire Rapids / Zen4 and newer), whose int8 Fast path uses vpdpbusd. Each family adds its own
// kernels over the interleaved 4-bit copies (cpu/gemv_interleaved.h). All of it has internal
// linkage and every header is included outside the target regions, so no AVX2 or AVX-512 code can
// reach a function shared with other translation units (COMDAT).
#if defined(__x86_64__)
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/gemv_interleaved.h"
#include "cpu/kernels.h"
#include "quant/packed_bits.h"
#include "tensor/dtype.h"

// The micro-kernels rely on full unrolling of their small register-tile loops, which GCC only does
// at -O3; the addon may be built at -O2.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#pragma GCC optimize("O3")
#endif
namespace rapid::kern::x86_avx2 {
namespace {
constexpr bool kVnni = false;
#include "cpu/kernels_x86_impl.h"
#include "cpu/interleaved_avx2_impl.h"
}  // namespace
}  // namespace rapid::kern::x86_avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

// 256-bit registers with EVEX encodings: the memory-bound decode gains nothing from zmm, and zmm
// lowers the clock on several Intel server parts. The batched GEMM (gemm_int8_x86_impl.h) is compute
// bound and uses zmm: one lane per activation row.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#pragma GCC optimize("O3")
#endif
namespace rapid::kern::x86_avx512 {
namespace {
constexpr bool kVnni = true;
#include "cpu/kernels_x86_impl.h"
#include "cpu/gemm_int8_x86_impl.h"
#include "cpu/gemv_interleaved_x86_impl.h"
#include "cpu/gemm_interleaved_x86_impl.h"
}  // namespace
}  // namespace rapid::kern::x86_avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace rapid::kern {

const Kernels& avx2_kernels() {
  using namespace x86_avx2;
  static const Kernels k{"avx2", quantize_x, fast_rows, row_f32, dot_rows, gemv_exact, read_sum,
                         nullptr, gemv4_interleaved, gemm4_interleaved, kIl2PrefetchBytes,
                         gemv8_interleaved, gemm8_interleaved};
  return k;
}

const Kernels& avx512_vnni_kernels() {
  using namespace x86_avx512;
  static const Kernels k{"avx512-vnni", quantize_x, fast_rows, row_f32, dot_rows, gemv_exact, read_sum,
                         gemm_rows, gemv4_interleaved, gemm4_interleaved};
  return k;
}

}  // namespace rapid::kern

#endif  // __x86_64__
