// Batch-1 GEMV and batched GEMM of a 4-bit affine weight over its interleaved copy (cpu/gemv_interleaved.h),
// AVX2 without VNNI. Included by cpu/kernels_x86.cpp inside its AVX2 target region only (no include guard;
// expects <immintrin.h>, cpu/kernels.h and cpu/gemv_interleaved.h).
//
// A 64-byte line of the copy (one code dword of the block's 16 rows) is two ymm, rows 0-7 and 8-15, one
// int32 lane per row, so no horizontal sums (gemv4_h spends three vphaddw per 4 rows and unit). vpmaddubsw
// multiplies the unsigned nibbles by the broadcast activation dword into int16 pairs; they are summed in
// int16 over a (unit, half) — at most 16 products of |15 x 128| = 30720 per lane: no saturation, no wrap,
// as in gemv4_h — and vpmaddwd adds each pair into int32. Those are the exact integers of every kernel
// (g64/g128: elements [0, 32) and [32, 64) of the unit; g32: evens and odds), and the f32 part is theirs
// (s·d products, FMA order: units, then biases by group into the first half; lo + hi last), so results are
// bit-identical to the row kernels, the AVX-512 family and any batch size.

// Bytes ahead of its stream that the GEMV prefetches (off with RAPID_PREFETCH_ROWS=0). Zen3, 24
// DRAM-resident 0.5B-shaped layers (kt streambench): 14 -> 19-21 GB/s at one thread, 21 -> 30-33 at two,
// the read probe's rate; 1-3 KB ahead gained less, 6-8 KB less again.
constexpr size_t kIl2PrefetchBytes = 4096;

// Rows per ymm: a 16-row block is two halves.
constexpr int kIl2Rows = 8;

// 8 scales or biases of one (block, group, half) as f32.
inline __m256 il2_load8(const uint8_t* p, DType t) {
  if (t == DType::BF16)
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  if (t == DType::F16) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
}

// Pins a running int16 sum to a register at this point of its chain. Without it GCC reassociates the GEMM
// tiles' chains into all products first and a tree of adds, spilling the products (69 ymm stores a call).
inline void il2_keep(__m256i& a) { __asm__("" : "+x"(a)); }

inline __m256i il2_bcast(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Lanes [lo, hi) of v into y[0..8) (a full half is a plain store: vmaskmovps is slow on AMD).
inline void il2_store(float* y, int lo, int hi, __m256 v) {
  if (lo == 0 && hi == kIl2Rows) {
    _mm256_storeu_ps(y, v);
    return;
  }
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i m = _mm256_and_si256(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(lo - 1)),
                                     _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), idx));
  _mm256_maskstore_ps(y, m, v);
}

// The lanes [lo, hi) of the 8-row half starting at output row h0 that fall in [r0, r1) (lo >= hi: none).
struct Il2Lanes {
  int lo, hi;
};
inline Il2Lanes il2_lanes(int64_t h0, int64_t r0, int64_t r1) {
  return {int(std::clamp<int64_t>(r0 - h0, 0, kIl2Rows)), int(std::clamp<int64_t>(r1 - h0, 0, kIl2Rows))};
}

// int16 pair sums of code dwords [J0, J1) of 8 rows (c: the unit's first line + the half's 32 bytes): low
// nibbles against the unit's evens (xe), high nibbles against its odds (xo), into a (LO) and b (HI).
// Not pinned (il2_keep): so the batch-1 GEMV ran 1.48x faster in cache but ~4% slower from DRAM.
template <int J0, int J1, bool SPLIT>
inline void il2_sums(const uint8_t* c, const int8_t* xe, const int8_t* xo, __m256i& a, __m256i& b) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 8
  for (int j = J0; j < J1; ++j) {
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(c + j * 64));
    const __m256i pe = _mm256_maddubs_epi16(_mm256_and_si256(v, m4), il2_bcast(xe + 4 * j));
    const __m256i po = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), il2_bcast(xo + 4 * j));
    if constexpr (SPLIT) {
      a = _mm256_add_epi16(a, pe);
      b = _mm256_add_epi16(b, po);
    } else {
      a = _mm256_add_epi16(a, _mm256_add_epi16(pe, po));
    }
  }
}

