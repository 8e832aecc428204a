// Body of the x86 kernels, included twice by cpu/kernels_x86.cpp: once inside an AVX2+FMA+F16C target
// region (kVnni = false) and once inside an AVX-512 F/BW/VL + VNNI region (kVnni = true). Not a header
// to include anywhere else: it has no include guard and expects <immintrin.h>, cpu/kernels.h,
// quant/packed_bits.h and tensor/dtype.h to be included, and `constexpr bool kVnni` to be declared, by
// the including namespace.
//
// The VNNI variant differs only in the int8 dot products of the Fast path: vpdpbusd (on 256-bit
// registers, AVX512VL) replaces maddubs + madd in fast4_h, fast8 and gemv8 (not gemv4_h, see there). Both produce the same exact int32 partial sums (no
// int16 saturation is possible on either path), and everything in f32 is shared, so the two variants
// give bit-identical results; batch invariance holds within each as before.

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// n values of a float tensor (F32/F16/BF16) starting at element `start` → out[0..n).
inline void cvt_floats(const void* base, DType t, int64_t start, int64_t n, float* out) {
  int64_t i = 0;
  if (t == DType::BF16) {
    const uint16_t* p = static_cast<const uint16_t*>(base) + start;
    for (; i + 8 <= n; i += 8) {
      __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)));
      _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    for (; i < n; ++i) out[i] = bf16_to_f32(p[i]);
  } else if (t == DType::F16) {
    const uint16_t* p = static_cast<const uint16_t*>(base) + start;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i))));
    for (; i < n; ++i) out[i] = _cvtsh_ss(p[i]);
  } else {
    std::memcpy(out, static_cast<const float*>(base) + start, size_t(n) * 4);
  }
}

// 8 values of a float tensor (F32/F16/BF16) starting at element i, as f32.
inline __m256 load8(const void* base, DType t, int64_t i) {
  if (t == DType::BF16)
    return _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i))),
        16));
  if (t == DType::F16)
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i)));
  return _mm256_loadu_ps(static_cast<const float*>(base) + i);
}

// Prefetches whole rows [r, r + count) of a row-major byte matrix (rows past `rows` are skipped).
// Decode is bound by one core's memory-level parallelism; running ~20 rows ahead hides latency.
inline void prefetch_rows(const uint8_t* base, size_t row_bytes, int64_t r, int64_t count, int64_t rows) {
  const int64_t e = r + count < rows ? r + count : rows;
  for (int64_t i = r; i < e; ++i)
    for (size_t off = 0; off < row_bytes; off += 64)
      _mm_prefetch(reinterpret_cast<const char*>(base + size_t(i) * row_bytes + off), _MM_HINT_T0);
}

// ---------------------------------------------------------------------------------------------
// Activation quantization (Fast path)

// Packs 32 int32 (4 vectors, natural order) into 32 int8 in natural order.
inline __m256i pack32(__m256i a, __m256i b, __m256i c, __m256i d) {
  __m256i ab = _mm256_packs_epi32(a, b);  // [a0-3 b0-3 | a4-7 b4-7] int16
  __m256i cd = _mm256_packs_epi32(c, d);
  __m256i q = _mm256_packs_epi16(ab, cd);  // [a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7] int8
  return _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline int hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// VNNI: acc + Σ of 4 consecutive u8·s8 products per int32 lane (vpdpbusd), exact.
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) {
  if constexpr (kVnni) return _mm256_dpbusd_epi32(acc, u, s);
  else return acc;  // not reached: every caller is behind `if constexpr (kVnni)`
}

// Four vectors of per-lane int32 sums → [Σ half of a, b, c, d | the same for the high halves]: the
// same exact values as the AVX2 int16 reduction (hadd, hadd, madd) gives on the same products.
inline __m256i hsum4_halves(__m256i a, __m256i b, __m256i c, __m256i d) {
  return _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
}

