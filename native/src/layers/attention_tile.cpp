#include "layers/attention_tile.h"
#include <algorithm>
#include <cmath>
#include "kv/kv_convert.h"
#include "layers/vec_math.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rapid {

namespace {

// S[m, j] = Σ_d qt[m, d] · kt[d, j] for m in [0, M), j in [0, Nkp) — scalar reference path.
void scores_scalar(const float* qt, const float* kt, float* s, int64_t M, int64_t Nkp, int hd) {
  for (int64_t m = 0; m < M; ++m) {
    float* sr = s + m * Nkp;
    std::fill(sr, sr + Nkp, 0.0f);
    for (int d = 0; d < hd; ++d) {
      const float qv = qt[m * hd + d];
      const float* kr = kt + int64_t(d) * Nkp;
      for (int64_t j = 0; j < Nkp; ++j) sr[j] += qv * kr[j];
    }
  }
}

// o[g, :] = Σ_{j in [lo, hi]} p[g][j] · v[j] for the G rows of one query token.
void pv_scalar(const float* p, int64_t ldp, const void* const* vrow, int64_t lo, int64_t hi, int G, int hd, float* o,
               int64_t ldo) {
  for (int g = 0; g < G; ++g) {
    float* og = o + g * ldo;
    std::fill(og, og + hd, 0.0f);
    for (int64_t j = lo; j <= hi; ++j) {
      const float pj = p[g * ldp + j];
      const float* v = static_cast<const float*>(vrow[j]);
      for (int d = 0; d < hd; ++d) og[d] += pj * v[d];
    }
  }
}

// x[j] *= scale for j in [0, n); returns the largest result. The same products in any path, and a max is
// exact in any order, so the SIMD form gives the same bits.
float scale_max_scalar(float* x, int64_t n, float scale) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, x[j] *= scale);
  return mx;
}

#if defined(__x86_64__)
#define AVX2 __attribute__((target("avx2,fma")))

AVX2 float scale_max_avx2(float* x, int64_t n, float scale) {
  const __m256 vs = _mm256_set1_ps(scale);
  __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256 a = _mm256_mul_ps(_mm256_loadu_ps(x + j), vs), b = _mm256_mul_ps(_mm256_loadu_ps(x + j + 8), vs);
    _mm256_storeu_ps(x + j, a);
    _mm256_storeu_ps(x + j + 8, b);
    m0 = _mm256_max_ps(m0, a);
    m1 = _mm256_max_ps(m1, b);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_max_ps(m0, m1));
  float mx = scale_max_scalar(x + j, n - j, scale);
  for (float v : lanes) mx = std::max(mx, v);
  return mx;
}

// R query rows × 16 keys per inner step; every (m, j) gets the same FMA chain over d, so results do
// not depend on where a row or key falls in a tile.
template <int R>
AVX2 void scores_rows(const float* qt, const float* kt, float* s, int64_t Nkp, int hd) {
  for (int64_t j = 0; j < Nkp; j += 16) {
    __m256 a0[R], a1[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
    for (int d = 0; d < hd; ++d) {
      const __m256 k0 = _mm256_loadu_ps(kt + int64_t(d) * Nkp + j);
      const __m256 k1 = _mm256_loadu_ps(kt + int64_t(d) * Nkp + j + 8);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256 qb = _mm256_broadcast_ss(qt + int64_t(r) * hd + d);
        a0[r] = _mm256_fmadd_ps(qb, k0, a0[r]);
        a1[r] = _mm256_fmadd_ps(qb, k1, a1[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(s + r * Nkp + j, a0[r]);
      _mm256_storeu_ps(s + r * Nkp + j + 8, a1[r]);
    }
  }
}

AVX2 void scores_avx2(const float* qt, const float* kt, float* s, int64_t M, int64_t Nkp, int hd) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) scores_rows<4>(qt + m * hd, kt, s + m * Nkp, Nkp, hd);
  for (; m < M; ++m) scores_rows<1>(qt + m * hd, kt, s + m * Nkp, Nkp, hd);
}

// Eight stored values of a V row from element i as f32: the same conversions as kv::load_row, so a
// fused read equals reading a converted row (f16/bf16 widen exactly; int8 is one multiply by its scale).
#define AVX2_F16C __attribute__((target("avx2,fma,f16c")))
template <KvDtype T>
AVX2_F16C inline __m256 load8(const uint8_t* row, int i, __m256 scale) {
  if constexpr (T == KvDtype::F32) return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  if constexpr (T == KvDtype::F16) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
  if constexpr (T == KvDtype::BF16)
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i))), 16));
  if constexpr (T == KvDtype::I8)
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i)))),
                         scale);
  return _mm256_setzero_ps();
}