// Exact int32 sums of one unit for the 8 rows of c: lo = half 0, hi = half 1.
template <int UNIT>
inline void il2_unit(const uint8_t* c, const int8_t* x, __m256i& lo, __m256i& hi) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
  if constexpr (UNIT == 64) {  // dwords 0-3: elements 0..31 (half 0), 4-7: 32..63
    il2_sums<0, 4, false>(c, x, x + 32, a, b);
    il2_sums<4, 8, false>(c, x, x + 32, b, a);
  } else {  // the evens are half 0, the odds half 1
    il2_sums<0, 4, true>(c, x, x + 16, a, b);
  }
  lo = _mm256_madd_epi16(a, ones);
  hi = _mm256_madd_epi16(b, ones);
}

// y[r] for r in [r0, r1): both halves of a block in one pass over its lines, biases chained after its units.
template <int UNIT, int UPG>
void gemv4_il2(const InterleavedRows& L, const XQuant& xq, int64_t r0, int64_t r1, float* y) {
  const int64_t ng = L.in / L.group;
  const size_t es = dtype_size(L.dtype), half_sb = size_t(kIl2Rows) * es;
  const size_t bias_at = L.code_bytes + size_t(kInterleaveRows) * es;  // in a group
  const bool pf = g_prefetch_rows > 0;
  for (int64_t b = r0 / kInterleaveRows; b * kInterleaveRows < r1; ++b) {
    const uint8_t* blk = L.data + size_t(b) * L.block_bytes;
    __m256 flo[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, fhi[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t u = 0;
    for (int64_t g = 0; g < ng; ++g) {
      const uint8_t* gp = blk + size_t(g) * L.group_bytes;
      if (pf)  // a prefetch never faults: past the copy's end it is dropped
        for (size_t l = 0; l < L.group_bytes; l += 64)
          _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(gp) + kIl2PrefetchBytes + l), _MM_HINT_T0);
      const __m256 s[2] = {il2_load8(gp + L.code_bytes, L.dtype), il2_load8(gp + L.code_bytes + half_sb, L.dtype)};
      for (int h = 0; h < UPG; ++h, ++u) {
        const __m256 d = _mm256_set1_ps(xq.d[u]);
#pragma GCC unroll 2
        for (int r = 0; r < 2; ++r) {
          __m256i lo, hi;
          il2_unit<UNIT>(gp + size_t(h) * UNIT * 8 + r * 32, xq.q + u * UNIT, lo, hi);
          const __m256 m = _mm256_mul_ps(s[r], d);
          flo[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), m, flo[r]);
          fhi[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), m, fhi[r]);
        }
      }
    }
    for (int64_t g = 0; g < ng; ++g) {
      const uint8_t* bp = blk + size_t(g) * L.group_bytes + bias_at;
      const __m256 sx = _mm256_set1_ps(xq.sx[g]);
      flo[0] = _mm256_fmadd_ps(il2_load8(bp, L.dtype), sx, flo[0]);
      flo[1] = _mm256_fmadd_ps(il2_load8(bp + half_sb, L.dtype), sx, flo[1]);
    }
    const int64_t base = b * kInterleaveRows;
    for (int r = 0; r < 2; ++r) {
      const int64_t h0 = base + r * kIl2Rows;
      const Il2Lanes l = il2_lanes(h0, r0, r1);
      if (l.lo < l.hi) il2_store(y + h0, l.lo, l.hi, _mm256_add_ps(flo[r], fhi[r]));
    }
  }
}

void gemv4_interleaved(const InterleavedRows& L, const XQuant& xq, int64_t r0, int64_t r1, float* y) {
  if (L.group == 32) gemv4_il2<32, 1>(L, xq, r0, r1, y);
  else if (L.group == 64) gemv4_il2<64, 1>(L, xq, r0, r1, y);
  else gemv4_il2<64, 2>(L, xq, r0, r1, y);
}

