#include "layers/attention_tile.h"
#include <algorithm>
#include <cmath>
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
void pv_scalar(const float* p, int64_t ldp, const float* const* vrow, int64_t lo, int64_t hi, int G, int hd, float* o,
               int64_t ldo) {
  for (int g = 0; g < G; ++g) {
    float* og = o + g * ldo;
    std::fill(og, og + hd, 0.0f);
    for (int64_t j = lo; j <= hi; ++j) {
      const float pj = p[g * ldp + j];
      const float* v = vrow[j];
      for (int d = 0; d < hd; ++d) og[d] += pj * v[d];
    }
  }
}

#if defined(__x86_64__)
#define AVX2 __attribute__((target("avx2,fma")))

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

// R rows (heads of one query token) × DV·8 output dims per pass: R·DV independent FMA chains hide
// the FMA latency; each V row segment is loaded once per pass.
template <int R, int DV>
AVX2 void pv_block(const float* p, int64_t ldp, const float* const* vrow, int64_t lo, int64_t hi, int d, float* o,
                   int64_t ldo) {
  // Fully unrolled so GCC keeps the accumulators in registers (otherwise it spills them every j).
  __m256 acc[R][DV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < DV; ++v) acc[r][v] = _mm256_setzero_ps();
  for (int64_t j = lo; j <= hi; ++j) {
    const float* vj = vrow[j] + d;
    __m256 vv[DV];
#pragma GCC unroll 8
    for (int v = 0; v < DV; ++v) vv[v] = _mm256_loadu_ps(vj + 8 * v);
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

template <int R>
AVX2 void pv_rows(const float* p, int64_t ldp, const float* const* vrow, int64_t lo, int64_t hi, int hd, float* o,
                  int64_t ldo) {
  constexpr int kMaxDV = 8 / R;  // about 8 accumulators in flight
  int d = 0;
  if constexpr (kMaxDV >= 8)
    for (; d + 64 <= hd; d += 64) pv_block<R, 8>(p, ldp, vrow, lo, hi, d, o, ldo);
  if constexpr (kMaxDV >= 4)
    for (; d + 32 <= hd; d += 32) pv_block<R, 4>(p, ldp, vrow, lo, hi, d, o, ldo);
  if constexpr (kMaxDV >= 2)
    for (; d + 16 <= hd; d += 16) pv_block<R, 2>(p, ldp, vrow, lo, hi, d, o, ldo);
  for (; d + 8 <= hd; d += 8) pv_block<R, 1>(p, ldp, vrow, lo, hi, d, o, ldo);
}

AVX2 void pv_avx2(const float* p, int64_t ldp, const float* const* vrow, int64_t lo, int64_t hi, int G, int hd, float* o,
                  int64_t ldo) {
  int g = 0;
  for (; g + 4 <= G; g += 4) pv_rows<4>(p + g * ldp, ldp, vrow, lo, hi, hd, o + g * ldo, ldo);
  for (; g + 2 <= G; g += 2) pv_rows<2>(p + g * ldp, ldp, vrow, lo, hi, hd, o + g * ldo, ldo);
  for (; g < G; ++g) pv_rows<1>(p + g * ldp, ldp, vrow, lo, hi, hd, o + g * ldo, ldo);
}
#undef AVX2
#endif

}  // namespace

void attention_tile(const AttnTile& t, AttnScratch& sc) {
  const int hd = t.hd, G = t.group;
  const int64_t M = t.n_q * G;
  // Last visible key of each query token: itself, or the end of its bidirectional block.
  std::vector<int64_t> qhi(static_cast<size_t>(t.n_q));
  int64_t qlast = 0;
  for (int64_t ti = 0; ti < t.n_q; ++ti) {
    const int64_t qpos = t.qpos0 + ti;
    int64_t last = qpos;
    for (int64_t b = 0; b < t.n_bidir; ++b) {
      const int64_t s = t.bidir_base + t.bidir[2 * b], e = t.bidir_base + t.bidir[2 * b + 1];
      if (qpos >= s && qpos < e) { last = std::max(last, e - 1); break; }
    }
    qhi[size_t(ti)] = last;
    qlast = std::max(qlast, last);
  }
  const int64_t kstart = t.window > 0 ? std::max<int64_t>(0, t.qpos0 - t.window + 1) : 0;
  const int64_t Nk = qlast - kstart + 1;
  const int64_t Nkp = (Nk + 15) / 16 * 16;
#if defined(__x86_64__)
  const bool simd = vec::simd_enabled() && hd % 8 == 0;
#else
  [[maybe_unused]] const bool simd = false;  // read only by the AVX2 branches below
#endif

  sc.qt.resize(size_t(M * hd));
  for (int64_t ti = 0; ti < t.n_q; ++ti)
    for (int g = 0; g < G; ++g)
      std::copy_n(t.q + ti * t.n_heads * hd + g * hd, hd, sc.qt.data() + (ti * G + g) * hd);

  // V row pointers; keys are transposed to [hd, Nkp] (zero padded) for the panel kernel. A decode tile (one
  // query token) takes the same path, so a token's scores are bit-identical whether it decodes alone or is
  // one of several query tokens (a verified speculative draft, a prefill chunk).
  std::vector<const float*> vrow(static_cast<size_t>(Nk));
  sc.s.resize(size_t(M * Nkp));
  sc.kt.assign(size_t(hd * Nkp), 0.0f);
  for (int64_t j = 0; j < Nk; ++j) {
    const int64_t k = kstart + j;
    const size_t off = size_t(t.block_table[k / t.block_size]) * t.block_stride + size_t(k % t.block_size) * t.token_stride;
    const float* kr = t.k_base + off;  // [hd]
    for (int d = 0; d < hd; ++d) sc.kt[size_t(d * Nkp + j)] = kr[d];
    vrow[size_t(j)] = t.v_base + off;
  }
#if defined(__x86_64__)
  if (simd) scores_avx2(sc.qt.data(), sc.kt.data(), sc.s.data(), M, Nkp, hd);
  else
#endif
    scores_scalar(sc.qt.data(), sc.kt.data(), sc.s.data(), M, Nkp, hd);

  // Softmax per row over its own key range [lo, hi]; entries outside are set to exactly 0 so rows of
  // different query tokens can share one P·V pass (fma(0, v, acc) == acc: results are unchanged).
  std::vector<int64_t> lo(static_cast<size_t>(M)), hi(static_cast<size_t>(M));
  for (int64_t m = 0; m < M; ++m) {
    const int64_t qpos = t.qpos0 + m / G;
    lo[size_t(m)] = (t.window > 0 ? std::max<int64_t>(0, qpos - t.window + 1) : 0) - kstart;
    hi[size_t(m)] = qhi[size_t(m / G)] - kstart;
    float* sr = sc.s.data() + m * Nkp;  // [Nkp]
    float mx = -INFINITY;
    for (int64_t j = lo[size_t(m)]; j <= hi[size_t(m)]; ++j) mx = std::max(mx, sr[j] *= t.scale);
    const float inv = 1.0f / vec::exp_shift_sum(sr + lo[size_t(m)], hi[size_t(m)] - lo[size_t(m)] + 1, mx);
    for (int64_t j = lo[size_t(m)]; j <= hi[size_t(m)]; ++j) sr[j] *= inv;
    std::fill(sr, sr + lo[size_t(m)], 0.0f);
    std::fill(sr + hi[size_t(m)] + 1, sr + Nkp, 0.0f);
  }
  // Output row m = (token ti, head g) lives at out[ti*n_heads*hd + g*hd]: G rows of a token are
  // contiguous, so a block of rows is a strided run only within one token; write via a row buffer.
  sc.o.resize(size_t(M * hd));
  for (int64_t m0 = 0; m0 < M;) {
    const int R = int(std::min<int64_t>(4, M - m0));
    const int Rb = R >= 4 ? 4 : R >= 2 ? 2 : 1;
    int64_t jl = lo[size_t(m0)], jh = hi[size_t(m0)];
    for (int r = 1; r < Rb; ++r) {
      jl = std::min(jl, lo[size_t(m0 + r)]);
      jh = std::max(jh, hi[size_t(m0 + r)]);
    }
    const float* p = sc.s.data() + m0 * Nkp;
#if defined(__x86_64__)
    if (simd) pv_avx2(p, Nkp, vrow.data(), jl, jh, Rb, hd, sc.o.data() + m0 * hd, hd);
    else
#endif
      pv_scalar(p, Nkp, vrow.data(), jl, jh, Rb, hd, sc.o.data() + m0 * hd, hd);
    m0 += Rb;
  }
  for (int64_t m = 0; m < M; ++m)
    std::copy_n(sc.o.data() + m * hd, hd, t.out + (m / G) * t.n_heads * hd + (m % G) * hd);
}

}  // namespace rapid