void quantize_x(const float* x, int64_t K, int xb, int perm, int group, int64_t ngp, int8_t* q, float* d,
                float* sx) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  // Within each 16-byte lane: evens first, then odds.
  const __m256i eo = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                      0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const int64_t ng = K / group;
  for (int64_t g = 0; g < ngp; ++g) sx[g] = 0;
  for (int64_t b = 0; b < K / xb; ++b) {
    const float* xs = x + b * xb;
    const int nv = xb == 32 ? 4 : 8;  // vectors per block
    __m256 v[8] = {};
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < nv; ++j) {
      v[j] = _mm256_loadu_ps(xs + 8 * j);
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[j]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    d[b] = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
    __m256i iv[8] = {};
    __m256i isum = _mm256_setzero_si256();
    for (int j = 0; j < nv; ++j) {
      iv[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], id));  // round to nearest even
      isum = _mm256_add_epi32(isum, iv[j]);
    }
    // The bias term uses the sum of the *quantized* x, so y = Σ (s·q + b)·x̂ exactly: with the exact
    // Σx the errors of s·Σq·x̂ (q ≥ 0, not centred) would not cancel and 4-bit error grows ~4x.
    sx[b * xb / group] += d[b] * float(hsum_epi32(isum));
    int8_t* qb = q + b * xb;
    __m256i A = pack32(iv[0], iv[1], iv[2], iv[3]);  // natural elements 0..31
    if (xb == 32) {
      if (perm == 32) A = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(A, eo), 0xD8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), A);
    } else {
      __m256i B = pack32(iv[4], iv[5], iv[6], iv[7]);  // natural elements 32..63
      if (perm == 64) {
        __m256i a = _mm256_shuffle_epi8(A, eo), bb = _mm256_shuffle_epi8(B, eo);
        __m256i ev = _mm256_permute4x64_epi64(_mm256_unpacklo_epi64(a, bb), 0xD8);
        __m256i od = _mm256_permute4x64_epi64(_mm256_unpackhi_epi64(a, bb), 0xD8);
        A = ev;
        B = od;
      } else if (perm == 32) {
        A = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(A, eo), 0xD8);
        B = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(B, eo), 0xD8);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), A);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb + 32), B);
    }
  }
  (void)ng;
}

// ---------------------------------------------------------------------------------------------
// Fast micro-kernels: R weight rows × C activation rows, whole K. acc lanes are summed at the end.
// Σ_i w_i x_i = Σ_g s_g Σ_i q_i x_i + Σ_g b_g Σ_i x_i; the first term in int8 (maddubs), the second
// as a small f32 dot of biases with the exact group sums sx.

struct FastArgs {
  const float* swv;     // [ng][8]: lanes 0-3 scale of row 0, lanes 4-7 scale of row 1 (0 if R = 1)
  const float* dT;      // x block scales, block-major: dT[blk * ldd + c] (c relative to this tile)
  const float* sxT;     // x group sums, group-major: sxT[g * ldd + c]
  int64_t ldd;
  const uint8_t* w[8];
  const float* sw[8];   // [ngp] f32 scales
  const float* bw[8];   // [ngp] f32 biases (8-bit: b + 128 s), zero padded
  const int8_t* xq[4];
  const float* sx[4];   // [ngp]
  int64_t ng, ngp;
};

// cs[r*4 + c] = scale(row r, group g) * d(x row c, block blk): one multiply for the 2×4 tile.
inline void comb_scales(const FastArgs& a, int64_t g, int64_t blk, float* cs) {
  __m256 sv = _mm256_load_ps(a.swv + g * 8);
  __m256 dv = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(a.dT + blk * a.ldd));
  _mm256_store_ps(cs, _mm256_mul_ps(sv, dv));
}

template <int R, int C>
inline void finish(__m256 (&acc)[R][C], const FastArgs& a, float* y, int64_t ldy) {
  for (int64_t g = 0; g < a.ngp; g += 8) {
    __m256 b[R];
    for (int r = 0; r < R; ++r) b[r] = _mm256_loadu_ps(a.bw[r] + g);
    for (int c = 0; c < C; ++c) {
      __m256 s = _mm256_loadu_ps(a.sx[c] + g);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(b[r], s, acc[r][c]);
    }
  }
  // Same reduction for every tile shape: results must not depend on the batch (invariance).
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[c * ldy + r] = hsum(acc[r][c]);
}

