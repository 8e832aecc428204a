// rank_draw, picked at run time: its body (rank_draw_impl.h) compiled for the addon's generic target and for
// AVX2 (the addon itself is built for generic x86-64). Every header is included before the target region, so no
// AVX2 code can reach a function other translation units share (COMDAT), as in cpu/kernels_x86.cpp.
#include "sampling/rank_draw.h"
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>
#include "layers/vec_math.h"
#include "sampling/fixed_weight.h"

namespace rapid {

namespace generic {
namespace {
#include "sampling/rank_draw_impl.h"
}  // namespace
}  // namespace generic

#if defined(__x86_64__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace x86_avx2 {
namespace {
#include "sampling/rank_draw_impl.h"
}  // namespace
}  // namespace x86_avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

namespace {
using RankDraw = int32_t (*)(const float*, const float*, int64_t, float, float, const SampleParams&, double);

RankDraw pick() {
#if defined(__x86_64__)
  if (vec::simd_enabled()) return x86_avx2::rank_draw_impl;  // AVX2 and FMA, unless RAPID_NO_SIMD
#endif
  return generic::rank_draw_impl;
}
}  // namespace

int32_t rank_draw(const float* logits, const float* w, int64_t vocab, float inv_t, float mx_t, const SampleParams& p, double u) {
  static const RankDraw impl = pick();
  return impl(logits, w, vocab, inv_t, mx_t, p, u);
}

}  // namespace rapid
