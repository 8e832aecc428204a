// Internal interface between the packed-GEMM driver (cpu/gemm_packed.cpp) and its per-ISA register
// tiles (cpu/gemm_packed_x86.cpp). Not for use outside native/src/cpu.
#pragma once
#include <cstdint>
#include "tensor/dtype.h"

namespace rapid::gemmk {

// One register tile: y[i*ldy + j] (i < m, j < 16) = acc ? y[...] : 0, then += Σ_{k<kc} xp[k*mr + i] · w[k*16 + j]
// as one fma chain per output in k order. xp: [kc][mr] packed activations; w: [kc][16] panel slice of
// dtype `dt` (F32, BF16 or F16). m in [1, mr].
using TileFn = void (*)(const float* xp, int m, const void* w, DType dt, int64_t kc, float* y, int64_t ldy, bool acc);

struct Tiles {
  const char* name;
  int mr;  // activation rows per tile
  TileFn tile;
};

#if defined(__x86_64__)
const Tiles& avx512_tiles();
const Tiles& avx2_tiles();
#endif

}  // namespace rapid::gemmk