// 4-bit, 4 activation rows at once with a horizontal-add reduction: the int16 partial sums of the
// 4 pairs (row r, x rows c0..c3) are folded with two phaddw levels (|lane| ≤ 4·7620 < 2^15) and
// widened by a single madd, so one cvt + one FMA serve 4 outputs: lanes [c0 c1 c2 c3 | c0 c1 c2 c3].
// UNIT = 64 (g64/g128: 32 packed bytes, x evens|odds per 64) or 32 (g32: 16 bytes, evens|odds per 32).
template <int R, int UNIT, int UPG>
void fast4_h(const FastArgs& a, float* y, int64_t ldy, int C) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const int64_t nu = a.ng * UPG;
  const int8_t* x0 = a.xq[0];
  const int8_t* x1 = a.xq[1];
  const int8_t* x2 = a.xq[2];
  const int8_t* x3 = a.xq[3];
  for (int64_t u = 0; u < nu; ++u) {
    const int64_t g = u / UPG;
    const __m256 d = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(a.dT + u * a.ldd));
    for (int r = 0; r < R; ++r) {
      __m256i p[4];
      if constexpr (kVnni) {
        const int8_t* xs[4] = {x0, x1, x2, x3};
        const __m256i z = _mm256_setzero_si256();
        if (UNIT == 64) {
          __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.w[r] + u * 32));
          __m256i lo = _mm256_and_si256(v, m4);
          __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          for (int c = 0; c < 4; ++c)
            p[c] = dpbusd(dpbusd(z, lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[c] + u * 64))), hi,
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[c] + u * 64 + 32)));
        } else {
          __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.w[r] + u * 16));
          __m256i wv = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), m4);
          for (int c = 0; c < 4; ++c)
            p[c] = dpbusd(z, wv, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[c] + u * 32)));
        }
        __m256 f = _mm256_cvtepi32_ps(hsum4_halves(p[0], p[1], p[2], p[3]));
        acc[r] = _mm256_fmadd_ps(f, _mm256_mul_ps(d, _mm256_broadcast_ss(a.sw[r] + g)), acc[r]);
        continue;
      }
      if (UNIT == 64) {
        __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.w[r] + u * 32));
        __m256i lo = _mm256_and_si256(v, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        const int8_t* xs[4] = {x0, x1, x2, x3};
        for (int c = 0; c < 4; ++c)
          p[c] = _mm256_add_epi16(
              _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[c] + u * 64))),
              _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[c] + u * 64 + 32))));
      } else {
        __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.w[r] + u * 16));
        __m256i wv = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), m4);
        const int8_t* xs[4] = {x0, x1, x2, x3};
        for (int c = 0; c < 4; ++c)
          p[c] = _mm256_maddubs_epi16(wv, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[c] + u * 32)));
      }
      __m256i h = _mm256_hadd_epi16(_mm256_hadd_epi16(p[0], p[1]), _mm256_hadd_epi16(p[2], p[3]));
      __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(h, ones));
      acc[r] = _mm256_fmadd_ps(f, _mm256_mul_ps(d, _mm256_broadcast_ss(a.sw[r] + g)), acc[r]);
    }
  }
  // Bias term: Σ_g b[r,g] · Σx[c,g], low half only (the two halves are added at the end).
  for (int64_t g = 0; g < a.ng; ++g) {
    const __m256 sx = _mm256_insertf128_ps(_mm256_setzero_ps(), _mm_loadu_ps(a.sxT + g * a.ldd), 0);
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(a.bw[r] + g), sx, acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc[r]), _mm256_extractf128_ps(acc[r], 1));
    alignas(16) float o[4];
    _mm_store_ps(o, s4);
    for (int c = 0; c < C; ++c) y[c * ldy + r] = o[c];
  }
}

// 8-bit: q in [0,255] is used as signed q-128 (bias folded: b + 128 s) with the sign trick so
// maddubs never saturates: |q-128| ≤ 128, |x| ≤ 127.
template <int R, int C>
void fast8(const FastArgs& a, int G, float* y, int64_t ldy) {
  const __m256i off = _mm256_set1_epi8(char(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const int xb = G == 32 ? 32 : 64;
  const int bpg = G / xb;  // x blocks per group
  int64_t blk = 0;
  alignas(32) float cs[8];
  for (int64_t g = 0; g < a.ng; ++g) {
    for (int k = 0; k < bpg; ++k, ++blk) {
      comb_scales(a, g, blk, cs);
      const int64_t pos = blk * xb;
      if (xb == 64) {
        __m256i ws0[R], wa0[R], ws1[R], wa1[R];
        for (int r = 0; r < R; ++r) {
          ws0[r] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.w[r] + pos)), off);
          ws1[r] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.w[r] + pos + 32)), off);
          wa0[r] = _mm256_abs_epi8(ws0[r]);
          wa1[r] = _mm256_abs_epi8(ws1[r]);
        }
        for (int c = 0; c < C; ++c) {
          __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq[c] + pos));
          __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq[c] + pos + 32));
          for (int r = 0; r < R; ++r) {
            if constexpr (kVnni) {
              const __m256i z = _mm256_setzero_si256();
              __m256 f = _mm256_cvtepi32_ps(dpbusd(dpbusd(z, wa0[r], _mm256_sign_epi8(x0, ws0[r])), wa1[r],
                                                   _mm256_sign_epi8(x1, ws1[r])));
              acc[r][c] = _mm256_fmadd_ps(f, _mm256_broadcast_ss(cs + r * 4 + c), acc[r][c]);
              continue;
            }
            __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(wa0[r], _mm256_sign_epi8(x0, ws0[r])), ones);
            __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(wa1[r], _mm256_sign_epi8(x1, ws1[r])), ones);
            __m256 f = _mm256_cvtepi32_ps(_mm256_add_epi32(p0, p1));
            acc[r][c] = _mm256_fmadd_ps(f, _mm256_broadcast_ss(cs + r * 4 + c), acc[r][c]);
          }
        }
      } else {
        __m256i ws[R], wa[R];
        for (int r = 0; r < R; ++r) {
          ws[r] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.w[r] + pos)), off);
          wa[r] = _mm256_abs_epi8(ws[r]);
        }
        for (int c = 0; c < C; ++c) {
          __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq[c] + pos));
          for (int r = 0; r < R; ++r) {
            __m256i p;
            if constexpr (kVnni) p = dpbusd(_mm256_setzero_si256(), wa[r], _mm256_sign_epi8(x0, ws[r]));
            else p = _mm256_madd_epi16(_mm256_maddubs_epi16(wa[r], _mm256_sign_epi8(x0, ws[r])), ones);
            acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(cs + r * 4 + c), acc[r][c]);
          }
        }
      }
    }
  }
  finish<R, C>(acc, a, y, ldy);
}

