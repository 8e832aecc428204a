// Batched decode GEMM for 4-bit and 8-bit affine weights on the Fast path (int8 activations), AVX-512 VNNI.
// Included by cpu/kernels_x86.cpp inside its AVX-512 target region only (no include guard; expects
// <immintrin.h>, cpu/kernels.h and tensor/dtype.h, and cvt_floats from kernels_x86_impl.h).
//
// Layout: one zmm lane per activation row (kGemmCols = 16 of them), so the int8 dot products need no
// horizontal reductions: each weight dword (4 codes) is broadcast against the 16 rows' dwords of the
// same 4 positions (vpdpbusd), and a tile of up to kGemmRows weight rows reuses every activation load.
// Each weight block is read from memory once per step for all 16 rows.
//
// Arithmetic per output element is exactly fast4_h's (and gemv4_h's): the same exact int32 sums per
// (unit, half), the same f32 products d·s, the same FMA order (units, then biases by group) and the
// same final lo + hi, so results are bit-identical to the other kernels and to any batch size.
// The weight codes (0..15) are vpdpbusd's unsigned operand, broadcast; x (xq.xp, packed by the driver
// with one activation row per dword lane) the signed one.

constexpr int kGemmRows = 8;  // weight rows per tile: 8 int32 + 16 f32 accumulators fit the 32 zmm
// (the register-tile loops carry unroll pragmas: GCC keeps arrays of zmm in registers only when unrolled)

// One row of 4-bit codes as bytes in the activation's permuted order: wq[pos] pairs with xq[pos].
template <int UNIT>
inline void gemm_unpack4(const uint8_t* w, int64_t nu, uint8_t* wq) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t u = 0; u < nu; ++u) {
    if constexpr (UNIT == 64) {
      // lo nibbles: positions 0..31 (x evens), hi: 32..63 (x odds).
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + u * 32));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(wq + u * 64), _mm256_and_si256(v, m4));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(wq + u * 64 + 32), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
    } else {
      // g32: lo nibbles (x evens) at 0..15, hi nibbles (x odds) at 16..31.
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + u * 16));
      const __m128i m = _mm256_castsi256_si128(m4);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(wq + u * 32), _mm_and_si128(v, m));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(wq + u * 32 + 16), _mm_and_si128(_mm_srli_epi16(v, 4), m));
    }
  }
}

struct GemmTile {
  const uint8_t* wq[kGemmRows];  // [K] codes per row (see gemm_unpack4)
  const float* sw;     // [ng][8] scales
  const float* bw;     // [ng][8] biases
  const uint32_t* xp;  // [K/4][16] x dwords of this column tile
  const float* dT;     // x block scales, block-major: dT[u * ldd + c]
  const float* sxT;    // x group sums, group-major: sxT[g * ldd + c]
  int64_t ldd, nu, ng;
  __mmask16 cols;      // live activation rows of the tile
  const uint8_t* pf;   // the next tile's packed codes, prefetched R/2 lines per unit; nullptr: none
};

// Integer sums of half H of unit u for R weight rows × 16 activation rows, folded into f (exact ints,
// then one FMA with d·s as fast4_h does).
template <int R, int UNIT, int H>
inline void gemm4_half(const GemmTile& t, int64_t u, __m512 d, const float* s, __m512 (&f)[R]) {
  constexpr int DW = UNIT / 8;  // dwords per half: g64 {0..3, 8..11} / {4..7, 12..15}; g32 {0..3} / {4..7}
  __m512i acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int j = 0; j < DW; ++j) {
    const int64_t p = u * (UNIT / 4) + (UNIT == 64 ? (j & 3) + 4 * H + 8 * (j >> 2) : j + 4 * H);
    const __m512i xv = _mm512_loadu_si512(t.xp + p * 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t wd;
      std::memcpy(&wd, t.wq[r] + p * 4, 4);
      acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_set1_epi32(wd), xv);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    // maskz form: GCC 12's plain _mm512_cvtepi32_ps trips -Wmaybe-uninitialized (undefined source).
    const __m512 v = _mm512_maskz_cvtepi32_ps(__mmask16(0xFFFF), acc[r]);
    f[r] = _mm512_fmadd_ps(v, _mm512_mul_ps(d, _mm512_set1_ps(s[r])), f[r]);
  }
}