// Activation rows per register tile of the GEMM: per row one int16 sum and two f32 accumulators.
constexpr int kIl2Cols = 4;
// Blocks ahead that a block's first tile prefetches into L2 (as the AVX-512 GEMM's kIlPrefetchBlocks).
constexpr int64_t kIl2PrefetchBlocks = 2;

// The C activation rows of a GEMM tile from row c0: their int8 values and their block scales.
template <int C>
struct Il2TileRows {
  const int8_t* q[C];  // [C] activation rows (int8, xq.q)
  const float* d[C];   // [C] their block scales
  Il2TileRows(const XQuant& xq, int64_t in, int64_t c0) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      q[c] = xq.q + (c0 + c) * in;
      d[c] = xq.d + (c0 + c) * xq.nblk;
    }
  }
};

// Half r (rows 8r..8r+8) of block `blk` · activation rows c0..c0 + C into y[(c0 + c) * ldy + 8r + i], y
// pointing at the block's first output row, lanes [lo, hi) only. pf: a later block, prefetched meanwhile.
template <int UNIT, int UPG, int C>
void gemm4_il2_tile(const InterleavedRows& L, const uint8_t* blk, int r, const XQuant& xq, int64_t c0, const uint8_t* pf,
                    float* y, int64_t ldy, int lo, int hi) {
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t ng = L.in / L.group;
  const size_t es = dtype_size(L.dtype), half_sb = size_t(kIl2Rows) * es;
  const Il2TileRows<C> tr(xq, L.in, c0);
  __m256 flo[C], fhi[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) flo[c] = fhi[c] = _mm256_setzero_ps();
  int64_t u = 0;
  for (int64_t g = 0; g < ng; ++g) {
    const uint8_t* gp = blk + size_t(g) * L.group_bytes;
    if (pf != nullptr)
      for (size_t l = 0; l < L.group_bytes; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(pf + size_t(g) * L.group_bytes + l), _MM_HINT_T1);
    const __m256 s = il2_load8(gp + L.code_bytes + size_t(r) * half_sb, L.dtype);
    for (int h = 0; h < UPG; ++h, ++u) {
      const uint8_t* cu = gp + size_t(h) * UNIT * 8 + r * 32;
      if constexpr (UNIT == 64) {
        // Half 0 (dwords 0-3) into flo, then half 1 (4-7) into fhi: one int16 sum per row live at a time.
#pragma GCC unroll 2
        for (int k = 0; k < 2; ++k) {
          __m256i a[C];
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) a[c] = _mm256_setzero_si256();
          const __m256i m4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
          for (int j = 4 * k; j < 4 * k + 4; ++j) {
            const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(cu + j * 64));
            const __m256i vl = _mm256_and_si256(v, m4), vh = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c) {
              const int8_t* x = tr.q[c] + u * UNIT;
              a[c] = _mm256_add_epi16(a[c], _mm256_add_epi16(_mm256_maddubs_epi16(vl, il2_bcast(x + 4 * j)),
                                                             _mm256_maddubs_epi16(vh, il2_bcast(x + 32 + 4 * j))));
              il2_keep(a[c]);
            }
          }
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) {
            const __m256 m = _mm256_mul_ps(s, _mm256_set1_ps(tr.d[c][u]));
            __m256& f = k == 0 ? flo[c] : fhi[c];
            f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(a[c], ones)), m, f);
          }
        }
      } else {
        __m256i a[C], b[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) a[c] = b[c] = _mm256_setzero_si256();
        const __m256i m4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(cu + j * 64));
          const __m256i vl = _mm256_and_si256(v, m4), vh = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) {
            const int8_t* x = tr.q[c] + u * UNIT;
            a[c] = _mm256_add_epi16(a[c], _mm256_maddubs_epi16(vl, il2_bcast(x + 4 * j)));
            b[c] = _mm256_add_epi16(b[c], _mm256_maddubs_epi16(vh, il2_bcast(x + 16 + 4 * j)));
            il2_keep(a[c]);
            il2_keep(b[c]);
          }
        }
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m256 m = _mm256_mul_ps(s, _mm256_set1_ps(tr.d[c][u]));
          flo[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(a[c], ones)), m, flo[c]);
          fhi[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(b[c], ones)), m, fhi[c]);
        }
      }
    }
  }
  const size_t bias_at = L.code_bytes + size_t(kInterleaveRows) * es + size_t(r) * half_sb;  // in a group
  for (int64_t g = 0; g < ng; ++g) {
    const __m256 bv = il2_load8(blk + size_t(g) * L.group_bytes + bias_at, L.dtype);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) flo[c] = _mm256_fmadd_ps(bv, _mm256_set1_ps(xq.sx[(c0 + c) * xq.ngp + g]), flo[c]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) il2_store(y + (c0 + c) * ldy + r * kIl2Rows, lo, hi, _mm256_add_ps(flo[c], fhi[c]));
}

