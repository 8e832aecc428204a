#include "layers/vec_math.h"
#include <cmath>
#include <cstdlib>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rapid::vec {

namespace {

float dot_scalar(const float* a, const float* b, int64_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}
void axpy_scalar(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
int64_t argmax_scalar(const float* x, int64_t n) {
  int64_t a = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[a]) a = i;
  return a;
}
float exp_shift_sum_scalar(float* x, int64_t n, float shift) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += (x[i] = std::exp(x[i] - shift));
  return s;
}
// Two passes, as stored products: a compiler may fuse x * scale - shift into one FMA (other rounding) otherwise.
void scaled_exp_scalar(const float* x, float* w, int64_t n, float scale, float shift) {
  for (int64_t i = 0; i < n; ++i) w[i] = x[i] * scale;
  exp_shift_sum_scalar(w, n, shift);
}

#if defined(__x86_64__)
#define AVX2 __attribute__((target("avx2,fma")))

// exp(x) to ~2 ulp: 2^n · p(r), r = x - n·ln2 in [-ln2/2, ln2/2], degree-6 polynomial (Cephes expf).
AVX2 inline __m256 exp256(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

AVX2 inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

AVX2 float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = hsum256(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

AVX2 void axpy_avx2(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

AVX2 float exp_shift_sum_avx2(float* x, int64_t n, float shift) {
  const __m256 vs = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float s = hsum256(acc);
  for (; i < n; ++i) s += (x[i] = std::exp(x[i] - shift));
  return s;
}

// The empty asm keeps each product a rounded float: with FMA enabled here, GCC would fuse x * scale - shift into
// a vfmsub (measured: other bits than the two-pass form on half the test rows).
AVX2 void scaled_exp_avx2(const float* x, float* w, int64_t n, float scale, float shift) {
  const __m256 vk = _mm256_set1_ps(scale), vs = _mm256_set1_ps(shift);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 t = _mm256_mul_ps(_mm256_loadu_ps(x + i), vk);
    asm("" : "+x"(t));
    _mm256_storeu_ps(w + i, exp256(_mm256_sub_ps(t, vs)));
  }
  for (; i < n; ++i) {
    float t = x[i] * scale;
    asm("" : "+x"(t));
    w[i] = std::exp(t - shift);
  }
}

AVX2 void glu_avx2(float* g, const float* u, int64_t n, Activation a) {
  const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f), two = _mm256_set1_ps(2.0f);
  int64_t i = 0;
  if (a == Activation::Silu) {
    for (; i + 8 <= n; i += 8) {
      const __m256 x = _mm256_loadu_ps(g + i);
      const __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, exp256(_mm256_sub_ps(_mm256_setzero_ps(), x))));
      _mm256_storeu_ps(g + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; ++i) g[i] = silu(g[i]) * u[i];
  } else {
    const __m256 k = _mm256_set1_ps(0.7978845608028654f), c = _mm256_set1_ps(0.044715f);
    for (; i + 8 <= n; i += 8) {
      const __m256 x = _mm256_loadu_ps(g + i);
      const __m256 z = _mm256_mul_ps(k, _mm256_fmadd_ps(_mm256_mul_ps(c, x), _mm256_mul_ps(x, x), x));
      // tanh(z) = 1 - 2 / (exp(2z) + 1): saturates correctly at both ends
      const __m256 t = _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(exp256(_mm256_mul_ps(two, z)), one)));
      const __m256 gl = _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, t));
      _mm256_storeu_ps(g + i, _mm256_mul_ps(gl, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; ++i) g[i] = gelu_tanh(g[i]) * u[i];
  }
}
// argmax_scalar's answer: the largest value first (vmaxps(v, m) keeps m when v is NaN, as `>` does), then
// the first index holding it. x[0] is not NaN here, so neither is the maximum.
AVX2 int64_t argmax_avx2(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(x[0]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float mx = lanes[0];
  for (int j = 1; j < 8; ++j) mx = lanes[j] > mx ? lanes[j] : mx;
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  const __m256 want = _mm256_set1_ps(mx);
  for (i = 0; i + 8 <= n; i += 8)
    if (const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), want, _CMP_EQ_OQ)))
      return i + __builtin_ctz(unsigned(hit));
  for (; i < n; ++i)
    if (x[i] == mx) return i;
  return 0;
}
#undef AVX2
#endif

bool detect() {
#if defined(__x86_64__)
  if (std::getenv("RAPID_NO_SIMD")) return false;  // same switch as the matmul kernels (portable-path tests)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

const bool kSimd = detect();

}  // namespace

bool simd_enabled() { return kSimd; }

float dot(const float* a, const float* b, int64_t n) {
#if defined(__x86_64__)
  if (kSimd) return dot_avx2(a, b, n);
#endif
  return dot_scalar(a, b, n);
}

void axpy(float a, const float* x, float* y, int64_t n) {
#if defined(__x86_64__)
  if (kSimd) return axpy_avx2(a, x, y, n);
#endif
  axpy_scalar(a, x, y, n);
}

int64_t argmax(const float* x, int64_t n) {
  if (n <= 0 || std::isnan(x[0])) return 0;
#if defined(__x86_64__)
  if (kSimd) return argmax_avx2(x, n);
#endif
  return argmax_scalar(x, n);
}

float exp_shift_sum(float* x, int64_t n, float shift) {
#if defined(__x86_64__)
  if (kSimd) return exp_shift_sum_avx2(x, n, shift);
#endif
  return exp_shift_sum_scalar(x, n, shift);
}

void scaled_exp(const float* x, float* w, int64_t n, float scale, float shift) {
#if defined(__x86_64__)
  if (kSimd) return scaled_exp_avx2(x, w, n, scale, shift);
#endif
  scaled_exp_scalar(x, w, n, scale, shift);
}

void glu(float* gate, const float* up, int64_t n, Activation a) {
#if defined(__x86_64__)
  if (kSimd) return glu_avx2(gate, up, n, a);
#endif
  glu_inplace(gate, up, n, a);
}

}  // namespace rapid::vec