using FastFn = void (*)(const FastArgs&, int, float*, int64_t);

template <int R, int C>
struct F8 { static void run(const FastArgs& a, int G, float* y, int64_t l) { fast8<R, C>(a, G, y, l); } };

template <template <int, int> class K>
FastFn pick(int R, int C) {
  static const FastFn t[2][4] = {{K<1, 1>::run, K<1, 2>::run, K<1, 3>::run, K<1, 4>::run},
                                 {K<2, 1>::run, K<2, 2>::run, K<2, 3>::run, K<2, 4>::run}};
  return t[R - 1][C - 1];
}

void fast_rows_tiled(const Weight& W, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y, int64_t ldy,
                     float* scratch) {
  const int64_t K = W.in, G = W.group, ng = K / G, ngp = xq.ngp;
  const size_t row_bytes = size_t(K) * size_t(W.bits) / 8;
  const uint8_t* wbase = static_cast<const uint8_t*>(W.data);
  // Panel of activation rows sized to stay in L2 while every weight row of this thread passes by.
  int64_t P = (160 * 1024) / (K > 0 ? K : 1);
  P = P < 4 ? 4 : (P / 4) * 4;
  FastArgs a{};
  a.ng = ng;
  a.ngp = ngp;
  if (W.bits == 4) {
    // R rows × 4 activation rows per micro-kernel call (see fast4_h).
    constexpr int RT = 4;  // measured on Zen3: 1 → 83, 2 → 105, 4 → 121, 8 → 110 GFLOP/s per core
    using HFn = void (*)(const FastArgs&, float*, int64_t, int);
    HFn hf[8];
    auto fill = [&](auto unit, auto upg) {
      constexpr int U = decltype(unit)::value, P2 = decltype(upg)::value;
      hf[0] = fast4_h<1, U, P2>; hf[1] = fast4_h<2, U, P2>; hf[2] = fast4_h<3, U, P2>; hf[3] = fast4_h<4, U, P2>;
      hf[4] = fast4_h<5, U, P2>; hf[5] = fast4_h<6, U, P2>; hf[6] = fast4_h<7, U, P2>; hf[7] = fast4_h<8, U, P2>;
    };
    if (G == 32) fill(std::integral_constant<int, 32>{}, std::integral_constant<int, 1>{});
    else if (G == 64) fill(std::integral_constant<int, 64>{}, std::integral_constant<int, 1>{});
    else fill(std::integral_constant<int, 64>{}, std::integral_constant<int, 2>{});
    a.ldd = xq.ldd;
    for (int64_t c0 = 0; c0 < n; c0 += P) {
      const int64_t c1 = c0 + P < n ? c0 + P : n;
      for (int64_t r = r0; r < r1; r += RT) {
        const int R = r + RT <= r1 ? RT : int(r1 - r);
        for (int i = 0; i < R; ++i) {
          float* sw = scratch + i * ngp;
          float* bw = scratch + (RT + i) * ngp;
          cvt_floats(W.scales, W.dtype, (r + i) * ng, ng, sw);
          cvt_floats(W.biases, W.dtype, (r + i) * ng, ng, bw);
          a.w[i] = wbase + size_t(r + i) * row_bytes;
          a.sw[i] = sw;
          a.bw[i] = bw;
        }
        for (int64_t c = c0; c < c1; c += 4) {
          const int C = c + 4 <= c1 ? 4 : int(c1 - c);
          a.dT = xq.dT + c;
          a.sxT = xq.sxT + c;
          for (int j = 0; j < 4; ++j) a.xq[j] = xq.q + (c + (j < C ? j : 0)) * xq.K;
          hf[R - 1](a, y + c * ldy + r, ldy, C);
        }
      }
    }
    return;
  }
  // 8-bit: 2 weight rows × up to 4 activation rows per call (fast8).
  FastFn tab[2][4];
  for (int R = 1; R <= 2; ++R)
    for (int C = 1; C <= 4; ++C) tab[R - 1][C - 1] = pick<F8>(R, C);
  float* swb = scratch;            // [2][ngp]
  float* bwb = scratch + 2 * ngp;  // [2][ngp]
  // [ng][8] interleaved scales for comb_scales, 32-byte aligned.
  float* swv = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch + 4 * ngp) + 31) & ~uintptr_t(31));
  for (int64_t c0 = 0; c0 < n; c0 += P) {
    const int64_t c1 = c0 + P < n ? c0 + P : n;
    for (int64_t r = r0; r < r1; r += 2) {
      const int R = r + 2 <= r1 ? 2 : 1;
      if (n <= 4 && g_prefetch_rows > 0) prefetch_rows(wbase, row_bytes, r + g_prefetch_rows, R, W.out);
      for (int i = 0; i < R; ++i) {
        float* sw = swb + i * ngp;
        float* bw = bwb + i * ngp;
        cvt_floats(W.scales, W.dtype, (r + i) * ng, ng, sw);
        cvt_floats(W.biases, W.dtype, (r + i) * ng, ng, bw);
        for (int64_t g = ng; g < ngp; ++g) sw[g] = bw[g] = 0;
        if (W.bits == 8)
          for (int64_t g = 0; g < ng; ++g) bw[g] += 128.0f * sw[g];
        a.w[i] = wbase + size_t(r + i) * row_bytes;
        a.sw[i] = sw;
        a.bw[i] = bw;
      }
      for (int64_t g = 0; g < ng; ++g) {
        __m128 s0 = _mm_set1_ps(swb[g]);
        __m128 s1 = R == 2 ? _mm_set1_ps(swb[ngp + g]) : _mm_setzero_ps();
        _mm256_store_ps(swv + g * 8, _mm256_set_m128(s1, s0));
      }
      a.swv = swv;
      a.ldd = xq.ldd;
      for (int64_t c = c0; c < c1; c += 4) {
        const int C = c + 4 <= c1 ? 4 : int(c1 - c);
        a.dT = xq.dT + c;
        for (int j = 0; j < C; ++j) {
          a.xq[j] = xq.q + (c + j) * xq.K;
          a.sx[j] = xq.sx + (c + j) * xq.ngp;
        }
        tab[R - 1][C - 1](a, int(G), y + c * ldy + r, ldy);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// GEMV (one activation row, decode): memory bound, so no per-row setup. Scales and biases are
// converted 8 groups at a time straight from the checkpoint; the bias term is one FMA per 8 groups.

// 4-bit GEMV, 4 weight rows × 1 activation row. Bit-identical to fast4_h for the same (row, x row):
// the same exact integer partial sums (low/high 128-bit halves), the same products s·d, the same
// FMA order (units, then bias by group) and the same final lo + hi, only with rows in the lanes.
template <int UNIT, int UPG>
void gemv4_h(const Weight& W, const XQuant& xq, int64_t r0, int64_t r1, float* y, float* scratch) {
  const int64_t K = W.in, ng = K / W.group, nu = ng * UPG;
  const size_t row_bytes = size_t(K) / 2;
  const uint8_t* wbase = static_cast<const uint8_t*>(W.data);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* xr = xq.q;
  const int64_t ng8 = (ng + 7) / 8 * 8;
  float* s4 = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 31) & ~uintptr_t(31));  // [ng8][4]
  float* b4 = s4 + ng8 * 4;                                                                           // [ng8][4]
  for (int64_t r = r0; r < r1; r += 4) {
    const int R = r + 4 <= r1 ? 4 : int(r1 - r);
    const uint8_t* w[4];
    int64_t ri[4];
    for (int i = 0; i < 4; ++i) {
      ri[i] = r + (i < R ? i : 0);  // missing rows repeat row r; their lanes are dropped
      w[i] = wbase + size_t(ri[i]) * row_bytes;
    }
    // Scales and biases of the 4 rows, transposed 8 groups at a time to [group][r0 r1 r2 r3].
    for (int64_t g8 = 0; g8 < ng; g8 += 8) {
      const int64_t cnt = ng - g8 < 8 ? ng - g8 : 8;
      for (int sb = 0; sb < 2; ++sb) {
        const void* src = sb ? W.biases : W.scales;
        __m256 v[4];
        for (int i = 0; i < 4; ++i) {
          // Lanes past ng are never read, so a full 8-wide load is fine while it stays in the tensor.
          const int64_t e = ri[i] * ng + g8;
          if (e + 8 <= W.out * ng) {
            v[i] = load8(src, W.dtype, e);
          } else {
            alignas(32) float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            cvt_floats(src, W.dtype, e, cnt, t);
            v[i] = _mm256_load_ps(t);
          }
        }
        const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
        const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
        const __m256 u[4] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xEE),
                             _mm256_shuffle_ps(t1, t3, 0x44), _mm256_shuffle_ps(t1, t3, 0xEE)};
        float* dst = (sb ? b4 : s4) + g8 * 4;
        for (int k = 0; k < 4; ++k) {  // u[k] = [group k | group k + 4]
          _mm_store_ps(dst + k * 4, _mm256_castps256_ps128(u[k]));
          _mm_store_ps(dst + (k + 4) * 4, _mm256_extractf128_ps(u[k], 1));
        }
      }
    }
    // Software prefetch of the rows PF rows ahead: decode is bound by memory-level parallelism of a
    // single core, and the 4 row streams + scales are too many for the hardware prefetcher alone.
    const int64_t pf_rows = g_prefetch_rows;
    const uint8_t* pf = w[0] + pf_rows * row_bytes;
    const uint8_t* pf_end = wbase + size_t(r1 + 4) * row_bytes;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t u = 0; u < nu; ++u) {
      const int64_t g = u / UPG;
      if (pf_rows > 0 && (u & 1) == 0) {
        for (int i = 0; i < 4; ++i) {
          const uint8_t* a = pf + i * row_bytes + u * (UNIT / 2);
          if (a < pf_end) _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T0);
        }
      }
      // maddubs in both families: on Zen4 the vpdpbusd form of this loop (same sums) measured 10%
      // slower in cache (0.126 against 0.114 ms for 4864x896, one thread), while fast4_h gains 8%.
      __m256i p[4];
      if (UNIT == 64) {
        const __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + u * 64));
        const __m256i xb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + u * 64 + 32));
        for (int i = 0; i < 4; ++i) {
          __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i] + u * 32));
          p[i] = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(v, m4), xa),
                                  _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), xb));
        }
      } else {
        const __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + u * 32));
        for (int i = 0; i < 4; ++i) {
          __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i] + u * 16));
          p[i] = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), m4), xa);
        }
      }
      __m256i h = _mm256_hadd_epi16(_mm256_hadd_epi16(p[0], p[1]), _mm256_hadd_epi16(p[2], p[3]));
      __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(h, ones));
      acc = _mm256_fmadd_ps(
          f, _mm256_mul_ps(_mm256_broadcast_ps(reinterpret_cast<const __m128*>(s4 + g * 4)), _mm256_broadcast_ss(xq.d + u)),
          acc);
    }
    // Bias term in the low half only, as in fast4_h: [b_r0..b_r3 | 0] · Σx_g.
    for (int64_t g = 0; g < ng; ++g)
      acc = _mm256_fmadd_ps(_mm256_insertf128_ps(_mm256_setzero_ps(), _mm_load_ps(b4 + g * 4), 0),
                            _mm256_broadcast_ss(xq.sx + g), acc);
    alignas(16) float o[4];
    _mm_store_ps(o, _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1)));
    for (int i = 0; i < R; ++i) y[r + i] = o[i];
  }
}

