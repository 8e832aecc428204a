// The KV cache's element types on the device: stores that write the very bytes kv/kv_convert.cpp's store_slot writes
// (f32 -> f16 / bf16 round to nearest even; int8 with one f16 scale = absmax / 127 per (token, KV head) row), and the
// loads attention widens them back to f32 with (exact widening; int8 one rounded multiply by the row's scale, as the
// CPU's load_row). One element policy per KvDtype, so the kernels are templates over it.
#pragma once
#include <cuda_fp16.h>
#include <cstdint>
#include "cuda/device_math.cuh"
#include "kv/kv_dtype.h"

namespace rapid::cuda {

// kv_convert.cpp's f32_to_f16: IEEE round to nearest even (subnormals and overflow to inf included), NaN -> 0x7e00.
__device__ __forceinline__ uint16_t kv_f16_bits(float f) {
  if (isnan(f)) return uint16_t(0x7e00u | ((__float_as_uint(f) >> 16) & 0x8000u));
  return __half_as_ushort(__float2half_rn(f));
}

// kv_convert.cpp's f32_to_bf16, the same integer formula (a NaN keeps its top bits with the quiet bit set).
__device__ __forceinline__ uint16_t kv_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Four consecutive elements widened to f32 (scale: the int8 row's, unused otherwise). Addresses are aligned to 4
// elements.
struct KvF32 {
  static constexpr KvDtype kType = KvDtype::F32;
  static constexpr int kBytes = 4;
  __device__ static float4 load4(const unsigned char* p, float) { return *reinterpret_cast<const float4*>(p); }
  __device__ static void store(void* base, int64_t i, float x) { static_cast<float*>(base)[i] = x; }
};
struct KvF16 {
  static constexpr KvDtype kType = KvDtype::F16;
  static constexpr int kBytes = 2;
  __device__ static float4 load4(const unsigned char* p, float) {
    const uint2 w = *reinterpret_cast<const uint2*>(p);
    return make_float4(f16_bits_to_float(uint16_t(w.x)), f16_bits_to_float(uint16_t(w.x >> 16)),
                       f16_bits_to_float(uint16_t(w.y)), f16_bits_to_float(uint16_t(w.y >> 16)));
  }
  __device__ static void store(void* base, int64_t i, float x) { static_cast<uint16_t*>(base)[i] = kv_f16_bits(x); }
};
struct KvBF16 {
  static constexpr KvDtype kType = KvDtype::BF16;
  static constexpr int kBytes = 2;
  __device__ static float4 load4(const unsigned char* p, float) {
    const uint2 w = *reinterpret_cast<const uint2*>(p);
    return make_float4(__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u), __uint_as_float(w.y << 16),
                       __uint_as_float(w.y & 0xffff0000u));
  }
  __device__ static void store(void* base, int64_t i, float x) { static_cast<uint16_t*>(base)[i] = kv_bf16_bits(x); }
};
// int8 codes are written a whole (token, head) row at a time (kv_store_i8_row): a code needs its row's scale.
struct KvI8 {
  static constexpr KvDtype kType = KvDtype::I8;
  static constexpr int kBytes = 1;
  __device__ static float4 load4(const unsigned char* p, float s) {
    const char4 c = *reinterpret_cast<const char4*>(p);
    return make_float4(__fmul_rn(float(c.x), s), __fmul_rn(float(c.y), s), __fmul_rn(float(c.z), s),
                       __fmul_rn(float(c.w), s));
  }
};

// The f16 scale of a pool whose scales are [slots, n_kv] u16, read as the aligned 32-bit word holding it: the word
// index (i / 2) and the shift of scale i within it (cp.async copies 4 bytes at least).
__device__ __forceinline__ int64_t kv_scale_word(int64_t i) { return i >> 1; }
__device__ __forceinline__ int kv_scale_shift(int64_t i) { return int(i & 1) * 16; }
__device__ __forceinline__ float kv_scale_of(uint32_t word, int shift) {
  return f16_bits_to_float(uint16_t(word >> shift));
}

// Most values of a head row one lane holds in kv_store_i8_row (head_dim <= 256, as attention allows); wide_attention's
// rows (head_dim <= 512) are stored with PerLane = 2 * kKvRowPerLane.
constexpr int kKvRowPerLane = 8;

// One (token, KV head) row of `hd` values into int8 codes [hd] and its f16 scale, by one warp (every lane calls):
// value(d) gives element d. store_slot's rule: scale = f16(min(absmax / 127, 65504)), codes round(x / scale) from
// the rounded scale, clamped to [-127, 127] (max is exact, so the reduction order does not matter).
template <int PerLane = kKvRowPerLane, class F>
__device__ __forceinline__ void kv_store_i8_row(F value, int hd, int8_t* codes, uint16_t* scale, int lane) {
  float x[PerLane];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < PerLane; ++i) {
    const int d = lane + 32 * i;
    x[i] = d < hd ? value(d) : 0.0f;
    amax = fmaxf(amax, fabsf(x[i]));
  }
  amax = warp_max(amax);
  const uint16_t s16 = kv_f16_bits(fminf(__fdiv_rn(amax, 127.0f), 65504.0f));
  const float s = f16_bits_to_float(s16);
  const float inv = s > 0.0f ? __fdiv_rn(1.0f, s) : 0.0f;
  if (lane == 0) *scale = s16;
#pragma unroll
  for (int i = 0; i < PerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) codes[d] = int8_t(fminf(fmaxf(rintf(__fmul_rn(x[i], inv)), -127.0f), 127.0f));
  }
}

}  // namespace rapid::cuda
