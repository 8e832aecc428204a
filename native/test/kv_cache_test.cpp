// The KV cache's stored types (kv/kv_convert, kv/kv_pool, layers/attention): f16/bf16/int8 store + load
// round trips within their error bounds, the portable f16 rounding equal to F16C's, the SIMD and portable
// loads bit-identical, pool capacity per dtype, and paged attention over a 16-bit / int8 pool bit-identical
// to attention over an f32 pool holding the same (rounded) values; over contexts of several key tiles
// (flash-style online softmax), the same bits whatever the query chunking (one prefill, chunks, decode
// tokens) and a double-precision reference within 1e-5. Prints "N passed, M failed".
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>
#include "check.h"
#include "kv/kv_convert.h"
#include "kv/kv_pool.h"
#include "layers/attention.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace rapid;

namespace {

constexpr KvDtype kAll[] = {KvDtype::F32, KvDtype::F16, KvDtype::BF16, KvDtype::I8};

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t hw_f16(float f) { return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }
#endif

void round_trips() {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const int heads = 3, hd = 40;  // hd not a multiple of 8: the SIMD loads' scalar tails run too
  std::vector<float> x(static_cast<size_t>(heads * hd)), y(static_cast<size_t>(hd));
  for (int trial = 0; trial < 200; ++trial) {
    for (float& v : x) v = nd(rng) * (trial % 7 == 0 ? 1e-3f : 1.0f);
    if (trial % 11 == 0) x[5] = 0.0f;
    for (KvDtype t : kAll) {
      std::vector<uint8_t> codes(size_t(heads * hd) * kv_elem_bytes(t));
      std::vector<uint16_t> scales(static_cast<size_t>(heads));
      kv::store_slot(t, x.data(), codes.data(), scales.data(), heads, hd);
      for (int h = 0; h < heads; ++h) {
        kv::load_row(t, codes.data() + size_t(h * hd) * kv_elem_bytes(t), scales.data() + h, y.data(), hd);
        const float* xs = x.data() + h * hd;
        float amax = 0;
        for (int d = 0; d < hd; ++d) amax = std::max(amax, std::fabs(xs[d]));
        bool ok = true;
        for (int d = 0; d < hd; ++d) {
          const float e = std::fabs(y[size_t(d)] - xs[d]);
          switch (t) {
            case KvDtype::F32: ok &= e == 0; break;
            case KvDtype::F16: ok &= e <= std::fabs(xs[d]) * 0x1p-11f + 0x1p-25f; break;  // half an ulp (or subnormal step)
            case KvDtype::BF16: ok &= e <= std::fabs(xs[d]) * 0x1p-8f; break;
            case KvDtype::I8: ok &= e <= amax / 127.0f * (0.5f + 0x1p-9f) + 1e-30f; break;  // half a step of an f16 scale
          }
        }
        CHECK(ok, "%s round trip within bound (trial %d head %d)", kv_dtype_name(t), trial, h);
        // The load equals the portable definition, element by element (SIMD == scalar).
        bool same = true;
        for (int d = 0; d < hd; ++d) {
          float ref = 0;
          const uint8_t* c = codes.data() + size_t(h * hd + d) * kv_elem_bytes(t);
          uint16_t u = 0;
          if (kv_elem_bytes(t) == 2) std::memcpy(&u, c, 2);
          if (t == KvDtype::F32) std::memcpy(&ref, c, 4);
          if (t == KvDtype::F16) ref = kv::f16_to_f32(u);
          if (t == KvDtype::BF16) ref = kv::bf16_to_f32(u);
          if (t == KvDtype::I8) ref = float(int8_t(*c)) * kv::f16_to_f32(scales[size_t(h)]);
          same &= std::memcmp(&ref, &y[size_t(d)], 4) == 0;
        }
        CHECK(same, "%s load equals the portable conversion (trial %d)", kv_dtype_name(t), trial);
      }
    }
  }
  // f16 rounding: round-to-nearest-even, overflow to inf, subnormals, NaN, equal to F16C's where it exists.
  CHECK(kv::f32_to_f16(1.0f) == 0x3c00, "f16(1)");
  CHECK(kv::f32_to_f16(65504.0f) == 0x7bff, "f16(max)");
  CHECK(kv::f32_to_f16(65520.0f) == 0x7c00, "f16 overflow is inf");
  CHECK(kv::f32_to_f16(0x1p-24f) == 0x0001, "f16 smallest subnormal");
  CHECK(kv::f32_to_f16(1.0f + 0x1p-11f) == 0x3c00, "f16 tie rounds to even");
  CHECK(std::isnan(kv::f16_to_f32(kv::f32_to_f16(NAN))), "f16 NaN stays NaN");
  CHECK(std::isnan(kv::bf16_to_f32(kv::f32_to_bf16(NAN))), "bf16 NaN stays NaN");
  CHECK(kv::f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80, "bf16 tie rounds to even");
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("f16c")) {
    int bad = 0;
    for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4093) {  // a stride across every exponent
      const float f = std::bit_cast<float>(uint32_t(u));
      if (std::isnan(f)) continue;
      bad += kv::f32_to_f16(f) != hw_f16(f);
    }
    CHECK(bad == 0, "portable f32->f16 equals F16C on %d sampled floats", bad);
  }
