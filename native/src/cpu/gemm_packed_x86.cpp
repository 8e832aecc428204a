// x86-64 register tiles of the packed dense GEMM (cpu/gemm_packed.h), one body per ISA: AVX-512F
// (14 rows x one zmm of 16 columns: 14 accumulators, one panel load and 14 embedded broadcasts per k)
// and AVX2+FMA+F16C (6 rows x two ymm: 12 accumulators). bf16/f16 panels are widened in registers.
// The addon is built for generic x86-64; these bodies only run after cpuid picked their family.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#include <utility>

#include "cpu/gemm_packed_tiles.h"

// One target region per ISA (O3: the tiles rely on full unrolling of their register loops); every
// header is included above, outside the regions, so no ISA code reaches a shared inline function.
#define RAPID_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define RAPID_TARGET_BEGIN(isa) RAPID_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define RAPID_TARGET_END RAPID_PRAGMA(clang attribute pop)
#else
#define RAPID_TARGET_BEGIN(isa) RAPID_PRAGMA(GCC push_options) RAPID_PRAGMA(GCC target(isa)) RAPID_PRAGMA(GCC optimize("O3"))
#define RAPID_TARGET_END RAPID_PRAGMA(GCC pop_options)
#endif

RAPID_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
namespace rapid::gemmk::x86_avx512 {
namespace {
constexpr int kMr = 14;

template <DType D>
inline __m512 load16(const void* w, int64_t k) {  // panel row k: 16 columns as f32
  if constexpr (D == DType::F32) return _mm512_loadu_ps(static_cast<const float*>(w) + k * 16);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + k * 16));
  // maskz forms: GCC 12 flags the unmasked ones' _mm512_undefined operand (-Wmaybe-uninitialized).
  if constexpr (D == DType::F16) return _mm512_maskz_cvtph_ps(0xFFFF, h);
  const __m512i wide = _mm512_maskz_cvtepu16_epi32(0xFFFF, h);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, wide, 16));  // bf16: the high half of f32
}

template <int M, DType D>
void tile(const float* xp, const void* w, int64_t kc, float* y, int64_t ldy, bool acc) {
  __m512 c[M];
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) c[i] = acc ? _mm512_loadu_ps(y + i * ldy) : _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b = load16<D>(w, k);
    const float* a = xp + k * kMr;  // [kMr]
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) c[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[i]), b, c[i]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) _mm512_storeu_ps(y + i * ldy, c[i]);
}

#include "cpu/gemm_packed_x86_dispatch.h"
}  // namespace
}  // namespace rapid::gemmk::x86_avx512
RAPID_TARGET_END

RAPID_TARGET_BEGIN("avx2,fma,f16c")
namespace rapid::gemmk::x86_avx2 {
namespace {
constexpr int kMr = 6;

template <DType D>
inline __m256 load8(const void* w, int64_t i) {  // panel elements [i, i+8) as f32
  if constexpr (D == DType::F32) return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
  if constexpr (D == DType::F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <int M, DType D>
void tile(const float* xp, const void* w, int64_t kc, float* y, int64_t ldy, bool acc) {
  __m256 c[M][2];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    c[i][0] = acc ? _mm256_loadu_ps(y + i * ldy) : _mm256_setzero_ps();
    c[i][1] = acc ? _mm256_loadu_ps(y + i * ldy + 8) : _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = load8<D>(w, k * 16), b1 = load8<D>(w, k * 16 + 8);
    const float* a = xp + k * kMr;  // [kMr]
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m256 av = _mm256_broadcast_ss(a + i);
      c[i][0] = _mm256_fmadd_ps(av, b0, c[i][0]);
      c[i][1] = _mm256_fmadd_ps(av, b1, c[i][1]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    _mm256_storeu_ps(y + i * ldy, c[i][0]);
    _mm256_storeu_ps(y + i * ldy + 8, c[i][1]);
  }
}

#include "cpu/gemm_packed_x86_dispatch.h"
}  // namespace
}  // namespace rapid::gemmk::x86_avx2
RAPID_TARGET_END

namespace rapid::gemmk {

const Tiles& avx512_tiles() {
  static const Tiles t{"avx512", x86_avx512::kMr, x86_avx512::tile_any};
  return t;
}

const Tiles& avx2_tiles() {
  static const Tiles t{"avx2", x86_avx2::kMr, x86_avx2::tile_any};
  return t;
}

}  // namespace rapid::gemmk

#endif  // __x86_64__
