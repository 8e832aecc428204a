#include "kv/kv_convert.h"
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include "layers/vec_math.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rapid::kv {

// F. Giesen's float_to_half_fast3_rtne: exact round-to-nearest-even, as F16C's _cvtps_ph rounds.
uint16_t f32_to_f16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint16_t o;
  if (u >= (127u + 16u) << 23) {
    o = u > 0x7f800000u ? 0x7e00 : 0x7c00;  // NaN stays NaN; too large is inf
  } else if (u < 113u << 23) {  // subnormal or zero as f16: let the FPU round at 2^-24
    const float d = std::bit_cast<float>(u) + 0.5f;
    o = uint16_t(std::bit_cast<uint32_t>(d) - std::bit_cast<uint32_t>(0.5f));
  } else {
    const uint32_t odd = (u >> 13) & 1u;
    u += (uint32_t(15 - 127) << 23) + 0xfffu + odd;
    o = uint16_t(u >> 13);
  }
  return uint16_t(o | (sign >> 16));
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float v = float(m) * 0x1p-24f;  // exact: m < 2^10
    return sign ? -v : v;
  }
  const uint32_t bits = e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112u) << 23) | (m << 13));
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // keep NaN a NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

void store_slot(KvDtype t, const float* src, uint8_t* dst, uint16_t* scales, int n_heads, int hd) {
  const int64_t n = int64_t(n_heads) * hd;
  switch (t) {
    case KvDtype::F32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case KvDtype::F16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvDtype::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvDtype::I8:
      for (int h = 0; h < n_heads; ++h) {
        const float* x = src + int64_t(h) * hd;
        float amax = 0;
        for (int d = 0; d < hd; ++d) amax = std::max(amax, std::fabs(x[d]));
        // The scale is rounded to f16 first and the codes are computed from that rounded scale.
        const uint16_t s16 = f32_to_f16(std::min(amax / 127.0f, 65504.0f));
        scales[h] = s16;
        const float s = f16_to_f32(s16);
        const float inv = s > 0 ? 1.0f / s : 0.0f;
        int8_t* q = reinterpret_cast<int8_t*>(dst) + int64_t(h) * hd;
        for (int d = 0; d < hd; ++d) q[d] = int8_t(std::clamp(std::nearbyint(x[d] * inv), -127.0f, 127.0f));
      }
      return;
  }
}

namespace {

void load_scalar(KvDtype t, const uint8_t* src, const uint16_t* scale, float* dst, int hd) {
  switch (t) {
    case KvDtype::F32:
      std::memcpy(dst, src, size_t(hd) * sizeof(float));
      return;
    case KvDtype::F16:
    case KvDtype::BF16:
      for (int d = 0; d < hd; ++d) {
        uint16_t h;
        std::memcpy(&h, src + 2 * d, 2);
        dst[d] = t == KvDtype::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    case KvDtype::I8: {
      const float s = f16_to_f32(*scale);
      const int8_t* q = reinterpret_cast<const int8_t*>(src);
      for (int d = 0; d < hd; ++d) dst[d] = float(q[d]) * s;
      return;
    }
  }
}

#if defined(__x86_64__)
// Every conversion here is exact (f16/bf16 widen, int8 → f32) and the int8 scaling one rounded multiply, so
// the results equal load_scalar's bit for bit.
__attribute__((target("avx2,fma,f16c"))) void load_avx2(KvDtype t, const uint8_t* src, const uint16_t* scale, float* dst,
                                                         int hd) {
  int d = 0;
  switch (t) {
    case KvDtype::F32:
      std::memcpy(dst, src, size_t(hd) * sizeof(float));
      return;
    case KvDtype::F16:
      for (; d + 8 <= hd; d += 8)
        _mm256_storeu_ps(dst + d, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * d))));
      break;
    case KvDtype::BF16:
      for (; d + 8 <= hd; d += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * d)));
        _mm256_storeu_ps(dst + d, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
      }
      break;
    case KvDtype::I8: {
      const __m256 s = _mm256_set1_ps(f16_to_f32(*scale));
      for (; d + 8 <= hd; d += 8) {
        const __m256i w = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + d)));
        _mm256_storeu_ps(dst + d, _mm256_mul_ps(_mm256_cvtepi32_ps(w), s));
      }
      break;
    }
  }
  if (d < hd) {
    float tail[8];
    const size_t eb = kv_elem_bytes(t);
    load_scalar(t, src + size_t(d) * eb, scale, tail, hd - d);
    std::copy_n(tail, hd - d, dst + d);
  }
}
#endif

}  // namespace

bool simd_loads() {
#if defined(__x86_64__)
  static const bool f16c = vec::simd_enabled() && __builtin_cpu_supports("f16c");
  return f16c;
#else
  return false;
#endif
}

void load_row(KvDtype t, const uint8_t* src, const uint16_t* scale, float* dst, int hd) {
#if defined(__x86_64__)
  if (simd_loads()) return load_avx2(t, src, scale, dst, hd);
#endif
  load_scalar(t, src, scale, dst, hd);
}

}  // namespace rapid::kv