// R rows (heads of one query token) × DV·8 output dims per pass: R·DV independent FMA chains hide
// the FMA latency; each V row segment is loaded (and converted, for 16-bit / int8 caches) once per pass.
// vscale [Nk]: the rows' int8 scales (T == I8 only).
template <KvDtype T, int R, int DV>
AVX2_F16C void pv_block(const float* p, int64_t ldp, const void* const* vrow, const float* vscale, int64_t lo, int64_t hi,
                        int d, float* o, int64_t ldo) {
  // Fully unrolled so GCC keeps the accumulators in registers (otherwise it spills them every j).
  __m256 acc[R][DV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < DV; ++v) acc[r][v] = _mm256_setzero_ps();
  for (int64_t j = lo; j <= hi; ++j) {
    const uint8_t* vj = static_cast<const uint8_t*>(vrow[j]);
    const __m256 sj = T == KvDtype::I8 ? _mm256_set1_ps(vscale[j]) : _mm256_setzero_ps();
    __m256 vv[DV];
#pragma GCC unroll 8
    for (int v = 0; v < DV; ++v) vv[v] = load8<T>(vj, d + 8 * v, sj);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 pb = _mm256_broadcast_ss(p + r * ldp + j);
#pragma GCC unroll 8
      for (int v = 0; v < DV; ++v) acc[r][v] = _mm256_fmadd_ps(pb, vv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < DV; ++v) _mm256_storeu_ps(o + r * ldo + d + 8 * v, acc[r][v]);
}

template <KvDtype T, int R>
AVX2_F16C void pv_rows(const float* p, int64_t ldp, const void* const* vrow, const float* vscale, int64_t lo, int64_t hi,
                       int hd, float* o, int64_t ldo) {
  constexpr int kMaxDV = 8 / R;  // about 8 accumulators in flight
  int d = 0;
  if constexpr (kMaxDV >= 8)
    for (; d + 64 <= hd; d += 64) pv_block<T, R, 8>(p, ldp, vrow, vscale, lo, hi, d, o, ldo);
  if constexpr (kMaxDV >= 4)
    for (; d + 32 <= hd; d += 32) pv_block<T, R, 4>(p, ldp, vrow, vscale, lo, hi, d, o, ldo);
  if constexpr (kMaxDV >= 2)
    for (; d + 16 <= hd; d += 16) pv_block<T, R, 2>(p, ldp, vrow, vscale, lo, hi, d, o, ldo);
  for (; d + 8 <= hd; d += 8) pv_block<T, R, 1>(p, ldp, vrow, vscale, lo, hi, d, o, ldo);
}

template <KvDtype T>
AVX2_F16C void pv_avx2(const float* p, int64_t ldp, const void* const* vrow, const float* vscale, int64_t lo, int64_t hi,
                       int G, int hd, float* o, int64_t ldo) {
  int g = 0;
  for (; g + 4 <= G; g += 4) pv_rows<T, 4>(p + g * ldp, ldp, vrow, vscale, lo, hi, hd, o + g * ldo, ldo);
  for (; g + 2 <= G; g += 2) pv_rows<T, 2>(p + g * ldp, ldp, vrow, vscale, lo, hi, hd, o + g * ldo, ldo);
  for (; g < G; ++g) pv_rows<T, 1>(p + g * ldp, ldp, vrow, vscale, lo, hi, hd, o + g * ldo, ldo);
}

// The P·V pass over rows stored as t (f32 rows: f32 caches, or converted ones).
AVX2_F16C void pv_simd(KvDtype t, const float* p, int64_t ldp, const void* const* vrow, const float* vscale, int64_t lo,
                       int64_t hi, int G, int hd, float* o, int64_t ldo) {
  switch (t) {
    case KvDtype::F32: return pv_avx2<KvDtype::F32>(p, ldp, vrow, vscale, lo, hi, G, hd, o, ldo);
    case KvDtype::F16: return pv_avx2<KvDtype::F16>(p, ldp, vrow, vscale, lo, hi, G, hd, o, ldo);
    case KvDtype::BF16: return pv_avx2<KvDtype::BF16>(p, ldp, vrow, vscale, lo, hi, G, hd, o, ldo);
    case KvDtype::I8: return pv_avx2<KvDtype::I8>(p, ldp, vrow, vscale, lo, hi, G, hd, o, ldo);
  }
}
#undef AVX2_F16C
#undef AVX2
#endif

}  // namespace