// The block walk of both interleaved GEMMs: y[c * ldy + r] for r in [r0, r1) and c in [0, n), each block of
// BlockRows rows (as Halves runs of kIl2Rows) swept over the activation rows Cols at a time; the first tile of a block
// prefetches the block kIl2PrefetchBlocks ahead. tile(blk, half, c0, C, pf, base, lanes): one tile of C <= Cols rows.
// whole(blk, pf, base): all tiles of a block wholly inside [r0, r1) at once, or false to take the halves.
template <int64_t BlockRows, int Halves, int Cols, class Tile, class Whole>
inline void il2_walk(const InterleavedRows& L, int64_t n, int64_t r0, int64_t r1, Tile&& tile, Whole&& whole) {
  static_assert(BlockRows == int64_t(Halves) * kIl2Rows, "a block is whole runs of kIl2Rows");
  const int64_t b_end = (r1 + BlockRows - 1) / BlockRows;
  for (int64_t b = r0 / BlockRows; b < b_end; ++b) {
    const uint8_t* blk = L.data + size_t(b) * L.block_bytes;
    const int64_t base = b * BlockRows;
    const uint8_t* pf = b + kIl2PrefetchBlocks < b_end ? blk + kIl2PrefetchBlocks * L.block_bytes : nullptr;
    if (base >= r0 && base + BlockRows <= r1 && whole(blk, pf, base)) continue;
    for (int h = 0; h < Halves; ++h) {
      const Il2Lanes l = il2_lanes(base + h * kIl2Rows, r0, r1);
      if (l.lo >= l.hi) continue;
      for (int64_t c0 = 0; c0 < n; c0 += Cols) {
        tile(blk, h, c0, n - c0 < Cols ? int(n - c0) : Cols, pf, base, l);
        pf = nullptr;  // the first tile of the block only
      }
    }
  }
}

template <int64_t BlockRows, int Halves, int Cols, class Tile>
inline void il2_walk(const InterleavedRows& L, int64_t n, int64_t r0, int64_t r1, Tile&& tile) {
  il2_walk<BlockRows, Halves, Cols>(L, n, r0, r1, tile, [](const uint8_t*, const uint8_t*, int64_t) { return false; });
}

