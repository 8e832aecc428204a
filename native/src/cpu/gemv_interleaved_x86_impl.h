// Batch-1 decode GEMV of a 4-bit affine weight over its interleaved copy (cpu/gemv_interleaved.h),
// AVX-512 VNNI. Included by cpu/kernels_x86.cpp inside its AVX-512 target region only (no include guard;
// expects <immintrin.h>, cpu/kernels.h and cpu/gemv_interleaved.h).
//
// One zmm lane per weight row: each 64-byte load holds one code dword (8 nibbles) of 16 rows, and the
// activation's matching dwords are broadcast (vpdpbusd's embedded broadcast), so 16 rows' dot products
// need no horizontal sums. The high nibbles are used in place (v & 0xF0 = 16 q): their int32 sums are
// exact multiples of 16, shifted back once per unit.
//
// Arithmetic per output row is exactly gemv4_h's and fast4_h's: the same exact int32 sums per (unit,
// half) — g64/g128: elements [0, 32) and [32, 64) of the unit; g32: even and odd elements —, the same
// f32 products s·d, the same FMA order (units, then biases by group into the first half) and the same
// final lo + hi, so results are bit-identical to every other kernel and any batch size.

constexpr __mmask16 kIlAll = 0xFFFF;

// 16 scales or biases of one (block, group) as f32. (maskz forms: GCC 12 flags the plain intrinsics'
// _mm512_undefined pass-through as maybe-uninitialized.)
inline __m512 il_load16(const uint8_t* p, DType t) {
  const __mmask16 all = kIlAll;
  if (t == DType::BF16)
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(
        all, _mm512_maskz_cvtepu16_epi32(all, _mm256_load_si256(reinterpret_cast<const __m256i*>(p))), 16));
  if (t == DType::F16) return _mm512_maskz_cvtph_ps(all, _mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_load_ps(reinterpret_cast<const float*>(p));
}

inline __m512i il_bcast(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Exact int32 sums of one unit for 16 rows: lo = half 0, hi = half 1 (see the file comment).
// c: the unit's codes [UNIT/8][16] dwords; x: the unit's activation bytes (evens, then odds).
template <int UNIT>
inline void il_unit(const uint8_t* c, const int8_t* x, __m512i& lo, __m512i& hi) {
  const __m512i m_lo = _mm512_set1_epi8(0x0F), m_hi = _mm512_set1_epi8(char(0xF0));
  const int8_t* xe = x;
  const int8_t* xo = x + UNIT / 2;
  // Two chains per sum (by dword parity) so vpdpbusd's latency overlaps.
  __m512i a[4][2];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) a[k][0] = a[k][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int j = 0; j < UNIT / 8; ++j) {
    const __m512i v = _mm512_load_si512(reinterpret_cast<const void*>(c + j * 64));
    // g64: dwords 0-3 are elements 0..31 (half 0), 4-7 elements 32..63; g32: lo nibbles are the evens.
    const int k = UNIT == 64 && j >= 4 ? 2 : 0;
    a[k][j & 1] = _mm512_dpbusd_epi32(a[k][j & 1], _mm512_and_si512(v, m_lo), il_bcast(xe + 4 * j));
    a[k + 1][j & 1] = _mm512_dpbusd_epi32(a[k + 1][j & 1], _mm512_and_si512(v, m_hi), il_bcast(xo + 4 * j));
  }
  const __m512i s0 = _mm512_add_epi32(a[0][0], a[0][1]), s1 = _mm512_add_epi32(a[1][0], a[1][1]);
  if constexpr (UNIT == 64) {
    const __m512i s2 = _mm512_add_epi32(a[2][0], a[2][1]), s3 = _mm512_add_epi32(a[3][0], a[3][1]);
    lo = _mm512_add_epi32(s0, _mm512_maskz_srai_epi32(kIlAll, s1, 4));
    hi = _mm512_add_epi32(s2, _mm512_maskz_srai_epi32(kIlAll, s3, 4));
  } else {
    lo = s0;
    hi = _mm512_maskz_srai_epi32(kIlAll, s1, 4);
  }
}

// The units of one (block, group) into flo, fhi (u: the group's first unit), gemv4_h's FMA order.
template <int UNIT, int UPG>
inline void il_group(const uint8_t* gp, __m512 s, const XQuant& xq, int64_t u, __m512& flo, __m512& fhi) {
  for (int h = 0; h < UPG; ++h, ++u) {
    __m512i lo, hi;
    il_unit<UNIT>(gp + size_t(h) * UNIT * 8, xq.q + u * UNIT, lo, hi);
    const __m512 m = _mm512_mul_ps(s, _mm512_set1_ps(xq.d[u]));
    flo = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(kIlAll, lo), m, flo);
    fhi = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(kIlAll, hi), m, fhi);
  }
}

// Rows [base, base + 16) of y, those outside [r0, r1) masked off.
inline void il_store(float* y, int64_t base, int64_t r0, int64_t r1, __m512 v) {
  const int64_t lo_row = r0 > base ? r0 - base : 0, hi_row = r1 - base < kInterleaveRows ? r1 - base : kInterleaveRows;
  _mm512_mask_storeu_ps(y + base, __mmask16(((1u << hi_row) - 1u) & ~((1u << lo_row) - 1u)), v);
}