// 8-bit GEMV, 2 rows × 1 activation row. Bit-identical to fast8<R, C> for the same (row, x row):
// same int32 block sums, same s·d products, same FMA order, same bias pass and same hsum.
void gemv8(const Weight& W, const XQuant& xq, int64_t r0, int64_t r1, float* y, float* scratch) {
  const int64_t K = W.in, G = W.group, ng = K / G, ngp = xq.ngp;
  const int xb = G == 32 ? 32 : 64;
  const int64_t bpg = G / xb;
  const size_t row_bytes = size_t(K);
  const uint8_t* wbase = static_cast<const uint8_t*>(W.data);
  const __m256i off = _mm256_set1_epi8(char(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  float* sw = scratch;            // [2][ngp]
  float* bw = scratch + 2 * ngp;  // [2][ngp]
  for (int64_t r = r0; r < r1; r += 2) {
    const int R = r + 2 <= r1 ? 2 : 1;
    if (g_prefetch_rows > 0) prefetch_rows(wbase, row_bytes, r + g_prefetch_rows, R, W.out);
    const uint8_t* w[2];
    for (int i = 0; i < 2; ++i) {
      const int64_t ri = r + (i < R ? i : 0);
      w[i] = wbase + size_t(ri) * row_bytes;
      float* s = sw + i * ngp;
      float* b = bw + i * ngp;
      cvt_floats(W.scales, W.dtype, ri * ng, ng, s);
      cvt_floats(W.biases, W.dtype, ri * ng, ng, b);
      for (int64_t g = ng; g < ngp; ++g) s[g] = b[g] = 0;
      for (int64_t g = 0; g < ng; ++g) b[g] += 128.0f * s[g];
    }
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t blk = 0;
    for (int64_t g = 0; g < ng; ++g)
      for (int64_t k = 0; k < bpg; ++k, ++blk) {
        const int64_t pos = blk * xb;
        const float d = xq.d[blk];
        const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.q + pos));
        if (xb == 64) {
          const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.q + pos + 32));
          for (int i = 0; i < 2; ++i) {
            __m256i w0 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i] + pos)), off);
            __m256i w1 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i] + pos + 32)), off);
            __m256i s;
            if constexpr (kVnni) {
              s = dpbusd(dpbusd(_mm256_setzero_si256(), _mm256_abs_epi8(w0), _mm256_sign_epi8(x0, w0)), _mm256_abs_epi8(w1),
                         _mm256_sign_epi8(x1, w1));
            } else {
              __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w0), _mm256_sign_epi8(x0, w0)), ones);
              __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w1), _mm256_sign_epi8(x1, w1)), ones);
              s = _mm256_add_epi32(p0, p1);
            }
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(sw[i * ngp + g] * d), acc[i]);
          }
        } else {
          for (int i = 0; i < 2; ++i) {
            __m256i w0 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i] + pos)), off);
            __m256i p;
            if constexpr (kVnni) p = dpbusd(_mm256_setzero_si256(), _mm256_abs_epi8(w0), _mm256_sign_epi8(x0, w0));
            else p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w0), _mm256_sign_epi8(x0, w0)), ones);
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(sw[i * ngp + g] * d), acc[i]);
          }
        }
      }
    for (int64_t g = 0; g < ngp; g += 8) {
      const __m256 sx = _mm256_loadu_ps(xq.sx + g);
      for (int i = 0; i < 2; ++i) acc[i] = _mm256_fmadd_ps(_mm256_loadu_ps(bw + i * ngp + g), sx, acc[i]);
    }
    for (int i = 0; i < R; ++i) y[r + i] = hsum(acc[i]);
  }
}