// Both halves of a 64-element-unit block (16 rows) · activation rows c0..c0 + C into y (the block's first output
// row): each broadcast activation dword feeds both halves' vpmaddubsw, where the half tiles broadcast it twice.
// The same int16 sums, s·d products and FMA order per (row, half) as gemm4_il2_tile: the same bits.
template <int UPG, int C>
void gemm4_il2_block(const InterleavedRows& L, const uint8_t* blk, const XQuant& xq, int64_t c0, const uint8_t* pf,
                     float* y, int64_t ldy) {
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t ng = L.in / L.group;
  const size_t es = dtype_size(L.dtype), half_sb = size_t(kIl2Rows) * es;
  const Il2TileRows<C> tr(xq, L.in, c0);
  __m256 f[2][2][C];  // [half][dwords 0-3, 4-7][row] f32 partials
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) f[0][0][c] = f[0][1][c] = f[1][0][c] = f[1][1][c] = _mm256_setzero_ps();
  int64_t u = 0;
  for (int64_t g = 0; g < ng; ++g) {
    const uint8_t* gp = blk + size_t(g) * L.group_bytes;
    if (pf != nullptr)
      for (size_t l = 0; l < L.group_bytes; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(pf + size_t(g) * L.group_bytes + l), _MM_HINT_T1);
    const __m256 s0 = il2_load8(gp + L.code_bytes, L.dtype), s1 = il2_load8(gp + L.code_bytes + half_sb, L.dtype);
    for (int h = 0; h < UPG; ++h, ++u) {
      const uint8_t* cu = gp + size_t(h) * 64 * 8;
#pragma GCC unroll 2
      for (int k = 0; k < 2; ++k) {
        __m256i a0[C], a1[C];  // [row] int16 sums of half 0, half 1
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) a0[c] = a1[c] = _mm256_setzero_si256();
        const __m256i m4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
        for (int j = 4 * k; j < 4 * k + 4; ++j) {
          const __m256i v0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(cu + j * 64));
          const __m256i v1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(cu + j * 64 + 32));
          const __m256i l0 = _mm256_and_si256(v0, m4), h0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
          const __m256i l1 = _mm256_and_si256(v1, m4), h1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) {
            const int8_t* x = tr.q[c] + u * 64;
            const __m256i xl = il2_bcast(x + 4 * j), xh = il2_bcast(x + 32 + 4 * j);
            a0[c] = _mm256_add_epi16(a0[c], _mm256_add_epi16(_mm256_maddubs_epi16(l0, xl), _mm256_maddubs_epi16(h0, xh)));
            il2_keep(a0[c]);
            a1[c] = _mm256_add_epi16(a1[c], _mm256_add_epi16(_mm256_maddubs_epi16(l1, xl), _mm256_maddubs_epi16(h1, xh)));
            il2_keep(a1[c]);
          }
        }
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m256 d = _mm256_set1_ps(tr.d[c][u]);
          f[0][k][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(a0[c], ones)), _mm256_mul_ps(s0, d), f[0][k][c]);
          f[1][k][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(a1[c], ones)), _mm256_mul_ps(s1, d), f[1][k][c]);
        }
      }
    }
  }
  const size_t bias_at = L.code_bytes + size_t(kInterleaveRows) * es;  // in a group
  for (int64_t g = 0; g < ng; ++g) {
    const uint8_t* bp = blk + size_t(g) * L.group_bytes + bias_at;
    const __m256 b0 = il2_load8(bp, L.dtype), b1 = il2_load8(bp + half_sb, L.dtype);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m256 sx = _mm256_set1_ps(xq.sx[(c0 + c) * xq.ngp + g]);
      f[0][0][c] = _mm256_fmadd_ps(b0, sx, f[0][0][c]);
      f[1][0][c] = _mm256_fmadd_ps(b1, sx, f[1][0][c]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    _mm256_storeu_ps(y + (c0 + c) * ldy, _mm256_add_ps(f[0][0][c], f[0][1][c]));
    _mm256_storeu_ps(y + (c0 + c) * ldy + kIl2Rows, _mm256_add_ps(f[1][0][c], f[1][1][c]));
  }
}