#endif
}

void capacity() {
  const std::vector<KvLayerSpec> layers = {{2, 32, -1}, {2, 32, -1}, {2, 32, 0}};  // the last reads layer 0's cache
  const size_t budget = size_t(8) << 20;
  const int f32 = KvPool(layers, 16, budget, false, KvDtype::F32).num_blocks();
  const int f16 = KvPool(layers, 16, budget, false, KvDtype::F16).num_blocks();
  const int bf16 = KvPool(layers, 16, budget, false, KvDtype::BF16).num_blocks();
  const int i8 = KvPool(layers, 16, budget, false, KvDtype::I8).num_blocks();
  CHECK(f16 == 2 * f32 && bf16 == 2 * f32, "16-bit holds 2x f32's blocks (%d, %d vs %d)", f16, bf16, f32);
  CHECK(double(i8) >= 3.5 * f32, "int8 holds >= 3.5x f32's blocks (%d vs %d)", i8, f32);
  for (KvDtype t : kAll) {
    const KvPool p(layers, 16, budget, false, t);
    CHECK(p.bytes() <= budget && p.bytes() + p.bytes_per_block() > budget, "%s pool fills its budget", kv_dtype_name(t));
  }
}

// Rounds x [T, n_kv, hd] through dtype t, the values attention reads back from such a pool.
std::vector<float> rounded(KvDtype t, const std::vector<float>& x, int T, int n_kv, int hd) {
  std::vector<float> out(x.size());
  std::vector<uint8_t> codes(size_t(n_kv * hd) * 4);
  std::vector<uint16_t> sc(static_cast<size_t>(n_kv));
  for (int i = 0; i < T; ++i) {
    kv::store_slot(t, x.data() + size_t(i * n_kv * hd), codes.data(), sc.data(), n_kv, hd);
    for (int h = 0; h < n_kv; ++h)
      kv::load_row(t, codes.data() + size_t(h * hd) * kv_elem_bytes(t), sc.data() + h, out.data() + size_t((i * n_kv + h) * hd), hd);
  }
  return out;
}

// Writes k, v [T, n_kv, hd] and runs paged attention of q [T, n_heads, hd] as the given chunks (each
// [c0, c1) after the previous ones) over a pool of dtype dt; returns the outputs.
std::vector<float> attend_chunks(ThreadPool& pool, KvDtype dt, size_t pool_bytes, int bs, const std::vector<int32_t>& table,
                                 const AttnShape& s, const std::vector<float>& q, const std::vector<float>& kk,
                                 const std::vector<float>& vv, const std::vector<std::pair<int, int>>& chunks) {
  const std::vector<KvLayerSpec> layers = {{s.n_kv_heads, s.head_dim, -1}};
  KvPool kvp(layers, bs, pool_bytes, true, dt);
  std::vector<float> out(q.size());
  const size_t kw = size_t(s.n_kv_heads * s.head_dim), qw = size_t(s.n_heads * s.head_dim);
  for (auto [c0, c1] : chunks) {
    SeqSpan sp;
    sp.n = c1 - c0;
    sp.context_len = c0;
    sp.block_table = table.data();
    sp.n_blocks = int64_t(table.size());
    write_kv(kvp, 0, kk.data() + size_t(c0) * kw, vv.data() + size_t(c0) * kw, {sp});
    paged_attention(pool, kvp, 0, q.data() + size_t(c0) * qw, out.data() + size_t(c0) * qw, {sp}, s);
  }
  return out;
}

// Normal random q [T, n_heads, hd], k and v [T, n_kv, hd], and the attention shape over them.
struct AttnCase {
  std::vector<float> q, k, v;
  AttnShape s;
};
AttnCase attn_case(unsigned seed, int T, int n_heads, int n_kv, int hd, float scale) {
  AttnCase c;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  c.q.resize(size_t(T * n_heads * hd));
  c.k.resize(size_t(T * n_kv * hd));
  c.v.resize(c.k.size());
  for (std::vector<float>* x : {&c.q, &c.k, &c.v})
    for (float& e : *x) e = nd(rng);
  c.s.n_heads = n_heads;
  c.s.n_kv_heads = n_kv;
  c.s.head_dim = hd;
  c.s.scale = scale;
  return c;
}