void fast_rows(const Weight& W, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y, int64_t ldy,
               float* scratch) {
  if (n == 1 && W.bits == 8) return gemv8(W, xq, r0, r1, y, scratch);
  // Decode, 4-bit: dedicated GEMV with the same arithmetic as the tiled kernel.
  if (n == 1 && W.bits == 4) {
    if (W.group == 32) gemv4_h<32, 1>(W, xq, r0, r1, y, scratch);
    else if (W.group == 64) gemv4_h<64, 1>(W, xq, r0, r1, y, scratch);
    else gemv4_h<64, 2>(W, xq, r0, r1, y, scratch);
    return;
  }
  fast_rows_tiled(W, xq, n, r0, r1, y, ldy, scratch);
}

// ---------------------------------------------------------------------------------------------
// Exact path: rows converted to f32, then an f32 dot micro-kernel.

const float* row_f32(const Weight& W, int64_t r, float* out) {
  const int64_t K = W.in;
  if (W.kind == WeightKind::Dense) {
    if (W.dtype == DType::F32) return static_cast<const float*>(W.data) + r * K;
    cvt_floats(W.data, W.dtype, r * K, K, out);
    return out;
  }
  const int64_t G = W.group, ng = K / G;
  const uint8_t* wr = static_cast<const uint8_t*>(W.data) + size_t(r) * size_t(K) * size_t(W.bits) / 8;
  float sb[2 * 8];
  for (int64_t g = 0; g < ng; ++g) {
    cvt_floats(W.scales, W.dtype, r * ng + g, 1, sb);
    cvt_floats(W.biases, W.dtype, r * ng + g, 1, sb + 1);
    const __m256 s = _mm256_set1_ps(sb[0]), b = _mm256_set1_ps(sb[1]);
    float* o = out + g * G;
    if (W.bits == 4) {
      const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
      const __m256i m = _mm256_set1_epi32(0xF);
      const uint8_t* p = wr + g * G / 2;
      for (int64_t j = 0; j < G; j += 8) {
        uint32_t word;
        std::memcpy(&word, p + j / 2, 4);
        __m256i q = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(word)), shifts), m);
        _mm256_storeu_ps(o + j, _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(q), b));
      }
    } else if (W.bits == 8) {
      const uint8_t* p = wr + g * G;
      for (int64_t j = 0; j < G; j += 8) {
        __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + j)));
        _mm256_storeu_ps(o + j, _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(q), b));
      }
    } else {
      for (int64_t j = 0; j < G; ++j) o[j] = __builtin_fmaf(sb[0], float(packed_code(wr, g * G + j, W.bits)), sb[1]);
    }
  }
  return out;
}