void attention_tile(const AttnTile& t, AttnScratch& sc) {
  const int hd = t.hd, G = t.group;
  const int64_t M = t.n_q * G;
  // Visible keys [qlo, qhi] of each query token: the window's start (or 0) to itself, or to the end of
  // its bidirectional block.
  sc.qlo.resize(size_t(t.n_q));
  sc.qhi.resize(size_t(t.n_q));
  int64_t klo = INT64_MAX, khi = -1;
  for (int64_t ti = 0; ti < t.n_q; ++ti) {
    const int64_t qpos = t.qpos0 + ti;
    int64_t last = qpos;
    for (int64_t b = 0; b < t.n_bidir; ++b) {
      const int64_t s = t.bidir_base + t.bidir[2 * b], e = t.bidir_base + t.bidir[2 * b + 1];
      if (qpos >= s && qpos < e) { last = std::max(last, e - 1); break; }
    }
    sc.qlo[size_t(ti)] = t.window > 0 ? std::max<int64_t>(0, qpos - t.window + 1) : 0;
    sc.qhi[size_t(ti)] = last;
    klo = std::min(klo, sc.qlo[size_t(ti)]);
    khi = std::max(khi, last);
  }
#if defined(__x86_64__)
  const bool simd = vec::simd_enabled() && hd % 8 == 0;
#else
  [[maybe_unused]] const bool simd = false;  // read only by the AVX2 branches below
#endif

  sc.qt.resize(size_t(M * hd));
  for (int64_t ti = 0; ti < t.n_q; ++ti)
    for (int g = 0; g < G; ++g)
      std::copy_n(t.q + ti * t.n_heads * hd + g * hd, hd, sc.qt.data() + (ti * G + g) * hd);

  // Rows of key/value j as f32 [hd]: f32 caches are read in place, others converted (exactly the same
  // values whatever the tile, so batch invariance holds for every dtype). Values of 16-bit / int8 caches
  // are converted inside the SIMD P·V pass where it can (vrow then points at the stored codes);
  // otherwise into sc.vc first. Both give the same f32 values.
  const bool f32 = t.dtype == KvDtype::F32;
  const size_t eb = kv_elem_bytes(t.dtype);
#if defined(__x86_64__)
  const bool fused_v = !f32 && simd && hd % 8 == 0 && kv::simd_loads();
#else
  const bool fused_v = false;
#endif
  [[maybe_unused]] const KvDtype vrow_type = fused_v ? t.dtype : KvDtype::F32;
  constexpr int64_t KT = kAttnKeyTile;
  if (!f32) sc.kr.resize(size_t(hd));
  if (!f32 && !fused_v) sc.vc.resize(size_t(KT * hd));
  if (fused_v && t.dtype == KvDtype::I8) sc.vs.resize(size_t(KT));
  sc.vrow.resize(size_t(KT));
  auto slot_of = [&](int64_t k) {
    return size_t(t.block_table[k / t.block_size]) * t.block_stride + size_t(k % t.block_size) * t.token_stride;
  };
  auto key_row = [&](size_t off) -> const float* {
    if (f32) return reinterpret_cast<const float*>(t.k_base) + off;
    kv::load_row(t.dtype, t.k_base + off * eb, t.ks_base ? t.ks_base + off / size_t(hd) : nullptr, sc.kr.data(), hd);
    return sc.kr.data();
  };
  auto value_row = [&](size_t off, int64_t j) -> const void* {
    if (f32) return reinterpret_cast<const float*>(t.v_base) + off;
    if (fused_v) {
      if (t.dtype == KvDtype::I8) sc.vs[size_t(j)] = kv::f16_to_f32(t.vs_base[off / size_t(hd)]);
      return t.v_base + off * eb;
    }
    float* dst = sc.vc.data() + j * hd;
    kv::load_row(t.dtype, t.v_base + off * eb, t.vs_base ? t.vs_base + off / size_t(hd) : nullptr, dst, hd);
    return dst;
  };

  // Flash-style: keys in tiles of KT at fixed absolute positions [kb, kb + KT), a running max, sum and
  // output per row (online softmax), so memory is O(M · (KT + hd)) at any context length. A row's
  // arithmetic depends only on its own key range and the fixed tile grid, never on the other rows of
  // its chunk: a token decodes to the same bits alone, in a prefill chunk or in a verified draft.
  sc.o.assign(size_t(M * hd), 0.0f);
  sc.mx.assign(size_t(M), -INFINITY);
  sc.sum.assign(size_t(M), 0.0f);
  sc.alpha.resize(size_t(M));
  sc.ra.resize(size_t(M));
  sc.rb.resize(size_t(M));
  sc.ot.resize(size_t(M * hd));
  for (int64_t kb = klo / KT * KT; kb <= khi; kb += KT) {
    const int64_t j0 = std::max(kb, klo), j1 = std::min(kb + KT - 1, khi);  // keys loaded: [j0, j1]
    const int64_t Nk = j1 - j0 + 1, Nkp = (Nk + 15) / 16 * 16;
    sc.kt.assign(size_t(hd * Nkp), 0.0f);  // [hd, Nkp] keys transposed, zero padded
    for (int64_t j = 0; j < Nk; ++j) {
      const size_t off = slot_of(j0 + j);
      const float* kr = key_row(off);  // [hd]
      for (int d = 0; d < hd; ++d) sc.kt[size_t(d * Nkp + j)] = kr[d];
      sc.vrow[size_t(j)] = value_row(off, j);
    }
    sc.s.resize(size_t(M * Nkp));
#if defined(__x86_64__)
    if (simd) scores_avx2(sc.qt.data(), sc.kt.data(), sc.s.data(), M, Nkp, hd);
    else
#endif
      scores_scalar(sc.qt.data(), sc.kt.data(), sc.s.data(), M, Nkp, hd);

    // Per row: its keys [a, b] in this tile (tile-local; a > b: none), the new running max, the scale
    // alpha of what it had, and its probabilities (exactly 0 outside [a, b], so rows of different
    // query tokens share one P·V pass: fma(0, v, acc) == acc).
    for (int64_t m = 0; m < M; ++m) {
      const int64_t a = std::max(sc.qlo[size_t(m / G)], j0) - j0, b = std::min(sc.qhi[size_t(m / G)], j1) - j0;
      sc.ra[size_t(m)] = a;
      sc.rb[size_t(m)] = b;
      float* sr = sc.s.data() + m * Nkp;  // [Nkp]
      if (a > b) {
        std::fill(sr, sr + Nkp, 0.0f);
        continue;
      }
#if defined(__x86_64__)
      const float mt = simd ? scale_max_avx2(sr + a, b - a + 1, t.scale) : scale_max_scalar(sr + a, b - a + 1, t.scale);
#else
      const float mt = scale_max_scalar(sr + a, b - a + 1, t.scale);
#endif
      const float mnew = std::max(sc.mx[size_t(m)], mt);
      sc.alpha[size_t(m)] = std::exp(sc.mx[size_t(m)] - mnew);  // exp(-inf) = 0 on the first tile
      sc.mx[size_t(m)] = mnew;
      sc.sum[size_t(m)] = sc.sum[size_t(m)] * sc.alpha[size_t(m)] + vec::exp_shift_sum(sr + a, b - a + 1, mnew);
      std::fill(sr, sr + a, 0.0f);
      std::fill(sr + b + 1, sr + Nkp, 0.0f);
    }
    // Output row m = (token ti, head g): P·V of this tile in blocks of up to 4 rows, then folded into
    // the running output.
    for (int64_t m0 = 0; m0 < M;) {
      const int R = int(std::min<int64_t>(4, M - m0));
      const int Rb = R >= 4 ? 4 : R >= 2 ? 2 : 1;
      int64_t jl = INT64_MAX, jh = -1;
      for (int r = 0; r < Rb; ++r)
        if (sc.ra[size_t(m0 + r)] <= sc.rb[size_t(m0 + r)]) {
          jl = std::min(jl, sc.ra[size_t(m0 + r)]);
          jh = std::max(jh, sc.rb[size_t(m0 + r)]);
        }
      if (jh >= 0) {
        const float* p = sc.s.data() + m0 * Nkp;
#if defined(__x86_64__)
        if (simd) pv_simd(vrow_type, p, Nkp, sc.vrow.data(), sc.vs.data(), jl, jh, Rb, hd, sc.ot.data() + m0 * hd, hd);
        else
#endif
          pv_scalar(p, Nkp, sc.vrow.data(), jl, jh, Rb, hd, sc.ot.data() + m0 * hd, hd);
        for (int r = 0; r < Rb; ++r) {
          const int64_t m = m0 + r;
          if (sc.ra[size_t(m)] > sc.rb[size_t(m)]) continue;
          float* om = sc.o.data() + m * hd;
          const float* tm = sc.ot.data() + m * hd;
          const float al = sc.alpha[size_t(m)];
          for (int d = 0; d < hd; ++d) om[d] = om[d] * al + tm[d];
        }
      }
      m0 += Rb;
    }
  }
  // Output row m = (token ti, head g) lives at out[ti*n_heads*hd + g*hd].
  for (int64_t m = 0; m < M; ++m) {
    const float inv = 1.0f / sc.sum[size_t(m)];
    const float* om = sc.o.data() + m * hd;
    float* dst = t.out + (m / G) * t.n_heads * hd + (m % G) * hd;
    for (int d = 0; d < hd; ++d) dst[d] = om[d] * inv;
  }
}

}  // namespace rapid