// 4-bit: whole 16-row blocks (units of 64), else each half.
template <int UNIT, int UPG>
void gemm4_il2(const InterleavedRows& L, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  using TileFn = void (*)(const InterleavedRows&, const uint8_t*, int, const XQuant&, int64_t, const uint8_t*, float*,
                          int64_t, int, int);
  static const auto fns = []<int... I>(std::integer_sequence<int, I...>) {
    return std::array<TileFn, kIl2Cols>{gemm4_il2_tile<UNIT, UPG, I + 1>...};
  }(std::make_integer_sequence<int, kIl2Cols>{});
  using BlockFn = void (*)(const InterleavedRows&, const uint8_t*, const XQuant&, int64_t, const uint8_t*, float*, int64_t);
  static const auto block_fns = []<int... I>(std::integer_sequence<int, I...>) {
    return std::array<BlockFn, kIl2Cols>{gemm4_il2_block<UPG, I + 1>...};
  }(std::make_integer_sequence<int, kIl2Cols>{});
  il2_walk<kInterleaveRows, 2, kIl2Cols>(
      L, n, r0, r1,
      [&](const uint8_t* blk, int h, int64_t c0, int C, const uint8_t* pf, int64_t base, Il2Lanes l) {
        fns[size_t(C - 1)](L, blk, h, xq, c0, pf, y + base, ldy, l.lo, l.hi);
      },
      [&](const uint8_t* blk, const uint8_t* pf, int64_t base) {
        if constexpr (UNIT != 64) return false;  // g32's even/odd sums take four int16 registers a row
        // As few tiles as kIl2Cols allows, of even sizes (5 rows: 3 + 2, not 4 + 1): a 1-row tile unpacks
        // each weight line for one row.
        const int64_t tiles = (n + kIl2Cols - 1) / kIl2Cols;
        for (int64_t t = 0, c0 = 0; t < tiles; ++t) {
          const int64_t C = n / tiles + (t < n % tiles ? 1 : 0);
          block_fns[size_t(C - 1)](L, blk, xq, c0, pf, y + base, ldy);
          c0 += C;
          pf = nullptr;  // the first tile of the block only
        }
        return true;
      });
}

void gemm4_interleaved(const InterleavedRows& L, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y,
                       int64_t ldy) {
  if (L.group == 32) gemm4_il2<32, 1>(L, xq, n, r0, r1, y, ldy);
  else if (L.group == 64) gemm4_il2<64, 1>(L, xq, n, r0, r1, y, ldy);
  else gemm4_il2<64, 2>(L, xq, n, r0, r1, y, ldy);
}

// ---------------------------------------------------------------------------------------------
// 8-bit copies (8-row blocks; codes stored as q - 128, see cpu/gemv_interleaved.h).
//
// The row kernels (gemv8, fast8) keep 8 f32 partial sums per output, lane l holding code dwords l (and
// l + 8 for 64-element x blocks) of every x block, and fold them with hsum at the end. Here a 32-byte line
// is code dword j of the block's 8 rows, so dword j's exact int32 sums (the same sign trick: |q - 128| by
// sign(x, q - 128) in vpmaddubsw, pairs widened by vpmaddwd) land one row per lane, and partial l of the
// 8 rows is one ymm: the same integers, s·d products, FMA order (x blocks, then biases b + 128 s by group
// into lane g mod 8) and fold ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)), so results are
// bit-identical to the row kernels, the AVX-512 family and every batch size, with no per-row setup.

// Exact int32 Σ (q - 128)·x of code dword line `c` (8 rows, int8 q - 128) against activation dword x[0..4).
inline __m256i il8_dot(const uint8_t* c, const int8_t* x) {
  const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(c));
  const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(il2_bcast(x), w));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

// Partial l of the 8 rows for one x block: code dwords l (and l + 8 when the block has 64 elements).
template <int XB>
inline __m256i il8_part(const uint8_t* c, const int8_t* x, int l) {
  if constexpr (XB == 64) return _mm256_add_epi32(il8_dot(c + l * 32, x + 4 * l), il8_dot(c + (l + 8) * 32, x + 32 + 4 * l));
  else return il8_dot(c + l * 32, x + 4 * l);
}

// Biases of the 8 rows for group g as the row kernels fold them: b + 128 s (128 s is exact).
inline __m256 il8_bias(const uint8_t* gp, const InterleavedRows& L) {
  const size_t sb = size_t(kInterleaveRows8) * dtype_size(L.dtype);
  const __m256 s = il2_load8(gp + L.code_bytes, L.dtype), b = il2_load8(gp + L.code_bytes + sb, L.dtype);
  return _mm256_add_ps(b, _mm256_mul_ps(s, _mm256_set1_ps(128.0f)));
}

