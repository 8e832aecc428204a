// Conversions between f32 activations and the KV cache's stored types. Stores run once per new token
// (portable code, round-to-nearest-even, identical on every CPU); loads run for every key and value
// attention reads, so they have an AVX2+F16C path that yields the very same f32 values as the portable one.
#pragma once
#include <cstdint>
#include "kv/kv_dtype.h"

namespace rapid::kv {

uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);

// One token's slot: src [n_heads, hd] f32 → dst [n_heads, hd] of type t; for int8 also scales [n_heads]
// (f16, absmax / 127 of each head's row, so a code of ±127 is the row's largest magnitude).
void store_slot(KvDtype t, const float* src, uint8_t* dst, uint16_t* scales, int n_heads, int hd);

// True when load_row (and attention's fused value loads) use AVX2+F16C.
bool simd_loads();

// One head's row of type t back to f32: src [hd] (scale: its int8 scale) → dst [hd].
void load_row(KvDtype t, const uint8_t* src, const uint16_t* scale, float* dst, int hd);

}  // namespace rapid::kv