template <int R, int C>
inline void dot_tile(const float* const* w, const float* x, int64_t ldx, int64_t K, float* y, int64_t ldy) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= K; i += 8) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_ps(w[r] + i);
    for (int c = 0; c < C; ++c) {
      __m256 xv = _mm256_loadu_ps(x + c * ldx + i);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(wv[r], xv, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float s = hsum(acc[r][c]);
      for (int64_t k = i; k < K; ++k) s = __builtin_fmaf(w[r][k], x[c * ldx + k], s);
      y[c * ldy + r] = s;
    }
}

void dot_rows(const float* const* w, int R, const float* x, int64_t ldx, int64_t n, int64_t K, float* y,
              int64_t ldy) {
  int64_t c = 0;
  if (R == 2) {
    for (; c + 4 <= n; c += 4) dot_tile<2, 4>(w, x + c * ldx, ldx, K, y + c * ldy, ldy);
    for (; c < n; ++c) dot_tile<2, 1>(w, x + c * ldx, ldx, K, y + c * ldy, ldy);
  } else {
    for (; c + 4 <= n; c += 4) dot_tile<1, 4>(w, x + c * ldx, ldx, K, y + c * ldy, ldy);
    for (; c < n; ++c) dot_tile<1, 1>(w, x + c * ldx, ldx, K, y + c * ldy, ldy);
  }
}