// y[r] for r in [r0, r1), blocks that fit L1: each block's bias term (Σ_g b[r, g] · Σx[g] into the first
// half, one FMA chain in group order after all its units: the order every kernel shares) read back after
// its units.
template <int UNIT, int UPG>
void gemv4_il(const InterleavedRows& L, const XQuant& xq, int64_t r0, int64_t r1, float* y) {
  const int64_t ng = L.in / L.group;
  const size_t bias_at = L.code_bytes + size_t(kInterleaveRows) * dtype_size(L.dtype);  // in a group
  for (int64_t b = r0 / kInterleaveRows; b * kInterleaveRows < r1; ++b) {
    const uint8_t* blk = L.data + size_t(b) * L.block_bytes;
    __m512 flo = _mm512_setzero_ps(), fhi = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; ++g) {
      const uint8_t* gp = blk + size_t(g) * L.group_bytes;
      il_group<UNIT, UPG>(gp, il_load16(gp + L.code_bytes, L.dtype), xq, g * UPG, flo, fhi);
    }
    for (int64_t g = 0; g < ng; ++g)
      flo = _mm512_fmadd_ps(il_load16(blk + size_t(g) * L.group_bytes + bias_at, L.dtype), _mm512_set1_ps(xq.sx[g]), flo);
    il_store(y, b * kInterleaveRows, r0, r1, _mm512_add_ps(flo, fhi));
  }
}

// Blocks past this many bytes (in > 1792 at g64) take gemv4_il_deferred: past L1, gemv4_il's walk back
// and FMA chain after each block held a down projection (4864 wide, 43 KB blocks) to two thirds of a
// gate's rate; under it, gemv4_il is the faster (the deferred chain's stores cost 7% on a gate).
constexpr size_t kIlDeferBytes = size_t(16) << 10;

// Groups whose biases gemv4_il_deferred keeps as f32 while the codes stream (two blocks', 16 KB of stack);
// groups past it are read back from the block.
constexpr int64_t kIlBiasGroups = 128;

// gemv4_il for blocks past L1, the same FMAs in the same order per row: a block's bias chain runs inside
// the next block's pass, one FMA per group from the biases kept (L1) as the codes streamed.
template <int UNIT, int UPG>
void gemv4_il_deferred(const InterleavedRows& L, const XQuant& xq, int64_t r0, int64_t r1, float* y) {
  const int64_t ng = L.in / L.group, kept = ng < kIlBiasGroups ? ng : kIlBiasGroups;
  const size_t bias_at = L.code_bytes + size_t(kInterleaveRows) * dtype_size(L.dtype);  // in a group
  __m512 kept_bias[kIlBiasGroups][2];  // [kept groups][block parity] x 16 rows, f32
  // Σx of the kept groups, copied: read through xq, the kept_bias stores would force a reload per group.
  float sxk[kIlBiasGroups];
  for (int64_t g = 0; g < kept; ++g) sxk[g] = xq.sx[g];
  // The previous block: its units summed (plo, phi), its chain through group `kept` run in this block's pass.
  const uint8_t* prev = nullptr;
  int64_t prev_row = 0;
  __m512 plo = _mm512_setzero_ps(), phi = _mm512_setzero_ps();
  // The rest of prev's chain (groups past `kept`, read back), then its 16 rows stored.
  auto finish_prev = [&] {
    for (int64_t g = kept; g < ng; ++g)
      plo = _mm512_fmadd_ps(il_load16(prev + size_t(g) * L.group_bytes + bias_at, L.dtype), _mm512_set1_ps(xq.sx[g]), plo);
    il_store(y, prev_row, r0, r1, _mm512_add_ps(plo, phi));
  };
  int par = 0;
  for (int64_t b = r0 / kInterleaveRows; b * kInterleaveRows < r1; ++b, par ^= 1) {
    const uint8_t* blk = L.data + size_t(b) * L.block_bytes;
    __m512 flo = _mm512_setzero_ps(), fhi = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; ++g) {
      const uint8_t* gp = blk + size_t(g) * L.group_bytes;
      const __m512 s = il_load16(gp + L.code_bytes, L.dtype);
      if (g < kept) {
        kept_bias[g][par] = il_load16(gp + bias_at, L.dtype);
        if (prev != nullptr) plo = _mm512_fmadd_ps(kept_bias[g][par ^ 1], _mm512_set1_ps(sxk[g]), plo);
      }
      il_group<UNIT, UPG>(gp, s, xq, g * UPG, flo, fhi);
    }
    if (prev != nullptr) finish_prev();
    prev = blk;
    prev_row = b * kInterleaveRows;
    plo = flo;
    phi = fhi;
  }
  if (prev == nullptr) return;
  for (int64_t g = 0; g < kept; ++g) plo = _mm512_fmadd_ps(kept_bias[g][par ^ 1], _mm512_set1_ps(sxk[g]), plo);
  finish_prev();
}

template <int UNIT, int UPG>
void gemv4_il_any(const InterleavedRows& L, const XQuant& xq, int64_t r0, int64_t r1, float* y) {
  if (L.block_bytes > kIlDeferBytes) gemv4_il_deferred<UNIT, UPG>(L, xq, r0, r1, y);
  else gemv4_il<UNIT, UPG>(L, xq, r0, r1, y);
}

void gemv4_interleaved(const InterleavedRows& L, const XQuant& xq, int64_t r0, int64_t r1, float* y) {
  if (L.group == 32) gemv4_il_any<32, 1>(L, xq, r0, r1, y);
  else if (L.group == 64) gemv4_il_any<64, 1>(L, xq, r0, r1, y);
  else gemv4_il_any<64, 2>(L, xq, r0, r1, y);
}