// Adds the bias terms of activation row (sx: its [ngp] group sums) to the 8 partials p[8] of a block and
// folds them as hsum does: the row kernels' bias pass runs over ngp groups, lanes past ng with zeros.
inline __m256 il8_finish(const InterleavedRows& L, const uint8_t* blk, const float* sx, int64_t ngp, __m256 (&p)[8]) {
  const int64_t ng = L.in / L.group;
  for (int64_t g8 = 0; g8 < ngp; g8 += 8)  // ngp is a multiple of 8
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      const int64_t g = g8 + l;
      const __m256 bw = g < ng ? il8_bias(blk + size_t(g) * L.group_bytes, L) : _mm256_setzero_ps();
      p[l] = _mm256_fmadd_ps(bw, _mm256_set1_ps(sx[g]), p[l]);
    }
  return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(p[0], p[4]), _mm256_add_ps(p[2], p[6])),
                       _mm256_add_ps(_mm256_add_ps(p[1], p[5]), _mm256_add_ps(p[3], p[7])));
}

// y[r] for r in [r0, r1): one pass over each block, its 8 partials in registers. XB: x block (32 or 64
// elements), BPG: x blocks per group.
template <int XB, int BPG>
void gemv8_il2(const InterleavedRows& L, const XQuant& xq, int64_t r0, int64_t r1, float* y) {
  const int64_t ng = L.in / L.group;
  const bool pf = g_prefetch_rows > 0;
  for (int64_t b = r0 / kInterleaveRows8; b * kInterleaveRows8 < r1; ++b) {
    const uint8_t* blk = L.data + size_t(b) * L.block_bytes;
    __m256 p[8];
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) p[l] = _mm256_setzero_ps();
    int64_t u = 0;
    for (int64_t g = 0; g < ng; ++g) {
      const uint8_t* gp = blk + size_t(g) * L.group_bytes;
      if (pf)  // a prefetch never faults: past the copy's end it is dropped
        for (size_t l = 0; l < L.group_bytes; l += 64)
          _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(gp) + kIl2PrefetchBytes + l), _MM_HINT_T0);
      const __m256 s = il2_load8(gp + L.code_bytes, L.dtype);
      for (int k = 0; k < BPG; ++k, ++u) {
        const __m256 m = _mm256_mul_ps(s, _mm256_set1_ps(xq.d[u]));
        const uint8_t* c = gp + size_t(k) * XB * 8;  // XB / 4 lines of 32 bytes
        const int8_t* x = xq.q + u * XB;
#pragma GCC unroll 8
        for (int l = 0; l < 8; ++l) p[l] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(il8_part<XB>(c, x, l)), m, p[l]);
      }
    }
    const __m256 o = il8_finish(L, blk, xq.sx, xq.ngp, p);
    const int64_t h0 = b * kInterleaveRows8;
    const Il2Lanes ln = il2_lanes(h0, r0, r1);
    if (ln.lo < ln.hi) il2_store(y + h0, ln.lo, ln.hi, o);
  }
}

void gemv8_interleaved(const InterleavedRows& L, const XQuant& xq, int64_t r0, int64_t r1, float* y) {
  if (L.group == 32) gemv8_il2<32, 1>(L, xq, r0, r1, y);
  else if (L.group == 64) gemv8_il2<64, 1>(L, xq, r0, r1, y);
  else gemv8_il2<64, 2>(L, xq, r0, r1, y);
}

// Activation rows per register tile of the 8-bit GEMM: one f32 accumulator each, next to the 2 code lines
// and their absolute values.
constexpr int kIl8Cols = 4;

