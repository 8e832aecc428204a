// The fused decode matmuls (cpu/matmul_parts.h) and the owned-slice row split (cpu/row_split.h):
// q/k/v in one pass and gate/up with their epilogue give exactly the bits of separate matmul() calls,
// for every weight format, precision, row count (both sides of the batched GEMM's threshold) and
// thread count; the split covers every row once, on the alignment it promises.
// Build (from the repo root):
//   g++ -O2 -std=c++20 -Wall -Wextra -Werror -pthread -Inative/src native/test/fused_matmul_test.cpp
//       native/src/format/*.cpp native/src/quant/*.cpp native/src/cpu/*.cpp -o /tmp/fused_matmul_test
// Bench: /tmp/fused_matmul_test bench THREADS LAYERS PAIRS   (separate against fused decode matmuls)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "cpu/matmul.h"
#include "cpu/matmul_parts.h"
#include "cpu/row_split.h"
#include "cpu/threadpool.h"
#include "quant/quantize.h"

using namespace rapid;

namespace {

// An MLX affine weight [out, in] of random values, owning its bytes.
struct AffineWeight {
  Weight w;
  std::vector<uint32_t> codes;
  std::vector<uint8_t> scales, biases;
};

std::unique_ptr<AffineWeight> random_affine(std::mt19937& rng, int64_t out, int64_t in, int bits, int group, DType dt,
                                            const std::string& name) {
  std::normal_distribution<float> d(0.1f, 0.5f);
  std::vector<float> v(size_t(out * in));  // [out, in]
  for (float& e : v) e = d(rng);
  auto a = std::make_unique<AffineWeight>();
  quantize_affine_typed(v.data(), out, in, group, bits, dt, a->codes, a->scales, a->biases);
  a->w.kind = WeightKind::Affine;
  a->w.dtype = dt;
  a->w.out = out;
  a->w.in = in;
  a->w.bits = bits;
  a->w.group = group;
  a->w.data = a->codes.data();
  a->w.scales = a->scales.data();
  a->w.biases = a->biases.data();
  a->w.name = name;
  if (bits == 4) a->w.interleaved = std::make_shared<InterleavedSlot>();  // as the loader does (decode GEMV copy)
  return a;
}

std::vector<float> random_x(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& e : x) e = d(rng);
  return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void test_row_split() {
  ThreadPool pool(5);
  int bad = 0, runs = 0;
  for (int64_t rows : {1, 5, 37, 1152, 4864})
    for (int nt : {1, 2, 3, 5})
      for (int64_t chunk : {4, 12, 76, 300})
        for (int64_t align : {4, 8, 16}) {
          std::vector<std::atomic<int>> seen(static_cast<size_t>(rows));
          std::atomic<int> misaligned{0};
          split_owned_rows(pool, nt, rows, chunk, [&](int64_t r0, int64_t r1) {
            if (r0 % align != 0 || (r1 % align != 0 && r1 != rows) || r0 >= r1) misaligned.fetch_add(1);
            for (int64_t r = r0; r < r1; ++r) seen[size_t(r)].fetch_add(1);
          }, align);
          for (const auto& s : seen) bad += s.load() != 1;
          bad += misaligned.load();
          ++runs;
        }
  CHECK(bad == 0, "row split: %d rows missed, repeated or misaligned over %d splits", bad, runs);
}

// q/k/v-shaped parts (wide, then two narrow) against a matmul() per weight.
void test_parts(ThreadPool& pool, std::mt19937& rng) {
  int bad = 0, cases = 0;
  struct Fmt {
    int bits[3];
    int group;
    DType dt;
  };
  const Fmt fmts[] = {{{4, 4, 4}, 64, DType::BF16}, {{4, 4, 4}, 32, DType::F16}, {{4, 4, 4}, 128, DType::BF16},
                      {{8, 8, 8}, 64, DType::BF16}, {{8, 8, 8}, 32, DType::F32}, {{4, 8, 4}, 64, DType::BF16}};
  for (const Fmt& f : fmts) {
    const int64_t K = 256;
    auto q = random_affine(rng, 68, K, f.bits[0], f.group, f.dt, "q");
    auto k = random_affine(rng, 20, K, f.bits[1], f.group, f.dt, "k");
    auto v = random_affine(rng, 21, K, f.bits[2], f.group, f.dt, "v");
    const AffineWeight* ws[3] = {q.get(), k.get(), v.get()};
    for (Precision p : {Precision::Fast, Precision::Exact})
      for (int64_t n : {1, 2, 3, 4, 5, 8, 9, 17}) {
        const std::vector<float> x = random_x(rng, n * K);
        std::vector<float> sep[3], fused[3];
        MatmulPart parts[3];
        for (int i = 0; i < 3; ++i) {
          sep[i].assign(size_t(n * ws[i]->w.out), 0.0f);
          fused[i].assign(size_t(n * ws[i]->w.out), -1.0f);
          matmul(pool, ws[i]->w, x.data(), sep[i].data(), n, p);
          parts[i] = {&ws[i]->w, fused[i].data()};
        }
        matmul_parts(pool, parts, 3, x.data(), n, p);
        for (int i = 0; i < 3; ++i) bad += !same_bits(sep[i], fused[i]);
        ++cases;
      }
  }
  CHECK(bad == 0, "%s fused q/k/v (%d threads): %d outputs differ from separate matmuls over %d cases",
        matmul_kernel_name(), pool.size(), bad, cases);
}

// gate/up with a SwiGLU-like epilogue against two matmuls and the epilogue over all rows.
void test_pair(ThreadPool& pool, std::mt19937& rng) {
  int bad = 0, misaligned = 0, cases = 0;
  for (int bits : {4, 8})
    for (int64_t out : {64, 300, 1000}) {
      const int64_t K = 128;
      auto gate = random_affine(rng, out, K, bits, 64, DType::BF16, "gate");
      auto up = random_affine(rng, out, K, bits, 64, DType::BF16, "up");
      for (Precision p : {Precision::Fast, Precision::Exact})
        for (int64_t n : {1, 2, 7, 9}) {
          const std::vector<float> x = random_x(rng, n * K);
          std::vector<float> g0(size_t(n * out)), u0(g0.size()), g1(g0.size(), -1.0f), u1(g0.size(), -1.0f);
          auto glu = [&](float* g, const float* u, int64_t r0, int64_t r1) {
            for (int64_t c = 0; c < n; ++c)
              for (int64_t r = r0; r < r1; ++r) g[c * out + r] = g[c * out + r] / (1.0f + std::exp(-g[c * out + r])) * u[c * out + r];
          };
          matmul(pool, gate->w, x.data(), g0.data(), n, p);
          matmul(pool, up->w, x.data(), u0.data(), n, p);
          glu(g0.data(), u0.data(), 0, out);
          std::atomic<int> mis{0};
          matmul_pair(pool, gate->w, up->w, x.data(), g1.data(), u1.data(), n, p, [&](int64_t r0, int64_t r1) {
            if (r0 % 8 != 0 || (r1 % 8 != 0 && r1 != out)) mis.fetch_add(1);
            glu(g1.data(), u1.data(), r0, r1);
          });
          bad += !same_bits(g0, g1) + !same_bits(u0, u1);
          misaligned += mis.load();
          ++cases;
        }
    }
  CHECK(bad == 0 && misaligned == 0, "%s fused gate/up (%d threads): %d outputs differ, %d epilogue ranges misaligned (%d cases)",
        matmul_kernel_name(), pool.size(), bad, misaligned, cases);
}

void test_errors(ThreadPool& pool, std::mt19937& rng) {
  auto a = random_affine(rng, 16, 128, 4, 64, DType::BF16, "a");
  auto b = random_affine(rng, 16, 256, 4, 64, DType::BF16, "b");
  auto c = random_affine(rng, 24, 128, 4, 64, DType::BF16, "c");
  std::vector<float> x(256), y0(24), y1(24);
  const MatmulPart parts[2] = {{&a->w, y0.data()}, {&b->w, y1.data()}};
  CHECK(throws_with([&] { matmul_parts(pool, parts, 2, x.data(), 1, Precision::Fast); }, "differ in width"),
        "parts of different widths are refused");
  CHECK(throws_with([&] { matmul_pair(pool, a->w, c->w, x.data(), y0.data(), y1.data(), 1, Precision::Fast, [](int64_t, int64_t) {}); },
                    "differ in rows"),
        "a pair of different heights is refused");
}

// Decode-step matmuls of `layers` Qwen2.5-0.5B-shaped layers (4-bit g64, DRAM resident from ~8 layers),
// one activation row: separate matmuls (q, k, v, o, gate, up, glu pass, down) against the fused ones
// (q/k/v, o, gate/up + GLU, down), in alternation; prints the median time ratio and its quartiles.
void bench(int threads, int layers, int reps) {
  ThreadPool pool(threads);
  std::mt19937 rng(5);
  const int64_t H = 896, KV = 128, F = 4864;
  struct Layer {
    std::unique_ptr<AffineWeight> q, k, v, o, gate, up, down;
  };
  std::vector<Layer> ls(static_cast<size_t>(layers));
  for (Layer& l : ls) {
    l.q = random_affine(rng, H, H, 4, 64, DType::BF16, "q");
    l.k = random_affine(rng, KV, H, 4, 64, DType::BF16, "k");
    l.v = random_affine(rng, KV, H, 4, 64, DType::BF16, "v");
    l.o = random_affine(rng, H, H, 4, 64, DType::BF16, "o");
    l.gate = random_affine(rng, F, H, 4, 64, DType::BF16, "gate");
    l.up = random_affine(rng, F, H, 4, 64, DType::BF16, "up");
    l.down = random_affine(rng, H, F, 4, 64, DType::BF16, "down");
  }
  const std::vector<float> x = random_x(rng, H);
  std::vector<float> q(static_cast<size_t>(H)), k(static_cast<size_t>(KV)), v(static_cast<size_t>(KV)),
      o(static_cast<size_t>(H)), g(static_cast<size_t>(F)), u(static_cast<size_t>(F)), d(static_cast<size_t>(H));
  auto silu_mul = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) g[size_t(r)] = g[size_t(r)] / (1.0f + std::exp(-g[size_t(r)])) * u[size_t(r)];
  };
  auto run = [&](bool fused) {
    const auto t0 = std::chrono::steady_clock::now();
    for (const Layer& l : ls) {
      if (fused) {
        const MatmulPart parts[3] = {{&l.q->w, q.data()}, {&l.k->w, k.data()}, {&l.v->w, v.data()}};
        matmul_parts(pool, parts, 3, x.data(), 1, Precision::Fast);
        matmul(pool, l.o->w, q.data(), o.data(), 1, Precision::Fast);
        matmul_pair(pool, l.gate->w, l.up->w, o.data(), g.data(), u.data(), 1, Precision::Fast, silu_mul);
      } else {
        matmul(pool, l.q->w, x.data(), q.data(), 1, Precision::Fast);
        matmul(pool, l.k->w, x.data(), k.data(), 1, Precision::Fast);
        matmul(pool, l.v->w, x.data(), v.data(), 1, Precision::Fast);
        matmul(pool, l.o->w, q.data(), o.data(), 1, Precision::Fast);
        matmul(pool, l.gate->w, o.data(), g.data(), 1, Precision::Fast);
        matmul(pool, l.up->w, o.data(), u.data(), 1, Precision::Fast);
        pool.parallel_for(F, silu_mul, 64);
      }
      matmul(pool, l.down->w, g.data(), d.data(), 1, Precision::Fast);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<double> ratio, ts, tf;
  for (int i = 0; i < reps; ++i) {
    const double a = run(false), b = run(true);
    ts.push_back(a);
    tf.push_back(b);
    ratio.push_back(a / b);
  }
  auto q4 = [](std::vector<double> v, double f) {
    std::sort(v.begin(), v.end());
    return v[size_t(f * double(v.size() - 1))];
  };
  double wbytes = 0;
  for (const Layer& l : ls)
    for (const AffineWeight* w : {l.q.get(), l.k.get(), l.v.get(), l.o.get(), l.gate.get(), l.up.get(), l.down.get()})
      wbytes += double(w->codes.size() * 4 + w->scales.size() + w->biases.size());
  std::printf("%s, %d threads, %d layers (%.0f MB), %d pairs: separate %.2f ms, fused %.2f ms (medians; fused %.1f GB/s)\n",
              matmul_kernel_name(), threads, layers, wbytes / 1e6, reps, 1e3 * q4(ts, 0.5), 1e3 * q4(tf, 0.5),
              wbytes / q4(tf, 0.5) / 1e9);
  std::printf("time separate / fused: median %.3f, quartiles %.3f-%.3f\n", q4(ratio, 0.5), q4(ratio, 0.25), q4(ratio, 0.75));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "bench") {
    auto arg = [&](int i, int d) { return argc > i ? std::atoi(argv[i]) : d; };
    bench(arg(2, 2), arg(3, 8), arg(4, 40));
    return 0;
  }
  std::mt19937 rng(26);
  std::printf("kernels: %s\n", matmul_kernel_name());
  test_row_split();
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (bool scalar : {false, true}) {
      force_scalar_kernels(scalar);
      test_parts(pool, rng);
      test_pair(pool, rng);
    }
    force_scalar_kernels(false);
  }
  ThreadPool pool(2);
  test_errors(pool, rng);
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