// out[r * 16 + c] for R weight rows × 16 activation rows.
template <int R, int UNIT, int UPG>
void gemm4_tile(const GemmTile& t, float* out) {
  __m512 flo[R], fhi[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) flo[r] = fhi[r] = _mm512_setzero_ps();
  for (int64_t u = 0; u < t.nu; ++u) {
    // The unpack of the next tile would otherwise wait on memory: no loads reach the hardware
    // prefetcher's stream while this tile computes. Unit u of R rows spans R * 32 bytes.
    if (t.pf != nullptr)
      for (int l = 0; l < R * 32; l += 64) _mm_prefetch(reinterpret_cast<const char*>(t.pf + u * R * 32 + l), _MM_HINT_T0);
    const __m512 d = _mm512_maskz_loadu_ps(t.cols, t.dT + u * t.ldd);
    const float* s = t.sw + (u / UPG) * 8;
    gemm4_half<R, UNIT, 0>(t, u, d, s, flo);
    gemm4_half<R, UNIT, 1>(t, u, d, s, fhi);
  }
  for (int64_t g = 0; g < t.ng; ++g) {
    const __m512 sx = _mm512_maskz_loadu_ps(t.cols, t.sxT + g * t.ldd);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) flo[r] = _mm512_fmadd_ps(_mm512_set1_ps(t.bw[g * 8 + r]), sx, flo[r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + r * 16, _mm512_add_ps(flo[r], fhi[r]));
}

// Sweeps the column tiles (16 activation rows each) of xq for R weight rows from r: points t at each,
// runs tile(c0) into out [R][16] and scatters the live columns to y.
template <class Tile, class RunTile>
void gemm_columns(Tile& t, const XQuant& xq, int64_t n, int64_t K, int64_t r, int R, const float* out, float* y,
                  int64_t ldy, RunTile&& tile) {
  for (int64_t c0 = 0; c0 < n; c0 += 16) {
    const int C = n - c0 < 16 ? int(n - c0) : 16;
    t.cols = __mmask16((1u << C) - 1u);
    t.xp = xq.xp + (c0 / 16) * (K / 4) * 16;
    t.dT = xq.dT + c0;
    t.sxT = xq.sxT + c0;
    tile(c0);
    for (int i = 0; i < R; ++i)
      for (int c = 0; c < C; ++c) y[(c0 + c) * ldy + r + i] = out[i * 16 + c];
  }
}

// Rows [r0, r1) of y for all n activation rows: tiles of kGemmRows weight rows, unpacked once and
// swept over every 16-row column tile of xq.xp.
template <int UNIT, int UPG>
void gemm4_rows_t(const Weight& W, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y, int64_t ldy,
                  float* scratch) {
  using TileFn = void (*)(const GemmTile&, float*);
  static const TileFn fns[kGemmRows] = {gemm4_tile<1, UNIT, UPG>, gemm4_tile<2, UNIT, UPG>, gemm4_tile<3, UNIT, UPG>,
                                        gemm4_tile<4, UNIT, UPG>, gemm4_tile<5, UNIT, UPG>, gemm4_tile<6, UNIT, UPG>,
                                        gemm4_tile<7, UNIT, UPG>, gemm4_tile<8, UNIT, UPG>};
  const int64_t K = W.in, ng = K / W.group, nu = K / UNIT;
  const size_t row_bytes = size_t(K) / 2;
  const uint8_t* wbase = static_cast<const uint8_t*>(W.data);
  // Scratch (kern::fast_scratch_floats): out [8][16] | sw, bw [ng][8] | wq [8][K] bytes.
  float* out = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
  float* swb = out + kGemmRows * 16;
  float* bwb = swb + kGemmRows * ng;
  uint8_t* wqb = reinterpret_cast<uint8_t*>(bwb + kGemmRows * ng);
  GemmTile t{};
  for (int i = 0; i < kGemmRows; ++i) t.wq[i] = wqb + size_t(i) * size_t(K);
  t.sw = swb;
  t.bw = bwb;
  t.ldd = xq.ldd;
  t.nu = nu;
  t.ng = ng;
  alignas(32) float tmp[2][512];
  for (int64_t r = r0; r < r1; r += kGemmRows) {
    const int R = r + kGemmRows <= r1 ? kGemmRows : int(r1 - r);
    for (int i = 0; i < R; ++i) {
      gemm_unpack4<UNIT>(wbase + size_t(r + i) * row_bytes, nu, wqb + size_t(i) * size_t(K));
      for (int64_t g0 = 0; g0 < ng; g0 += 512) {
        const int64_t cnt = ng - g0 < 512 ? ng - g0 : 512;
        cvt_floats(W.scales, W.dtype, (r + i) * ng + g0, cnt, tmp[0]);
        cvt_floats(W.biases, W.dtype, (r + i) * ng + g0, cnt, tmp[1]);
        for (int64_t g = 0; g < cnt; ++g) {
          swb[(g0 + g) * 8 + i] = tmp[0][g];
          bwb[(g0 + g) * 8 + i] = tmp[1][g];
        }
      }
    }
    gemm_columns(t, xq, n, K, r, R, out, y, ldy, [&](int64_t c0) {
      // Whole-tile bytes: UNIT 32 packs 16 bytes per unit per row, so the same R * 32 covers two of its units.
      t.pf = c0 == 0 && r + 2 * kGemmRows <= r1 ? wbase + size_t(r + R) * row_bytes : nullptr;
      fns[R - 1](t, out);
    });
  }
}

void gemm4_rows(const Weight& W, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y, int64_t ldy,
                float* scratch) {
  if (W.group == 32) gemm4_rows_t<32, 1>(W, xq, n, r0, r1, y, ldy, scratch);
  else if (W.group == 64) gemm4_rows_t<64, 1>(W, xq, n, r0, r1, y, ldy, scratch);
  else gemm4_rows_t<64, 2>(W, xq, n, r0, r1, y, ldy, scratch);
}

// ---------------------------------------------------------------------------------------------
// 8-bit affine weights: the same one-lane-per-activation-row GEMM. fast8 / gemv8 keep 8 float partial
// sums per output (one per ymm lane: dwords l and 8 + l of each x block) and fold them with hsum, so
// here each output has 8 partial accumulators too, each fed the same exact int32 block sums, the same
// s·d products in the same order; the bias pass and the final fold are theirs, hence the same bits.
// vpdpbusd multiplies unsigned by signed bytes: x + 128 (xp packed with the sign bits flipped) against
// the codes as q - 128, the int32 sum started at -128·Σ(q - 128) of the lane's bytes, which leaves the
// exact Σ(q - 128)·x that fast8 computes with its sign trick.

constexpr int kGemm8Rows = 2;  // weight rows per tile: 2 x 8 partial f32 accumulators + temporaries in 32 zmm

struct Gemm8Tile {
  const int8_t* wq[kGemm8Rows];   // [K] q - 128
  const int32_t* wc[kGemm8Rows];  // [nblk][8] -128·Σ(q - 128) of each lane's bytes per x block
  const float* sw[kGemm8Rows];    // [ngp] scales, zero padded
  const float* bw[kGemm8Rows];    // [ngp] biases + 128·scale, zero padded
  const uint32_t* xp;  // [K/4][16] dwords of x + 128 of this column tile
  const float* dT;     // x block scales, block-major: dT[blk * ldd + c]
  const float* sxT;    // x group sums, group-major: sxT[g * ldd + c]
  int64_t ldd, nblk, ngp, bpg;
  __mmask16 cols;
};

// out[r * 16 + c] for R weight rows × 16 activation rows; XB: x block (32 or 64 elements).
template <int R, int XB>
void gemm8_tile(const Gemm8Tile& t, float* out) {
  __m512 f[R][8];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) f[r][l] = _mm512_setzero_ps();
  for (int64_t blk = 0; blk < t.nblk; ++blk) {
    const int64_t g = blk / t.bpg;
    const __m512 d = _mm512_maskz_loadu_ps(t.cols, t.dT + blk * t.ldd);
    __m512 cs[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) cs[r] = _mm512_mul_ps(_mm512_set1_ps(t.sw[r][g]), d);
    const int64_t p0 = blk * (XB / 4);  // first dword of the block
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      const __m512i x0 = _mm512_loadu_si512(t.xp + (p0 + l) * 16);
      __m512i x1 = x0;
      if constexpr (XB == 64) x1 = _mm512_loadu_si512(t.xp + (p0 + 8 + l) * 16);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        int32_t wd;
        std::memcpy(&wd, t.wq[r] + (p0 + l) * 4, 4);
        __m512i acc = _mm512_dpbusd_epi32(_mm512_set1_epi32(t.wc[r][blk * 8 + l]), x0, _mm512_set1_epi32(wd));
        if constexpr (XB == 64) {
          std::memcpy(&wd, t.wq[r] + (p0 + 8 + l) * 4, 4);
          acc = _mm512_dpbusd_epi32(acc, x1, _mm512_set1_epi32(wd));
        }
        // maskz form: see gemm4_half.
        f[r][l] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(__mmask16(0xFFFF), acc), cs[r], f[r][l]);
      }
    }
  }
  // Bias pass as fast8's finish: group g goes to partial g % 8 (ngp is a multiple of 8).
  for (int64_t g = 0; g < t.ngp; g += 8)
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      const __m512 sx = _mm512_maskz_loadu_ps(t.cols, t.sxT + (g + l) * t.ldd);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) f[r][l] = _mm512_fmadd_ps(_mm512_set1_ps(t.bw[r][g + l]), sx, f[r][l]);
    }
  // hsum's fold: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m512 a = _mm512_add_ps(_mm512_add_ps(f[r][0], f[r][4]), _mm512_add_ps(f[r][2], f[r][6]));
    const __m512 b = _mm512_add_ps(_mm512_add_ps(f[r][1], f[r][5]), _mm512_add_ps(f[r][3], f[r][7]));
    _mm512_storeu_ps(out + r * 16, _mm512_add_ps(a, b));
  }
}