// Block `blk` (8 rows) · activation rows c0..c0 + C into y[(c0 + c) * ldy + i], y pointing at the block's
// first output row, lanes [lo, hi) only. One partial l at a time over all x blocks (8 passes over the
// block, from L1/L2), so a tile holds C accumulators instead of 8 C. pf: a later block, prefetched meanwhile.
template <int XB, int BPG, int C>
void gemm8_il2_tile(const InterleavedRows& L, const uint8_t* blk, const XQuant& xq, int64_t c0, const uint8_t* pf,
                    float* y, int64_t ldy, int lo, int hi) {
  const int64_t ng = L.in / L.group;
  const __m256i ones = _mm256_set1_epi16(1);
  const Il2TileRows<C> tr(xq, L.in, c0);  // activation rows in natural order
  // The s·d products of every (x block, activation row), [nblk][C][8 rows]: computed once, read by 8 passes.
  thread_local std::vector<float> mbuf;
  if (mbuf.size() < size_t(xq.nblk * C * 8)) mbuf.resize(size_t(xq.nblk * C * 8));
  float* mv = mbuf.data();
  for (int64_t g = 0, u = 0; g < ng; ++g) {
    const uint8_t* gp = blk + size_t(g) * L.group_bytes;
    if (pf != nullptr)
      for (size_t o = 0; o < L.group_bytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(pf + size_t(g) * L.group_bytes + o), _MM_HINT_T1);
    const __m256 s = il2_load8(gp + L.code_bytes, L.dtype);
    for (int k = 0; k < BPG; ++k, ++u)
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) _mm256_storeu_ps(mv + (u * C + c) * 8, _mm256_mul_ps(s, _mm256_set1_ps(tr.d[c][u])));
  }
  __m256 part[8][C];  // [partial][activation row]
  for (int l = 0; l < 8; ++l) {
    __m256 acc[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
    int64_t u = 0;
    for (int64_t g = 0; g < ng; ++g) {
      const uint8_t* gp = blk + size_t(g) * L.group_bytes;
      for (int k = 0; k < BPG; ++k, ++u) {
        const uint8_t* cl = gp + size_t(k) * XB * 8 + size_t(l) * 32;
        const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(cl)), a0 = _mm256_abs_epi8(w0);
        __m256i w1 = w0, a1 = a0;
        if constexpr (XB == 64) {
          w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(cl + 8 * 32));
          a1 = _mm256_abs_epi8(w1);
        }
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const int8_t* x = tr.q[c] + u * XB + 4 * l;
          __m256i t = _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(il2_bcast(x), w0)), ones);
          if constexpr (XB == 64)
            t = _mm256_add_epi32(t, _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(il2_bcast(x + 32), w1)), ones));
          acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_loadu_ps(mv + (u * C + c) * 8), acc[c]);
        }
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) part[l][c] = acc[c];
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    __m256 p[8];
    for (int l = 0; l < 8; ++l) p[l] = part[l][c];
    il2_store(y + (c0 + c) * ldy, lo, hi, il8_finish(L, blk, xq.sx + (c0 + c) * xq.ngp, xq.ngp, p));
  }
}

// 8-bit: each 8-row block (il2_walk).
template <int XB, int BPG>
void gemm8_il2(const InterleavedRows& L, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  using TileFn = void (*)(const InterleavedRows&, const uint8_t*, const XQuant&, int64_t, const uint8_t*, float*, int64_t,
                          int, int);
  static const auto fns = []<int... I>(std::integer_sequence<int, I...>) {
    return std::array<TileFn, kIl8Cols>{gemm8_il2_tile<XB, BPG, I + 1>...};
  }(std::make_integer_sequence<int, kIl8Cols>{});
  il2_walk<kInterleaveRows8, 1, kIl8Cols>(
      L, n, r0, r1, [&](const uint8_t* blk, int, int64_t c0, int C, const uint8_t* pf, int64_t base, Il2Lanes l) {
        fns[size_t(C - 1)](L, blk, xq, c0, pf, y + base, ldy, l.lo, l.hi);
      });
}

void gemm8_interleaved(const InterleavedRows& L, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y,
                       int64_t ldy) {
  if (L.group == 32) gemm8_il2<32, 1>(L, xq, n, r0, r1, y, ldy);
  else if (L.group == 64) gemm8_il2<64, 1>(L, xq, n, r0, r1, y, ldy);
  else gemm8_il2<64, 2>(L, xq, n, r0, r1, y, ldy);
}