// Exact GEMV, 4 rows at a time for independent FMA chains. Per (row, x) it performs exactly the
// operations of row_f32 + dot_tile (w = fma(s, q, b) in f32; acc = fma(w, x, acc) over i in steps of
// 8; hsum; fma tail), so decode and batched prefill agree bit for bit.
template <int BITS>
inline __m256 affine8(const uint8_t* w, int64_t i) {  // q of elements [i, i+8) as f32
  if (BITS == 4) {
    uint32_t word;
    std::memcpy(&word, w + i / 2, 4);
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(word)), shifts),
                                               _mm256_set1_epi32(0xF)));
  }
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + i))));
}

template <int BITS>
void gemv_affine_exact(const Weight& W, const float* x, int64_t r0, int64_t r1, float* y) {
  const int64_t K = W.in, G = W.group, ng = K / G;
  const size_t row_bytes = size_t(K) * BITS / 8;
  const uint8_t* wbase = static_cast<const uint8_t*>(W.data);
  for (int64_t r = r0; r < r1; r += 4) {
    const int R = r + 4 <= r1 ? 4 : int(r1 - r);
    const uint8_t* w[4];
    for (int i = 0; i < 4; ++i) w[i] = wbase + size_t(r + (i < R ? i : 0)) * row_bytes;
    if (g_prefetch_rows > 0) prefetch_rows(wbase, row_bytes, r + g_prefetch_rows, 4, W.out);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t g = 0; g < ng; ++g) {
      __m256 s[4], b[4];
      for (int i = 0; i < 4; ++i) {
        const int64_t ri = r + (i < R ? i : 0);
        float sb[2];
        cvt_floats(W.scales, W.dtype, ri * ng + g, 1, sb);
        cvt_floats(W.biases, W.dtype, ri * ng + g, 1, sb + 1);
        s[i] = _mm256_set1_ps(sb[0]);
        b[i] = _mm256_set1_ps(sb[1]);
      }
      for (int64_t i = g * G; i < (g + 1) * G; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        for (int k = 0; k < 4; ++k)
          acc[k] = _mm256_fmadd_ps(_mm256_fmadd_ps(s[k], affine8<BITS>(w[k], i), b[k]), xv, acc[k]);
      }
    }
    for (int k = 0; k < R; ++k) y[r + k] = hsum(acc[k]);  // K is a multiple of the group: no tail
  }
}

void gemv_dense(const Weight& W, const float* x, int64_t r0, int64_t r1, float* y) {
  const int64_t K = W.in;
  const size_t es = dtype_size(W.dtype);
  for (int64_t r = r0; r < r1; r += 4) {
    const int R = r + 4 <= r1 ? 4 : int(r1 - r);
    const uint8_t* w[4];
    for (int i = 0; i < 4; ++i) w[i] = static_cast<const uint8_t*>(W.data) + size_t(r + (i < R ? i : 0)) * size_t(K) * es;
    if (g_prefetch_rows > 0)
      prefetch_rows(static_cast<const uint8_t*>(W.data), size_t(K) * es, r + (g_prefetch_rows + 1) / 2, 4, W.out);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 8 <= K; i += 8) {
      const __m256 xv = _mm256_loadu_ps(x + i);
      for (int k = 0; k < 4; ++k) {
        __m256 wv;
        if (W.dtype == DType::F32) {
          wv = _mm256_loadu_ps(reinterpret_cast<const float*>(w[k]) + i);
        } else {
          __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(w[k]) + i));
          wv = W.dtype == DType::BF16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                                      : _mm256_cvtph_ps(h);
        }
        acc[k] = _mm256_fmadd_ps(wv, xv, acc[k]);
      }
    }
    for (int k = 0; k < R; ++k) {
      float sacc = hsum(acc[k]);
      for (int64_t j = i; j < K; ++j) sacc = __builtin_fmaf(load_float(w[k], W.dtype, size_t(j)), x[j], sacc);
      y[r + k] = sacc;
    }
  }
}

void gemv_exact(const Weight& W, const float* x, int64_t r0, int64_t r1, float* y, float* scratch) {
  if (W.kind == WeightKind::Dense) return gemv_dense(W, x, r0, r1, y);
  if (W.bits == 4) return gemv_affine_exact<4>(W, x, r0, r1, y);
  if (W.bits == 8) return gemv_affine_exact<8>(W, x, r0, r1, y);
  for (int64_t r = r0; r < r1; ++r) {
    const float* w = row_f32(W, r, scratch);
    dot_rows(&w, 1, x, W.in, 1, W.in, y + r, 1);
  }
}

uint64_t read_sum(const uint64_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  alignas(32) uint64_t t[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(t), _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  uint64_t s = t[0] + t[1] + t[2] + t[3];
  for (; i < n; ++i) s += p[i];
  return s;
}