void attention_equivalence() {
  ThreadPool pool(2);
  const int n_kv = 2, hd = 32, n_heads = 4, bs = 16, T = 45;
  AttnCase c = attn_case(3, T, n_heads, n_kv, hd, 0.17f);
  const std::vector<float>&q = c.q, &k = c.k, &v = c.v;
  AttnShape& s = c.s;
  const std::vector<int32_t> table = {3, 0, 2, 5};  // out-of-order blocks
  for (int window : {0, 20})
    for (KvDtype t : kAll) {
      s.window = window;
      // Prefill in two chunks (30 + 14), then one decode token: every read path of attention_tile.
      auto run = [&](KvDtype dt, const std::vector<float>& kk, const std::vector<float>& vv) {
        return attend_chunks(pool, dt, size_t(1) << 20, bs, table, s, q, kk, vv, {{0, 30}, {30, 44}, {44, 45}});
      };
      const std::vector<float> got = run(t, k, v);
      const std::vector<float> want = run(KvDtype::F32, rounded(t, k, T, n_kv, hd), rounded(t, v, T, n_kv, hd));
      CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0,
            "%s attention (window %d) equals f32 attention over the same rounded keys and values", kv_dtype_name(t), window);
    }
}

// Grouped heads of 32 over 520 tokens: three key tiles of kAttnKeyTile, the last partial, a window
// crossing tile edges; decode tokens across the last edge (small enough for the scalar path under qemu).
void long_attention() {
  ThreadPool pool(2);
  const int n_kv = 2, hd = 32, n_heads = 4, G = n_heads / n_kv, bs = 16, T = 520;
  AttnCase c = attn_case(11, T, n_heads, n_kv, hd, 0.125f);
  const std::vector<float>&q = c.q, &k = c.k, &v = c.v;
  AttnShape& s = c.s;
  std::vector<int32_t> table(size_t((T + bs - 1) / bs));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t((i * 7) % table.size());  // 7 is coprime to 33
  for (int window : {0, 300})
    for (KvDtype t : {KvDtype::F32, KvDtype::F16}) {
      s.window = window;
      auto run = [&](const std::vector<std::pair<int, int>>& chunks) {
        return attend_chunks(pool, t, size_t(64) << 20, bs, table, s, q, k, v, chunks);
      };
      const std::vector<float> one = run({{0, T}});
      const std::vector<float> chunked = run({{0, 255}, {255, 511}, {511, 517}, {517, 518}, {518, 519}, {519, 520}});
      std::vector<std::pair<int, int>> tokens = {{0, 480}};
      for (int i = 480; i < T; ++i) tokens.emplace_back(i, i + 1);
      const std::vector<float> decode = run(tokens);
      CHECK(std::memcmp(one.data(), chunked.data(), one.size() * 4) == 0 &&
                std::memcmp(one.data(), decode.data(), one.size() * 4) == 0,
            "%s attention over %d tokens (window %d): one prefill, chunks and decode tokens give the same bits",
            kv_dtype_name(t), T, window);
      // Reference: softmax in double over the keys and values the pool holds.
      const std::vector<float> kr = rounded(t, k, T, n_kv, hd), vr = rounded(t, v, T, n_kv, hd);
      double worst = 0;
      for (int i = 0; i < T; i += 13)
        for (int h = 0; h < n_heads; ++h) {
          const int kh = h / G, lo = window > 0 ? std::max(0, i - window + 1) : 0;
          std::vector<double> p(size_t(i + 1));
          double mx = -1e300, sum = 0;
          for (int j = lo; j <= i; ++j) {
            double d = 0;
            for (int e = 0; e < hd; ++e)
              d += double(q[size_t((i * n_heads + h) * hd + e)]) * kr[size_t((j * n_kv + kh) * hd + e)];
            p[size_t(j)] = d * s.scale;
            mx = std::max(mx, p[size_t(j)]);
          }
          for (int j = lo; j <= i; ++j) sum += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
          for (int e = 0; e < hd; ++e) {
            double o = 0;
            for (int j = lo; j <= i; ++j) o += p[size_t(j)] * vr[size_t((j * n_kv + kh) * hd + e)];
            worst = std::max(worst, std::fabs(o / sum - one[size_t((i * n_heads + h) * hd + e)]));
          }
        }
      CHECK(worst < 1e-5, "%s attention over %d tokens (window %d) within 1e-5 of double precision (%.2e)",
            kv_dtype_name(t), T, window, worst);
    }
}

}  // namespace

int main() {
  round_trips();
  capacity();
  attention_equivalence();
  long_attention();
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
