// Batched (2+ activation rows) Fast matmul of a 4-bit affine weight over its interleaved copy
// (cpu/gemv_interleaved.h), AVX-512 VNNI: the layout the batch-1 GEMV reads, so decode at any batch size
// streams one copy of the weights. Included by cpu/kernels_x86.cpp after gemv_interleaved_x86_impl.h
// inside its AVX-512 target region only (no include guard; uses il_load16 and kIlAll).
//
// One zmm lane per weight row (16 per block) and one accumulator set per activation row: each 64-byte
// code load (one dword of 16 rows) is split into its low and high nibbles once and multiplied against a
// broadcast activation dword of each of up to kIlCols rows, so a block is read from memory once per step
// and from L1/L2 once per column tile.
//
// Arithmetic per output is gemv4_il's (and gemv4_h's): per (unit, half) the exact int32 sum of code x
// activation (here lo and hi nibbles added as integers, there the hi nibbles' multiples of 16 shifted
// back: the same integer), the same f32 s·d products, the same FMA order (units, then the biases by group
// into the first half) and the same lo + hi, so results are bit-identical to every kernel and batch size.

// Activation rows per register tile: 4 accumulators each (2 int32 halves, 2 f32 halves), 24 of 32 zmm.
// Kernel level (Zen4, 16 rows) 4 to 8 give 346-357 GFLOP/s: the dot products bound it, not the tile.
constexpr int kIlCols = 6;
// Blocks ahead that the first column tile prefetches, into L2 (a block is 8-43 KB for the 0.5B shape: L1
// cannot hold two). End to end, 16 sequences, 1 thread: 1 block into L1 236-240 tok/s, 2 into L2 262-276,
// none 216 (the first tile of each block waits on DRAM).
constexpr int64_t kIlPrefetchBlocks = 2;

// The 16 weight rows of block `blk` · activation rows c0..c0 + C into y[(c0 + c) * ldy + i], y pointing at
// the block's first output row, lanes in `live` only. pf: the next block, prefetched meanwhile; or nullptr.
template <int UNIT, int UPG, int C>
void gemm4_il_tile(const InterleavedRows& L, const uint8_t* blk, const XQuant& xq, int64_t c0, const uint8_t* pf,
                   float* y, int64_t ldy, __mmask16 live) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const int64_t ng = L.in / L.group;
  const size_t scale_bytes = size_t(kInterleaveRows) * dtype_size(L.dtype);
  const int8_t* xr[C];  // [C] activation rows (permuted int8, xq.q)
  const float* dr[C];   // [C] their block scales
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    xr[c] = xq.q + (c0 + c) * L.in;
    dr[c] = xq.d + (c0 + c) * xq.nblk;
  }
  __m512 flo[C], fhi[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) flo[c] = fhi[c] = _mm512_setzero_ps();
  int64_t u = 0;
  for (int64_t g = 0; g < ng; ++g) {
    const uint8_t* gp = blk + size_t(g) * L.group_bytes;
    // A later block streams into L2 while this one computes (first column tile only; see kIlPrefetchBlocks).
    if (pf != nullptr)
      for (size_t l = 0; l < L.group_bytes; l += 64) _mm_prefetch(reinterpret_cast<const char*>(pf + size_t(g) * L.group_bytes + l), _MM_HINT_T1);
    const __m512 s = il_load16(gp + L.code_bytes, L.dtype);
    for (int h = 0; h < UPG; ++h, ++u) {
      const uint8_t* cu = gp + size_t(h) * UNIT * 8;
      __m512i a0[C], a1[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) a0[c] = a1[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int j = 0; j < UNIT / 8; ++j) {
        const __m512i v = _mm512_load_si512(reinterpret_cast<const void*>(cu + j * 64));
        const __m512i vl = _mm512_and_si512(v, m4), vh = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          // Low nibbles pair with the unit's evens, high with its odds (il_unit's layout); g64: dwords 0-3
          // are half 0, 4-7 half 1; g32: the evens are half 0, the odds half 1.
          const int8_t* x = xr[c] + u * UNIT;
          const __m512i xe = il_bcast(x + 4 * j), xo = il_bcast(x + UNIT / 2 + 4 * j);
          if constexpr (UNIT == 64) {
            __m512i& a = j < 4 ? a0[c] : a1[c];
            a = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(a, vl, xe), vh, xo);
          } else {
            a0[c] = _mm512_dpbusd_epi32(a0[c], vl, xe);
            a1[c] = _mm512_dpbusd_epi32(a1[c], vh, xo);
          }
        }
      }
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m512 m = _mm512_mul_ps(s, _mm512_set1_ps(dr[c][u]));
        flo[c] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(kIlAll, a0[c]), m, flo[c]);
        fhi[c] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(kIlAll, a1[c]), m, fhi[c]);
      }
    }
  }
  for (int64_t g = 0; g < ng; ++g) {
    const __m512 b = il_load16(blk + size_t(g) * L.group_bytes + L.code_bytes + scale_bytes, L.dtype);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) flo[c] = _mm512_fmadd_ps(b, _mm512_set1_ps(xq.sx[(c0 + c) * xq.ngp + g]), flo[c]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + (c0 + c) * ldy, live, _mm512_add_ps(flo[c], fhi[c]));
}

// y[c * ldy + r] for r in [r0, r1) and c in [0, n): whole 16-row blocks, rows outside the range masked
// off at the store; each block swept over the activation rows kIlCols at a time.
template <int UNIT, int UPG>
void gemm4_il(const InterleavedRows& L, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  using TileFn = void (*)(const InterleavedRows&, const uint8_t*, const XQuant&, int64_t, const uint8_t*, float*, int64_t,
                          __mmask16);
  static const auto fns = []<int... I>(std::integer_sequence<int, I...>) {
    return std::array<TileFn, kIlCols>{gemm4_il_tile<UNIT, UPG, I + 1>...};
  }(std::make_integer_sequence<int, kIlCols>{});
  const int64_t b_end = (r1 + kInterleaveRows - 1) / kInterleaveRows;
  for (int64_t b = r0 / kInterleaveRows; b < b_end; ++b) {
    const uint8_t* blk = L.data + size_t(b) * L.block_bytes;
    const int64_t base = b * kInterleaveRows;
    const int64_t lo_row = r0 > base ? r0 - base : 0, hi_row = r1 - base < kInterleaveRows ? r1 - base : kInterleaveRows;
    const __mmask16 live = __mmask16(((1u << hi_row) - 1u) & ~((1u << lo_row) - 1u));
    for (int64_t c0 = 0; c0 < n; c0 += kIlCols) {
      const int C = n - c0 < kIlCols ? int(n - c0) : kIlCols;
      const bool pf = c0 == 0 && b + kIlPrefetchBlocks < b_end;
      fns[size_t(C - 1)](L, blk, xq, c0, pf ? blk + kIlPrefetchBlocks * L.block_bytes : nullptr, y + base, ldy, live);
    }
  }
}

void gemm4_interleaved(const InterleavedRows& L, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y,
                       int64_t ldy) {
  if (L.group == 32) gemm4_il<32, 1>(L, xq, n, r0, r1, y, ldy);
  else if (L.group == 64) gemm4_il<64, 1>(L, xq, n, r0, r1, y, ldy);
  else gemm4_il<64, 2>(L, xq, n, r0, r1, y, ldy);
}
