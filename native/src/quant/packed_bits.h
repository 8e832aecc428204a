// The MLX affine bit stream: each row is one little-endian, LSB-first stream; element i occupies
// bits [i*bits, (i+1)*bits). Shared by the quantizer and both kernel sets.
#pragma once
#include <cstdint>

namespace rapid {

// Code i of a packed row (bits <= 8: spans at most 2 bytes).
inline uint32_t packed_code(const uint8_t* row, int64_t i, int bits) {
  const int64_t bit = i * bits;
  uint32_t v = uint32_t(row[bit >> 3]) >> (bit & 7);
  const int have = 8 - int(bit & 7);
  if (have < bits) v |= uint32_t(row[(bit >> 3) + 1]) << have;
  return v & ((1u << bits) - 1);
}

// Sets code i of a zero-initialised packed row.
inline void put_packed_code(uint8_t* row, int64_t i, int bits, uint32_t q) {
  int64_t bit = i * bits;
  for (int b = 0; b < bits; ++b, ++bit)
    if (q >> b & 1) row[bit >> 3] |= uint8_t(1u << (bit & 7));
}

}  // namespace rapid
