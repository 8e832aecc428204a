// Internal interface between the matmul driver (cpu/matmul.cpp) and the per-ISA kernel files
// (cpu/kernels_scalar.cpp, cpu/kernels_x86.cpp, cpu/kernels_neon.cpp). Not for use outside native/src/cpu.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include "tensor/weight.h"

namespace rapid {
struct InterleavedRows;
}

namespace rapid::kern {

// Activations quantized for the Fast path (int8 per block, like llama.cpp q8).
// Layout of q depends on the weight bits so that the kernel needs no shuffles (see xq_perm).
struct XQuant {
  int8_t* q = nullptr;   // [n, K] permuted int8
  float* d = nullptr;    // [n, nblk] block scales (x ≈ d * q)
  float* dT = nullptr;   // [nblk, ldd] the same scales block-major, rows zero padded (ldd = n rounded up to 4)
  int64_t ldd = 0;
  float* sx = nullptr;   // [n, ngp] exact f32 Σx per weight group, zero padded to ngp
  float* sxT = nullptr;  // [ngp, ldd] the same sums group-major, zero padded
  int64_t K = 0, nblk = 0, ngp = 0;
  int xb = 64;           // elements per x block (natural order)
  int perm = 0;          // 0 natural, 32 or 64: evens then odds within each chunk of `perm`
  // Batched GEMM only (Kernels::gemm_rows): [ceil(n/16)][K/4][16] dwords of q, one activation row per
  // lane; lanes past n are zero. For 8-bit weights the bytes are x + 128 (sign bits flipped, see
  // kGemmXFlip8): vpdpbusd's unsigned operand.
  uint32_t* xp = nullptr;
};

// Activation rows from which the driver takes Kernels::gemm_rows (when the family has it) over
// fast_rows; both give bit-identical results. Measured on Zen4, 4864x896 4-bit: at 8 rows (half the
// lanes idle) 0.89x the 4-row tiles, at 10 rows 1.7x, at 16 rows 1.5x the VNNI 4-row tiles.
constexpr int64_t kGemmMinRows = 9;
// XOR applied to each packed x dword for 8-bit weights (x + 128 as unsigned bytes); 4-bit packs x as is.
constexpr uint32_t kGemmXFlip8 = 0x80808080u;

// Fast layout parameters for a weight.
inline void xq_layout(const Weight& W, int& xb, int& perm) {
  xb = W.group == 32 ? 32 : 64;
  perm = W.bits == 4 ? (W.group == 32 ? 32 : 64) : 0;
}

// Entry points implemented per ISA.
struct Kernels {
  const char* name;
  // Quantizes one activation row x[K] into q/d/sx (row slices of an XQuant).
  void (*quantize_x)(const float* x, int64_t K, int xb, int perm, int group, int64_t ngp, int8_t* q,
                     float* d, float* sx);
  // y[c*ldy + r] for rows r in [r0, r1) and x rows c in [0, n): Fast path, W Affine bits 4 or 8.
  void (*fast_rows)(const Weight& W, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y,
                    int64_t ldy, float* scratch);
  // Converts weight row r to f32 (any Weight kind); returns out (or a direct pointer for F32 Dense).
  const float* (*row_f32)(const Weight& W, int64_t r, float* out);
  // y[c*ldy + r] = dot(w_r, x_c) for R (1..2) weight rows and n x rows, length K.
  void (*dot_rows)(const float* const* w, int R, const float* x, int64_t ldx, int64_t n, int64_t K,
                   float* y, int64_t ldy);
  // Exact y[r] = W[r,:] · x for r in [r0, r1), one activation row (decode). scratch: 2*W.in floats.
  void (*gemv_exact)(const Weight& W, const float* x, int64_t r0, int64_t r1, float* y, float* scratch);
  // Reads n uint64 words (bandwidth probe); returns a checksum so the reads are not elided.
  uint64_t (*read_sum)(const uint64_t* p, size_t n);
  // Batched GEMM (decode of 9+ sequences, prefill), W Affine 4- or 8-bit, xq.xp packed: same contract
  // and results as fast_rows; nullptr where the family has none.
  void (*gemm_rows)(const Weight& W, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y, int64_t ldy,
                    float* scratch);
  // Batch-1 GEMV of a 4-bit weight over its interleaved copy (cpu/gemv_interleaved.h): y[r] for r in
  // [r0, r1), the same results as fast_rows with n = 1; nullptr where the family has none.
  void (*gemv4_interleaved)(const InterleavedRows& L, const XQuant& xq, int64_t r0, int64_t r1, float* y);
  // The same for n >= 2 activation rows (decode batches and prefill): y[c*ldy + r], the same results as
  // fast_rows and gemm_rows; xq.xp unused. nullptr where the family has none.
  void (*gemm4_interleaved)(const InterleavedRows& L, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y,
                            int64_t ldy);
  // Bytes ahead of its stream that gemv4_interleaved prefetches while g_prefetch_rows > 0 (0: it never does).
  size_t gemv4_prefetch_bytes = 0;
  // The same two for an 8-bit weight's copy (8-row blocks): the same results as fast_rows (gemv8, fast8)
  // and, where the family has it, gemm_rows. nullptr where the family has none (8-bit keeps its rows).
  void (*gemv8_interleaved)(const InterleavedRows& L, const XQuant& xq, int64_t r0, int64_t r1, float* y) = nullptr;
  void (*gemm8_interleaved)(const InterleavedRows& L, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y,
                            int64_t ldy) = nullptr;

  // The interleaved kernels of a `bits`-bit weight's copy (the 4- or the 8-bit pair); nullptr where none.
  auto gemv_interleaved(int bits) const { return bits == 8 ? gemv8_interleaved : gemv4_interleaved; }
  auto gemm_interleaved(int bits) const { return bits == 8 ? gemm8_interleaved : gemm4_interleaved; }
};

// Rows a GEMV prefetches ahead (software prefetch). Intel server cores need it to reach their
// bandwidth; AMD's hardware prefetchers do not. Set once by the driver (env RAPID_PREFETCH_ROWS).
extern int g_prefetch_rows;

const Kernels& scalar_kernels();
#if defined(__x86_64__)
const Kernels& avx2_kernels();
const Kernels& avx512_vnni_kernels();
#endif
#if defined(__aarch64__)
const Kernels& neon_kernels();
const Kernels& neon_dotprod_kernels();
#endif
bool cpu_has_avx2_fma_f16c();
// AVX-512 F/BW/VL + VNNI, with the OS saving ZMM and opmask state (XCR0).
bool cpu_has_avx512_vnni();
// ARMv8.2 dot product instructions (sdot/udot): HWCAP_ASIMDDP on Linux, FEAT_DotProd on macOS.
bool cpu_has_dotprod();

// Bytes of scratch fast_rows needs per thread.
inline size_t fast_scratch_floats(const Weight& W) {
  int64_t ng = W.in / W.group;
  // gemm_rows: 8 rows of codes (K bytes each), their scales and biases, an 8x16 tile out (4-bit); the
  // 8-bit tiles' 2 rows of K bytes, their lane sums and padded scales and biases fit in the same.
  const int64_t gemm = 8 * (W.in / 4 + 2 * ng + 16) + 16;
  return size_t(std::max<int64_t>((ng + 8) * 8 * 4, gemm) + 64);
}

}  // namespace rapid::kern
