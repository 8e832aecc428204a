// The sampler's exact arithmetic, shared by the CPU sampler (sampling/rank_draw.cpp) and the CUDA one
// (cuda/sample.cu): weights as fixed-point integers w · 2^40, so every sum is exact in any order and both
// backends pick the same token for the same weights and draw u.
#pragma once
#include <cmath>
#include <cstdint>
#if defined(__SSE2__) && !defined(__CUDACC__)
#include <immintrin.h>
#endif

#if defined(__CUDACC__)
#define RAPID_HOST_DEVICE __host__ __device__
#else
#define RAPID_HOST_DEVICE
#endif

namespace rapid {

inline constexpr int kFixBits = 40;  // a weight of 1 (the top token) is 2^40; sums over 2^20 tokens stay below 2^60

// floor(w · 2^40) of a weight w = exp(v/T - max/T) in [0, 1]; 0 for NaN and below 2^-40, 2^40 at or above 1.
// The device takes it from the float's bits (w = m · 2^(e-150): no 64-bit conversions), the host by truncating
// the exact product w · 2^40: the same integer.
RAPID_HOST_DEVICE inline uint64_t fixed_weight(float w) {
#if defined(__CUDA_ARCH__)
  if (!(w > 0.0f)) return 0;
  if (w >= 1.0f) return uint64_t(1) << kFixBits;
  const uint32_t b = __float_as_uint(w);
  const int e = int(b >> 23);
  if (e == 0) return 0;  // subnormal (< 2^-126)
  const uint64_t m = (b & 0x7fffffu) | 0x800000u;
  const int sh = e - 150 + kFixBits;
  return sh >= 0 ? m << sh : (sh > -24 ? m >> -sh : 0);
#else
  // w · 2^40 is exact in float (a power-of-two scale), so truncating it gives the floor; clamped to [0, 2^40] and
  // NaN to 0, on x86 by maxss/minss (max_ss returns its second operand, 0, for NaN) because compilers turn the
  // portable selects into branches, which a row's many tiny weights mispredict.
  const float one = float(uint64_t(1) << kFixBits);
#if defined(__SSE2__) && !defined(__CUDACC__)
  const __m128 x = _mm_mul_ss(_mm_set_ss(w), _mm_set_ss(one));
  return uint64_t(_mm_cvttss_si64(_mm_min_ss(_mm_max_ss(x, _mm_setzero_ps()), _mm_set_ss(one))));
#else
  const float x = w * one;
  const float pos = 0.0f < x ? x : 0.0f;  // NaN: 0
  return uint64_t(int64_t(pos < one ? pos : one));
#endif
#endif
}

// A draw in [0, total): floor(u · total), kept below total against rounding.
RAPID_HOST_DEVICE inline uint64_t draw_target(double u, uint64_t total) {
  const uint64_t t = uint64_t(u * double(total));
  return t < total ? t : total - 1;
}

// The nucleus' weight target: ceil(top_p · z) kept in [1, z] (z > 0). The nucleus ends at the first entry of the
// sorted order whose running weight reaches it.
RAPID_HOST_DEVICE inline uint64_t nucleus_target(float top_p, uint64_t z) {
  const double t = ceil(double(top_p) * double(z));
  return t < 1.0 ? 1 : t >= double(z) ? z : uint64_t(t);
}

}  // namespace rapid
