// The bf16 tensor-core step every mma.sync kernel shares (m16n8k16, f32 accumulate) and the bf16 pair packing of
// its operands. Fragment layout (g = lane / 4, t = lane % 4): A a0 (row g, k 2t..2t+1), a1 (row g+8, same k),
// a2 (row g, k 2t+8..2t+9), a3 (row g+8, same k); B b0 (k 2t..2t+1, col g), b1 (k 2t+8..2t+9, col g);
// C c0/c1 (row g, cols 2t, 2t+1), c2/c3 (row g+8, same cols).
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

namespace rapid::cuda {

// Not volatile: a pure function of its operands, so independent chains (groups of a batch) may interleave.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two 4-bit codes of word u as a bf16 pair (128 + n_lo, 128 + n_hi), exact (the code under bf16 128's exponent):
// nibbles `shift` and `shift + 16`, so shift 4p gives the pair (p, p + 4) of the word's 8 codes.
__device__ __forceinline__ uint32_t code_pair_128(uint32_t u, int shift) { return ((u >> shift) & 0x000F000Fu) | 0x43004300u; }

// N consecutive 32-bit code words at p (aligned to min(N, 4) words): one 4-, 8- or 16-byte load per 4 words.
template <int N>
__device__ __forceinline__ void load_words(const uint32_t* p, uint32_t (&w)[N]) {
  if constexpr (N == 1) {
    w[0] = __ldg(p);
  } else if constexpr (N == 2) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = v.x, w[1] = v.y;
  } else {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  }
}

// (lo, hi) rounded to bf16 (nearest even), lo in the low half: one operand register.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Four 8x8 bf16 matrices from shared memory: lane l gives the address of row l % 8 of matrix l / 8 (16 bytes) and
// receives, of each, row l / 4, cols 2 (l % 4) and 2 (l % 4) + 1: an A fragment quarter, or a B fragment of a [n][k]
// tile.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// The same, transposed: each lane receives (row 2 (l % 4), col l / 4) and (row 2 (l % 4) + 1, col l / 4): an mma B
// fragment of a [k][n] tile.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

}  // namespace rapid::cuda
