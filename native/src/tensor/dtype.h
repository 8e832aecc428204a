// Element types of checkpoint tensors and portable scalar conversions between f16/bf16 and f32.
// Kernels use their own SIMD conversions (F16C); these are the reference and the fallback.
#pragma once
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rapid {

enum class DType : uint8_t { F32, F16, BF16, F64, I8, U8, I16, U16, I32, U32, I64, U64, BOOL, F8_E4M3, F8_E5M2 };

// Bytes per element.
inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: case DType::U64: return 8;
    case DType::F32: case DType::I32: case DType::U32: return 4;
    case DType::F16: case DType::BF16: case DType::I16: case DType::U16: return 2;
    case DType::I8: case DType::U8: case DType::BOOL: case DType::F8_E4M3: case DType::F8_E5M2: return 1;
  }
  return 0;
}

// The safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F64: return "F64";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::I16: return "I16";
    case DType::U16: return "U16";
    case DType::I32: return "I32";
    case DType::U32: return "U32";
    case DType::I64: return "I64";
    case DType::U64: return "U64";
    case DType::BOOL: return "BOOL";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::F8_E5M2: return "F8_E5M2";
  }
  return "?";
}

// Parses a safetensors dtype name; false if unknown.
inline bool try_parse_dtype(std::string_view s, DType& out) {
  static constexpr DType all[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8,
                                  DType::U8, DType::I16, DType::U16, DType::I32, DType::U32,
                                  DType::I64, DType::U64, DType::BOOL, DType::F8_E4M3, DType::F8_E5M2};
  for (DType t : all)
    if (s == dtype_name(t)) { out = t; return true; }
  return false;
}

// Parses a safetensors dtype name; throws std::runtime_error("unknown dtype X") if unknown.
inline DType parse_dtype(std::string_view s) {
  DType t;
  if (!try_parse_dtype(s, t)) throw std::runtime_error("unknown dtype " + std::string(s));
  return t;
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      do { man <<= 1; ++e; } while (!(man & 0x400));
      u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp + 112) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, with overflow to inf and gradual underflow.
inline uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return uint16_t(sign | 0x7e00);        // NaN
  if (absu >= 0x477ff000u) return uint16_t(sign | 0x7c00);       // rounds to >= 65520: inf
  if (absu < 0x38800000u) {                                      // below min normal: subnormal
    if (absu < 0x33000000u) return uint16_t(sign);               // < 2^-25 rounds to 0
    uint32_t e = absu >> 23;
    uint32_t man = (absu & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;                                    // 14..24 (+ 13 for f16 mantissa)
    uint32_t half = 1u << (shift - 1);
    uint32_t r = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = absu - 0x38000000u;                               // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1);
  return uint16_t(sign | (r >> 13));
}

// Reads element i of a float tensor (F32/F16/BF16/F64) as float; other dtypes throw.
inline float load_float(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::F32: { float f; std::memcpy(&f, static_cast<const uint8_t*>(p) + 4 * i, 4); return f; }
    case DType::F16: { uint16_t h; std::memcpy(&h, static_cast<const uint8_t*>(p) + 2 * i, 2); return f16_to_f32(h); }
    case DType::BF16: { uint16_t h; std::memcpy(&h, static_cast<const uint8_t*>(p) + 2 * i, 2); return bf16_to_f32(h); }
    case DType::F64: { double d; std::memcpy(&d, static_cast<const uint8_t*>(p) + 8 * i, 8); return float(d); }
    default: throw std::runtime_error(std::string("load_float: not a float dtype: ") + dtype_name(t));
  }
}

inline bool is_float_dtype(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
}

}  // namespace rapid