template <int XB>
void gemm8_rows_t(const Weight& W, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y, int64_t ldy,
                  float* scratch) {
  using TileFn = void (*)(const Gemm8Tile&, float*);
  static const TileFn fns[kGemm8Rows] = {gemm8_tile<1, XB>, gemm8_tile<2, XB>};
  const int64_t K = W.in, ng = K / W.group, ngp = xq.ngp, nblk = K / XB;
  const uint8_t* wbase = static_cast<const uint8_t*>(W.data);
  // Scratch (within kern::fast_scratch_floats): out [2][16] | sw, bw [2][ngp] | wc [2][nblk * 8] | wq [2][K].
  float* out = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
  float* swb = out + kGemm8Rows * 16;
  float* bwb = swb + kGemm8Rows * ngp;
  int32_t* wcb = reinterpret_cast<int32_t*>(bwb + kGemm8Rows * ngp);
  int8_t* wqb = reinterpret_cast<int8_t*>(wcb + kGemm8Rows * nblk * 8);
  Gemm8Tile t{};
  for (int i = 0; i < kGemm8Rows; ++i) {
    t.sw[i] = swb + i * ngp;
    t.bw[i] = bwb + i * ngp;
    t.wc[i] = wcb + i * nblk * 8;
    t.wq[i] = wqb + size_t(i) * size_t(K);
  }
  t.ldd = xq.ldd;
  t.nblk = nblk;
  t.ngp = ngp;
  t.bpg = W.group / XB;
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  for (int64_t r = r0; r < r1; r += kGemm8Rows) {
    const int R = r + kGemm8Rows <= r1 ? kGemm8Rows : int(r1 - r);
    for (int i = 0; i < R; ++i) {
      const uint8_t* w = wbase + size_t(r + i) * size_t(K);
      int8_t* wq = wqb + size_t(i) * size_t(K);
      for (int64_t k = 0; k < K; k += 64)  // K % 64 == 0 (fast_ok)
        _mm512_storeu_si512(wq + k, _mm512_xor_si512(_mm512_loadu_si512(w + k), flip));
      int32_t* wc = wcb + i * nblk * 8;
      for (int64_t b = 0; b < nblk; ++b)
        for (int l = 0; l < 8; ++l) {
          int32_t s = 0;
          for (int h = 0; h < XB / 32; ++h)
            for (int e = 0; e < 4; ++e) s += wq[b * XB + h * 32 + l * 4 + e];
          wc[b * 8 + l] = -128 * s;
        }
      float* sw = swb + i * ngp;
      float* bw = bwb + i * ngp;
      cvt_floats(W.scales, W.dtype, (r + i) * ng, ng, sw);
      cvt_floats(W.biases, W.dtype, (r + i) * ng, ng, bw);
      for (int64_t g = ng; g < ngp; ++g) sw[g] = bw[g] = 0;
      for (int64_t g = 0; g < ng; ++g) bw[g] += 128.0f * sw[g];
    }
    gemm_columns(t, xq, n, K, r, R, out, y, ldy, [&](int64_t) { fns[R - 1](t, out); });
  }
}

// The family's Kernels::gemm_rows: 4-bit and 8-bit affine weights.
void gemm_rows(const Weight& W, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y, int64_t ldy,
               float* scratch) {
  if (W.bits == 4) return gemm4_rows(W, xq, n, r0, r1, y, ldy, scratch);
  if (W.group == 32) gemm8_rows_t<32>(W, xq, n, r0, r1, y, ldy, scratch);
  else gemm8_rows_t<64>(W, xq, n, r0, r1, y, ldy, scratch);
}
