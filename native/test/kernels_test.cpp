// Standalone tests + microbenchmark for the H2 native layer (format, quant, cpu kernels).
// Build (from the repo root):
//   g++ -O2 -std=c++20 -Wall -Wextra -Werror -pthread -Inative/src native/test/kernels_test.cpp
//       native/src/format/*.cpp native/src/quant/*.cpp native/src/cpu/*.cpp -o /tmp/kernels_test
// Run:   /tmp/kernels_test            (tests)
//        /tmp/kernels_test bench [threads]   (microbench of the Qwen2.5-0.5B shapes)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>
#include <utility>
#include <ctime>

#include "cpu/gemv_interleaved.h"
#include "cpu/matmul_fast.h"
#include "cpu/matmul.h"
#include "cpu/matmul_parts.h"
#include "cpu/threadpool.h"
#include "format/json.h"
#include "format/safetensors.h"
#include "quant/mlx_quant.h"
#include "quant/quantize.h"
#include "tensor/dtype.h"
#include "check.h"

using namespace rapid;
namespace fs = std::filesystem;

// ------------------------------------------------------------------------------------------------
// dtype

static void test_dtype() {
  // f16: every finite half round-trips through f32.
  int bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    if (f32_to_f16(f) != h) ++bad;
  }
  CHECK(bad == 0, "f16 round trip: %d mismatches", bad);
  CHECK(f16_to_f32(0x3c00) == 1.0f && f16_to_f32(0xc000) == -2.0f, "f16 basics");
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24), "f16 min subnormal");
  CHECK(f32_to_f16(65520.0f) == 0x7c00 && f32_to_f16(65519.0f) == 0x7bff, "f16 overflow rounding");
  CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0 && f32_to_f16(std::ldexp(1.5f, -25)) == 1, "f16 underflow");
  // RNE: 1 + 2^-11 is a tie between 1 and 1+2^-10 → even (1.0).
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00, "f16 tie to even");
  CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02, "f16 tie to even up");
  // bf16
  CHECK(f32_to_bf16(1.0f) == 0x3f80 && bf16_to_f32(0x3f80) == 1.0f, "bf16 basics");
  uint32_t u = 0x3f808000;  // tie, lower is even → stays 0x3f80
  float f;
  std::memcpy(&f, &u, 4);
  CHECK(f32_to_bf16(f) == 0x3f80, "bf16 tie to even down");
  u = 0x3f818000;
  std::memcpy(&f, &u, 4);
  CHECK(f32_to_bf16(f) == 0x3f82, "bf16 tie to even up");
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))), "bf16 nan");
  CHECK(parse_dtype("BF16") == DType::BF16 && dtype_size(DType::F8_E4M3) == 1, "parse_dtype");
  CHECK(throws_with([] { parse_dtype("F128"); }, "unknown dtype"), "parse_dtype unknown");
}

// ------------------------------------------------------------------------------------------------
// JSON

static void test_json() {
  Json j = Json::parse(R"( {"a": [1, -2.5e3, true, false, null], "s": "x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00", "n": {"k": 12345678901234}} )");
  CHECK(j.is_object() && j.at("a").size() == 5, "json object/array");
  CHECK(j.at("a")[0].as_int() == 1 && j.at("a")[1].as_double() == -2500.0, "json numbers");
  CHECK(j.at("a")[2].as_bool() && !j.at("a")[3].as_bool() && j.at("a")[4].is_null(), "json literals");
  CHECK(j.at("s").as_string() == "x\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80", "json escapes + surrogates");
  CHECK(j.at("n").at("k").as_int() == 12345678901234LL, "json int64");
  CHECK(j.find("zz") == nullptr, "json find missing");
  CHECK(throws_with([&] { j.at("zz"); }, "missing key \"zz\""), "json at missing");
  CHECK(throws_with([&] { j.at("s").as_int(); }, "expected number"), "json type error");
  Json back = Json::parse(j.dump());
  CHECK(back.dump() == j.dump() && back.at("s").as_string() == j.at("s").as_string(), "json dump round trip");
  Json pretty = Json::parse(j.dump(2));
  CHECK(pretty.dump() == j.dump(), "json pretty round trip");
  CHECK(Json::parse("0.1").dump() == "0.1" && Json::parse("1e300").as_double() == 1e300, "json double dump");
  const char* bad[] = {"", "{", "[1,]", "{\"a\" 1}", "01", "1.", "-", "\"abc", "\"\\x\"", "tru", "[1] 2",
                       "{\"a\":1,}", "\"\x01\"", "1e", "[\"\\u12g4\"]"};
  for (const char* b : bad) CHECK(throws_with([&] { Json::parse(b); }, "at offset"), "json should reject: %s", b);
  std::string deep(2000, '[');
  CHECK(throws_with([&] { Json::parse(deep); }, "too deep"), "json depth guard");
  Json lone = Json::parse("\"\\ud800x\"");
  CHECK(lone.as_string() == "\xef\xbf\xbdx", "json lone surrogate → U+FFFD");
}

// ------------------------------------------------------------------------------------------------
// Weights built in memory

struct OwnedWeight {
  Weight w;
  std::vector<uint8_t> data, scales, biases;
  std::vector<double> deq;  // [out, in] dequantized reference values (exactly what kernels should see)
};

static std::vector<float> random_vec(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

static void store_f(std::vector<uint8_t>& out, size_t i, float v, DType t) {
  if (t == DType::F32) std::memcpy(out.data() + 4 * i, &v, 4);
  else {
    uint16_t h = t == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
}

static OwnedWeight make_dense(std::mt19937& rng, int64_t out, int64_t in, DType dt) {
  OwnedWeight o;
  auto v = random_vec(rng, size_t(out * in), 0.5f);
  o.data.resize(v.size() * dtype_size(dt));
  o.deq.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    store_f(o.data, i, v[i], dt);
    o.deq[i] = load_float(o.data.data(), dt, i);
  }
  o.w.kind = WeightKind::Dense;
  o.w.dtype = dt;
  o.w.out = out;
  o.w.in = in;
  o.w.data = o.data.data();
  o.w.name = "test.dense";
  return o;
}

static OwnedWeight make_affine(std::mt19937& rng, int64_t out, int64_t in, int bits, int group, DType dt) {
  OwnedWeight o;
  auto v = random_vec(rng, size_t(out * in), 0.5f);
  // Shift some groups so that biases are far from zero (tests the bias term and cancellation).
  for (int64_t r = 0; r < out; r += 3)
    for (int64_t i = 0; i < in; ++i) v[size_t(r * in + i)] += 0.7f;
  std::vector<uint32_t> packed;
  quantize_affine_typed(v.data(), out, in, group, bits, dt, packed, o.scales, o.biases);
  o.data.resize(packed.size() * 4);
  std::memcpy(o.data.data(), packed.data(), o.data.size());
  o.w.kind = WeightKind::Affine;
  o.w.dtype = dt;
  o.w.out = out;
  o.w.in = in;
  o.w.bits = bits;
  o.w.group = group;
  o.w.data = o.data.data();
  o.w.scales = o.scales.data();
  o.w.biases = o.biases.data();
  o.w.name = "test.affine";
  if (bits == 4 || bits == 8) o.w.interleaved = std::make_shared<InterleavedSlot>();  // as the loader does: the copies
  // Reference dequantization straight from the bit stream (independent of the kernels).
  o.deq.resize(size_t(out * in));
  const int64_t ng = in / group;
  for (int64_t r = 0; r < out; ++r) {
    const uint8_t* row = o.data.data() + size_t(r * in * bits / 8);
    for (int64_t i = 0; i < in; ++i) {
      uint32_t q = 0;
      for (int b = 0; b < bits; ++b) {
        int64_t bit = i * bits + b;
        q |= uint32_t((row[bit >> 3] >> (bit & 7)) & 1) << b;
      }
      double s = load_float(o.scales.data(), dt, size_t(r * ng + i / group));
      double bb = load_float(o.biases.data(), dt, size_t(r * ng + i / group));
      o.deq[size_t(r * in + i)] = s * q + bb;
    }
  }
  return o;
}

// x quantized as the Fast path does (natural order, blocks of xb): x̂ = d * round(x / d).
static std::vector<double> fast_x(const std::vector<float>& x, int64_t n, int64_t K, int xb) {
  std::vector<double> out(x.size());
  for (int64_t c = 0; c < n; ++c)
    for (int64_t b = 0; b < K / xb; ++b) {
      const float* xs = x.data() + c * K + b * xb;
      float amax = 0;
      for (int j = 0; j < xb; ++j) amax = std::max(amax, std::fabs(xs[j]));
      float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
      for (int j = 0; j < xb; ++j) out[size_t(c * K + b * xb + j)] = double(d) * std::nearbyint(xs[j] * id);
    }
  return out;
}

// Checks y against Σ deq·xr, where xr = x, or x̂ (int8 per block) for the Fast product: the Fast
// kernels use Σx̂ for the bias term too, so they compute Σ (s·q + b)·x̂ exactly up to float rounding.
// Error bound relative to Σ|w x| per output.
static double max_rel_err(const OwnedWeight& o, const std::vector<float>& x, const std::vector<double>* xq,
                          const std::vector<float>& y, int64_t n) {
  const Weight& W = o.w;
  double worst = 0;
  for (int64_t c = 0; c < n; ++c)
    for (int64_t r = 0; r < W.out; ++r) {
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < W.in; ++i) {
        double w = o.deq[size_t(r * W.in + i)];
        double xv = x[size_t(c * W.in + i)];
        ref += w * (xq ? (*xq)[size_t(c * W.in + i)] : xv);
        mag += std::fabs(w * xv);
      }
      double err = std::fabs(double(y[size_t(c * W.out + r)]) - ref) / (mag + 1e-30);
      worst = std::max(worst, err);
    }
  return worst;
}

static void test_matmul(ThreadPool& pool) {
  std::mt19937 rng(1234);
  const int64_t ns[] = {1, 3, 17, 64};
  struct Shape { int64_t out, in; };
  const Shape shapes[] = {{17, 128}, {3, 384}, {33, 256}, {1, 64}};
  int cases = 0;
  for (bool scalar : {false, true}) {
    force_scalar_kernels(scalar);
    const char* kname = matmul_kernel_name();
    // Dense
    for (DType dt : {DType::F32, DType::F16, DType::BF16})
      for (const Shape& s : {Shape{17, 100}, Shape{5, 7}, Shape{64, 896}})
        for (int64_t n : ns) {
          OwnedWeight o = make_dense(rng, s.out, s.in, dt);
          auto x = random_vec(rng, size_t(n * s.in));
          std::vector<float> y(size_t(n * s.out), -1.0f);
          matmul(pool, o.w, x.data(), y.data(), n, Precision::Exact);
          double e = max_rel_err(o, x, nullptr, y, n);
          CHECK(e < 1e-5, "%s dense %s [%ld,%ld] n=%ld rel err %.3g", kname, dtype_name(dt), long(s.out), long(s.in),
                long(n), e);
          ++cases;
        }
    // Affine
    for (int bits : {2, 3, 4, 5, 6, 8})
      for (int group : {32, 64, 128})
        for (DType dt : {DType::BF16, DType::F16, DType::F32})
          for (const Shape& s : shapes) {
            if (s.in % group) continue;
            for (int64_t n : ns) {
              if (dt != DType::BF16 && n > 3) continue;  // dtype variants: smaller sweep
              OwnedWeight o = make_affine(rng, s.out, s.in, bits, group, dt);
              auto x = random_vec(rng, size_t(n * s.in));
              std::vector<float> y(size_t(n * s.out), -1.0f);
              matmul(pool, o.w, x.data(), y.data(), n, Precision::Exact);
              double e = max_rel_err(o, x, nullptr, y, n);
              CHECK(e < 1e-5, "%s exact affine b%d g%d %s [%ld,%ld] n=%ld rel err %.3g", kname, bits, group,
                    dtype_name(dt), long(s.out), long(s.in), long(n), e);
              std::fill(y.begin(), y.end(), -1.0f);
              matmul(pool, o.w, x.data(), y.data(), n, Precision::Fast);
              if ((bits == 4 || bits == 8) && s.in % 64 == 0) {
                auto xq = fast_x(x, n, s.in, group == 32 ? 32 : 64);
                double ef = max_rel_err(o, x, &xq, y, n);
                CHECK(ef < 2e-5, "%s fast affine b%d g%d %s [%ld,%ld] n=%ld rel err vs int8 ref %.3g", kname, bits,
                      group, dtype_name(dt), long(s.out), long(s.in), long(n), ef);
                double eq = max_rel_err(o, x, nullptr, y, n);
                CHECK(eq < 2e-2, "%s fast affine b%d g%d vs exact %.3g", kname, bits, group, eq);
              } else {
                double ef = max_rel_err(o, x, nullptr, y, n);
                CHECK(ef < 1e-5, "%s fast (fallback exact) b%d g%d rel err %.3g", kname, bits, group, ef);
              }
              cases += 2;
            }
          }
    // Strided input/output.
    {
      OwnedWeight o = make_affine(rng, 10, 128, 4, 64, DType::BF16);
      int64_t n = 5, ldx = 200, ldy = 13;
      auto xs = random_vec(rng, size_t(n * ldx));
      std::vector<float> y(size_t(n * ldy), 7.0f), x(size_t(n * 128));
      for (int64_t c = 0; c < n; ++c) std::memcpy(&x[size_t(c * 128)], &xs[size_t(c * ldx)], 128 * 4);
      for (Precision p : {Precision::Exact, Precision::Fast}) {
        matmul_strided(pool, o.w, xs.data(), ldx, y.data(), ldy, n, p);
        std::vector<float> yc(size_t(n * 10));
        for (int64_t c = 0; c < n; ++c) std::memcpy(&yc[size_t(c * 10)], &y[size_t(c * ldy)], 40);
        auto xq = fast_x(x, n, 128, 64);
        double e = max_rel_err(o, x, p == Precision::Fast ? &xq : nullptr, yc, n);
        CHECK(e < 2e-5, "%s strided rel err %.3g", kname, e);
        CHECK(y[size_t(ldy - 1)] == 7.0f, "strided: padding untouched");
      }
    }
    // Embedding rows (Dense and Affine).
    for (int kind = 0; kind < 2; ++kind) {
      OwnedWeight o = kind ? make_affine(rng, 50, 128, 4, 64, DType::BF16) : make_dense(rng, 50, 96, DType::BF16);
      int32_t ids[] = {0, 49, 7, 7};
      std::vector<float> out(size_t(4 * o.w.in));
      embedding_rows(o.w, ids, 4, out.data());
      double worst = 0;
      for (int i = 0; i < 4; ++i)
        for (int64_t k = 0; k < o.w.in; ++k)
          worst = std::max(worst, std::fabs(out[size_t(i * o.w.in + k)] - o.deq[size_t(ids[i] * o.w.in + k)]));
      CHECK(worst < 1e-6, "%s embedding rows err %.3g", kname, worst);
      int32_t badid = 50;
      CHECK(throws_with([&] { embedding_rows(o.w, &badid, 1, out.data()); }, "token id 50"), "embedding range");
    }
  }
  force_scalar_kernels(false);
  std::printf("matmul: %d cases checked\n", cases);
}

// Batch invariance (ARCHITECTURE invariant 1): row r of y is bit-identical whatever n and position.
static void test_batch_invariance(ThreadPool& pool) {
  std::mt19937 rng(77);
  int checked = 0;
  for (bool scalar : {false, true}) {
    force_scalar_kernels(scalar);
    std::vector<OwnedWeight> ws;
    ws.push_back(make_dense(rng, 37, 192, DType::F32));
    ws.push_back(make_dense(rng, 37, 100, DType::BF16));
    ws.push_back(make_dense(rng, 37, 192, DType::F16));
    ws.push_back(make_affine(rng, 37, 256, 4, 32, DType::BF16));
    ws.push_back(make_affine(rng, 37, 256, 4, 64, DType::BF16));
    ws.push_back(make_affine(rng, 37, 256, 4, 128, DType::F16));
    ws.push_back(make_affine(rng, 37, 256, 8, 64, DType::BF16));
    ws.push_back(make_affine(rng, 37, 256, 8, 32, DType::F32));
    ws.push_back(make_affine(rng, 37, 256, 3, 64, DType::BF16));
    for (const OwnedWeight& o : ws)
      for (Precision p : {Precision::Exact, Precision::Fast}) {
        const int64_t N = 70, K = o.w.in, O = o.w.out;
        auto x = random_vec(rng, size_t(N * K), 2.0f);
        std::vector<float> yb(static_cast<size_t>(N * O)), y1(static_cast<size_t>(O)), yr(yb.size()), xr(x.size());
        matmul(pool, o.w, x.data(), yb.data(), N, p);
        for (int64_t i = 0; i < N; ++i)  // reversed batch
          std::memcpy(&xr[size_t(i * K)], &x[size_t((N - 1 - i) * K)], size_t(K) * 4);
        matmul(pool, o.w, xr.data(), yr.data(), N, p);
        int bad = 0;
        for (int64_t i = 0; i < N; ++i) {
          matmul(pool, o.w, x.data() + i * K, y1.data(), 1, p);
          if (std::memcmp(y1.data(), &yb[size_t(i * O)], size_t(O) * 4) != 0) ++bad;
          if (std::memcmp(y1.data(), &yr[size_t((N - 1 - i) * O)], size_t(O) * 4) != 0) ++bad;
        }
        // A sub-batch at an odd offset.
        std::vector<float> ys(size_t(5 * O));
        matmul(pool, o.w, x.data() + 33 * K, ys.data(), 5, p);
        if (std::memcmp(ys.data(), &yb[size_t(33 * O)], size_t(5 * O) * 4) != 0) ++bad;
        // Both sides of the batched GEMM's threshold and its 16-row column tiles (avx512-vnni).
        for (int64_t m : {8, 9, 15, 16, 17, 31, 32, 33}) {
          std::vector<float> ym(size_t(m * O));
          matmul(pool, o.w, x.data() + 3 * K, ym.data(), m, p);
          if (std::memcmp(ym.data(), &yb[size_t(3 * O)], size_t(m * O) * 4) != 0) ++bad;
        }
        CHECK(bad == 0, "%s batch invariance %s b%d g%d %s: %d rows differ", matmul_kernel_name(),
              o.w.kind == WeightKind::Dense ? "dense" : "affine", o.w.bits, o.w.group,
              p == Precision::Fast ? "fast" : "exact", bad);
        ++checked;
      }
  }
  force_scalar_kernels(false);
  std::printf("batch invariance: %d configurations\n", checked);
}

// Every SIMD family this CPU has gives bit-identical results (x86: the AVX-512 VNNI int8 dot products
// give the same int32 sums as AVX2's maddubs, and the f32 work is shared), so a model's tokens do not
// depend on the CPU it runs on within one architecture.
static void test_isa_identity(ThreadPool& pool) {
  std::vector<std::string> fams = cpu_kernel_families();
  fams.pop_back();  // scalar: checked against the reference, its f32 order differs by design
  if (fams.size() < 2) {
    std::printf("isa identity: one SIMD family (%s), nothing to compare\n", fams.empty() ? "none" : fams[0].c_str());
    return;
  }
  std::mt19937 rng(4242);
  int checked = 0;
  std::vector<OwnedWeight> ws;
  for (int bits : {4, 8})
    for (int group : {32, 64, 128})
      for (DType dt : {DType::BF16, DType::F16, DType::F32}) ws.push_back(make_affine(rng, 37, 384, bits, group, dt));
  ws.push_back(make_affine(rng, 37, 384, 3, 64, DType::BF16));
  ws.push_back(make_dense(rng, 37, 200, DType::BF16));
  for (const OwnedWeight& o : ws)
    for (Precision p : {Precision::Fast, Precision::Exact})
      for (int64_t n : {1, 3, 16, 21}) {
        auto x = random_vec(rng, size_t(n * o.w.in), 3.0f);
        std::vector<float> y0(size_t(n * o.w.out)), y(y0.size());
        for (size_t f = 0; f < fams.size(); ++f) {
          CHECK(force_kernels(fams[f].c_str()), "force_kernels(%s)", fams[f].c_str());
          matmul(pool, o.w, x.data(), (f ? y : y0).data(), n, p);
          if (f == 0) continue;
          CHECK(std::memcmp(y.data(), y0.data(), y.size() * 4) == 0, "%s vs %s: %s b%d g%d %s n=%ld differ",
                fams[f].c_str(), fams[0].c_str(), o.w.kind == WeightKind::Dense ? "dense" : "affine", o.w.bits,
                o.w.group, p == Precision::Fast ? "fast" : "exact", long(n));
          ++checked;
        }
      }
  force_kernels(nullptr);
  CHECK(!force_kernels("no-such-isa"), "an unknown family is refused");
  std::printf("isa identity: %d comparisons across %zu families\n", checked, fams.size());
}

// The batch-1 GEMV over a 4- or 8-bit weight's interleaved copy (cpu/gemv_interleaved.h, families that
// have it) gives the row-major kernels' bits: against the same weight without its slot (gemv4_h, gemv8),
// against batches of 2, 5 and 20 rows (tiles, GEMM), for row counts off the 16- and 8-row blocks, row
// ranges split at any offset (fused parts) and a view of other rows that kept the slot.
static void test_interleaved(ThreadPool& pool) {
  std::mt19937 rng(99);
  int checked = 0;
  struct Shape { int64_t out, in; };
  for (int bits : {4, 8})
  for (int group : {32, 64, 128})
    for (DType dt : {DType::BF16, DType::F16, DType::F32})
      // 4096 and 4864 wide: interleaved blocks of 40-43 KB, past L1 (the down projection's shape); 8448 at
      // g32: more groups than the GEMV keeps biases of while streaming (kIlBiasGroups), the rest read back.
      for (const Shape& s : {Shape{1, 128}, Shape{37, 256}, Shape{64, 384}, Shape{100, 896}, Shape{37, 4096},
                             Shape{100, 4864}, Shape{21, 8448}}) {
        if (s.in % group) continue;
        OwnedWeight o = make_affine(rng, s.out, s.in, bits, group, dt);
        Weight rows_only = o.w;
        rows_only.interleaved = nullptr;
        const int64_t K = s.in, O = s.out;
        auto x = random_vec(rng, size_t(33 * K), 2.0f);
        std::vector<float> y1(static_cast<size_t>(O)), y0(static_cast<size_t>(O)), yn(static_cast<size_t>(33 * O)),
            yr(static_cast<size_t>(33 * O));
        matmul(pool, o.w, x.data(), y1.data(), 1, Precision::Fast);
        matmul(pool, rows_only, x.data(), y0.data(), 1, Precision::Fast);
        CHECK(std::memcmp(y1.data(), y0.data(), size_t(O) * 4) == 0, "%s interleaved b%d g%d %s [%ld,%ld]: differs from rows",
              matmul_kernel_name(), bits, group, dtype_name(dt), long(O), long(K));
        for (int64_t n : {2, 5, 20}) {
          matmul(pool, o.w, x.data(), yn.data(), n, Precision::Fast);
          CHECK(std::memcmp(y1.data(), yn.data(), size_t(O) * 4) == 0, "%s interleaved b%d g%d %s [%ld,%ld]: n=1 vs n=%ld",
                matmul_kernel_name(), bits, group, dtype_name(dt), long(O), long(K), long(n));
        }
        // The batched GEMM over the copy (n >= 2) against the row kernels at the same n, every row:
        // partial register tiles (7, 13), two full ones plus four (16), and past the row GEMM's threshold.
        for (int64_t n : {3, 7, 13, 16, 33}) {
          matmul(pool, o.w, x.data(), yn.data(), n, Precision::Fast);
          matmul(pool, rows_only, x.data(), yr.data(), n, Precision::Fast);
          CHECK(std::memcmp(yn.data(), yr.data(), size_t(n * O) * 4) == 0, "%s interleaved GEMM b%d g%d %s [%ld,%ld] n=%ld: differs from rows",
                matmul_kernel_name(), bits, group, dtype_name(dt), long(O), long(K), long(n));
          ++checked;
        }
        auto xq = fast_x(x, 1, K, group == 32 ? 32 : 64);
        const double e = max_rel_err(o, x, &xq, y1, 1);
        CHECK(e < 2e-5, "%s interleaved b%d g%d %s [%ld,%ld] rel err vs int8 ref %.3g", matmul_kernel_name(), bits, group,
              dtype_name(dt), long(O), long(K), e);
        checked += 5;
      }
  // Ranges that start and end inside a block (16 rows, 8 at 8-bit), as a fused matmul's joint row space gives
  // them, at batch 1 (the GEMV, twice: the second run reads the built copies) and 16 rows (the batched GEMM).
  for (int bits : {4, 8}) {
    const int64_t na = bits == 4 ? 40 : 36, nb = 64 - na;
    OwnedWeight a = make_affine(rng, na, 256, bits, 64, DType::BF16), b = make_affine(rng, nb, 256, bits, 64, DType::BF16);
    auto x = random_vec(rng, 16 * 256, 2.0f);
    std::vector<float> ya(size_t(16 * na)), yb(size_t(16 * nb)), ya0(ya.size()), yb0(yb.size());
    MatmulPart parts[2] = {{&a.w, ya.data()}, {&b.w, yb.data()}};
    for (int64_t n : {1, 1, 16}) {
      matmul_parts(pool, parts, 2, x.data(), n, Precision::Fast);
      Weight ar = a.w, br = b.w;
      ar.interleaved = br.interleaved = nullptr;
      matmul(pool, ar, x.data(), ya0.data(), n, Precision::Fast);
      matmul(pool, br, x.data(), yb0.data(), n, Precision::Fast);
      CHECK(std::memcmp(ya.data(), ya0.data(), size_t(n * na) * 4) == 0 &&
                std::memcmp(yb.data(), yb0.data(), size_t(n * nb) * 4) == 0,
            "%s interleaved b%d fused parts of %ld and %ld rows differ at n=%ld", matmul_kernel_name(), bits, long(na),
            long(nb), long(n));
      ++checked;
    }
    // The family's kernels on row ranges off the block edges, straight: the same bits as the whole range.
    const kern::Kernels& k = detail::active_kernels();
    for (int64_t n : {1, 3, 6}) {
      const InterleavedRows* il = detail::interleaved_for(pool, k, a.w, n);  // nullptr: no kernels for the copy
      if (il != nullptr) {
        const kern::XQuant xq = detail::quantize_activations(pool, k, a.w, x.data(), 256, n);
        std::vector<float> whole(size_t(n * na)), part(size_t(n * na), 0.0f);
        detail::fast_rows_on(k, il, a.w, xq, n, 0, na, whole.data(), na, nullptr);
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{3, 29}, {8, 16}, {13, 14}, {29, na}}) {
          std::fill(part.begin(), part.end(), 0.0f);
          detail::fast_rows_on(k, il, a.w, xq, n, r0, r1, part.data(), na, nullptr);
          int bad = 0;
          for (int64_t c = 0; c < n; ++c)
            for (int64_t r = 0; r < na; ++r) {
              const float want = r >= r0 && r < r1 ? whole[size_t(c * na + r)] : 0.0f;
              bad += std::memcmp(&part[size_t(c * na + r)], &want, 4) != 0;
            }
          CHECK(bad == 0, "%s interleaved b%d rows [%ld, %ld) n=%ld: %d outputs differ or written outside", matmul_kernel_name(),
                bits, long(r0), long(r1), long(n), bad);
          ++checked;
        }
      }
    }
  }
  // A view of rows 16.. of a weight, sharing the weight's slot: must not read the weight's copy.
  for (int bits : {4, 8}) {
    OwnedWeight o = make_affine(rng, 48, 128, bits, 64, DType::BF16);
    auto x = random_vec(rng, 128, 2.0f);
    std::vector<float> yfull(48), yview(32);
    matmul(pool, o.w, x.data(), yfull.data(), 1, Precision::Fast);
    CHECK((o.w.interleaved->rows != nullptr) == (bits == 4 ? detail::active_kernels().gemv4_interleaved != nullptr
                                                           : detail::active_kernels().gemv8_interleaved != nullptr) ||
              !interleaved_gemv_enabled(),
          "%s b%d: the copy is built where the family reads it", matmul_kernel_name(), bits);
    Weight v = o.w;
    v.out = 32;
    v.data = o.data.data() + 16 * 128 * bits / 8;
    v.scales = o.scales.data() + 16 * 2 * 2;
    v.biases = o.biases.data() + 16 * 2 * 2;
    matmul(pool, v, x.data(), yview.data(), 1, Precision::Fast);
    CHECK(std::memcmp(yview.data(), yfull.data() + 16, 32 * 4) == 0, "%s b%d: a row view sharing the slot differs",
          matmul_kernel_name(), bits);
    checked += 2;
  }
  // The path must really run where the family has it (else the checks above compare gemv4_h to itself).
  const bool on = decode_matmul_description().find("interleaved") != std::string::npos;
  const std::string fam = matmul_kernel_name();
  CHECK(on == ((fam == "avx512-vnni" || fam == "avx2") && interleaved_gemv_enabled()),
        "%s: interleaved GEMV in use: %d (%s)", matmul_kernel_name(), int(on), decode_matmul_description().c_str());
  std::printf("interleaved gemv: %d checks (%s)\n", checked, on ? "in use" : "not used by this family");
}

// ------------------------------------------------------------------------------------------------
// Quantization

static void test_quantize() {
  std::mt19937 rng(7);
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {32, 64, 128}) {
      int64_t rows = 7, cols = 256;
      auto w = random_vec(rng, size_t(rows * cols));
      std::vector<uint32_t> packed;
      std::vector<float> s, b;
      quantize_affine(w.data(), rows, cols, group, bits, packed, s, b);
      CHECK(int64_t(packed.size()) == rows * cols * bits / 32, "packed size b%d", bits);
      std::vector<float> row(static_cast<size_t>(cols));
      bool ok = true;
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_affine_row(packed.data() + r * cols * bits / 32, s.data() + r * (cols / group),
                              b.data() + r * (cols / group), cols, group, bits, row.data());
        for (int64_t i = 0; i < cols; ++i) {
          float sc = std::fabs(s[size_t(r * (cols / group) + i / group)]);
          if (std::fabs(row[size_t(i)] - w[size_t(r * cols + i)]) > sc + 1e-6f) ok = false;  // mlx's own bound
        }
      }
      CHECK(ok, "quantize round trip b%d g%d within scale", bits, group);
      std::vector<float> z(size_t(rows * cols), 0.0f);
      quantize_affine(z.data(), rows, cols, group, bits, packed, s, b);
      dequantize_affine_row(packed.data(), s.data(), b.data(), cols, group, bits, row.data());
      CHECK(std::all_of(row.begin(), row.end(), [](float v) { return v == 0.0f; }), "quantize zeros b%d", bits);
    }
  // A hand-checked case: group of 32 values 0..31 at 4 bits: max edge 31 → scale -31/15?  mlx picks
  // the larger-magnitude edge (31): scale = -(31/15), q0 = rint(31/scale) = -15 → scale = 31/-15, bias = 31.
  std::vector<float> w(32);
  for (int i = 0; i < 32; ++i) w[size_t(i)] = float(i);
  std::vector<uint32_t> packed;
  std::vector<float> s, b;
  quantize_affine(w.data(), 1, 32, 32, 4, packed, s, b);
  CHECK(std::fabs(s[0] - 31.0f / -15.0f) < 1e-6f && b[0] == 31.0f, "mlx edge rule: scale %g bias %g", s[0], b[0]);
  CHECK((packed[0] & 0xF) == 15 && ((packed[3] >> 28) & 0xF) == 0, "mlx edge rule: q of 0 is 15, q of 31 is 0");
}

// ------------------------------------------------------------------------------------------------
// safetensors, checkpoints, quant config, convert

static std::string tmpdir(const std::string& name) { return fresh_tmpdir("rapid_h2_test_" + name); }

static void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

static std::string raw_file(const std::string& header, size_t data_bytes, uint64_t hlen_override = 0) {
  std::string s(8, '\0');
  uint64_t h = hlen_override ? hlen_override : header.size();
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((h >> (8 * i)) & 0xff);
  return s + header + std::string(data_bytes, '\x01');
}

static void test_safetensors() {
  std::string d = tmpdir("st");
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b = {f32_to_bf16(1.5f), f32_to_bf16(-2.0f)};
  write_safetensors(d + "/model.safetensors",
                    {{"b", DType::BF16, {2}, b.data(), 4}, {"a.weight", DType::F32, {2, 3}, a.data(), 24}},
                    {{"format", "mlx"}});
  write_bytes(d + "/config.json", R"({"model_type": "qwen2", "hidden_size": 3})");
  auto ck = Checkpoint::open(d);
  CHECK(ck->tensors().size() == 2, "safetensors tensor count");
  const TensorView& t = ck->get("a.weight");
  CHECK(t.dtype == DType::F32 && t.shape == std::vector<int64_t>({2, 3}) && t.numel() == 6, "tensor meta");
  CHECK(std::memcmp(t.data, a.data(), 24) == 0, "tensor bytes");
  CHECK(ck->find("nope") == nullptr, "find missing");
  CHECK(throws_with([&] { ck->get("nope"); }, "missing tensor nope in " + d), "get missing message");
  CHECK(ck->config().at("hidden_size").as_int() == 3, "config()");
  CHECK(ck->metadata().at("format") == "mlx", "metadata");
  CHECK(ck->mapped_bytes() == fs::file_size(d + "/model.safetensors"), "mapped bytes");

  // Corruption cases: each must fail naming the file and the problem.
  struct Bad { std::string name, bytes, needle; };
  std::string okh = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::vector<Bad> bads = {
      {"short", std::string(5, '\0'), "truncated file"},
      {"hlen", raw_file(okh, 8, 1ull << 40), "exceeds file size"},
      {"hlen_max", raw_file(okh, 8, ~0ull), "exceeds file size"},
      {"notjson", raw_file("{not json}", 8), "not valid JSON"},
      {"notobj", raw_file("[1,2]", 8), "not a JSON object"},
      {"dtype", raw_file(R"({"t":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8), "unknown dtype"},
      {"beyond", raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), "beyond data size"},
      {"overflow", raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,8]}})", 8), "data_offsets"},
      {"mismatch", raw_file(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "needs 12"},
      {"shapebig", raw_file(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8), "overflows"},
      {"negshape", raw_file(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "non-negative"},
      {"overlap", raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"u":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12), "overlap"},
      {"nooffsets", raw_file(R"({"t":{"dtype":"F32","shape":[2]}})", 8), "data_offsets"},
      {"overlap_nested", raw_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"c":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 16), "overlap"},
  };
  for (const Bad& bd : bads) {
    std::string dd = tmpdir("bad_" + bd.name);
    write_bytes(dd + "/model.safetensors", bd.bytes);
    std::string msg;
    bool ok = throws_with([&] { Checkpoint::open(dd); }, bd.needle, &msg);
    CHECK(ok && msg.find("model.safetensors") != std::string::npos, "corrupt %s: expected '%s' got '%s'",
          bd.name.c_str(), bd.needle.c_str(), msg.c_str());
  }
  // Truncated real file.
  {
    std::string dd = tmpdir("trunc");
    std::string full;
    {
      std::ifstream f(d + "/model.safetensors", std::ios::binary);
      full.assign(std::istreambuf_iterator<char>(f), {});
    }
    write_bytes(dd + "/model.safetensors", full.substr(0, full.size() - 3));
    CHECK(throws_with([&] { Checkpoint::open(dd); }, "truncated"), "truncated real file");
  }
  // Shards via index.json.
  {
    std::string dd = tmpdir("shards");
    write_safetensors(dd + "/model-00001-of-00002.safetensors", {{"x", DType::F32, {2}, a.data(), 8}});
    write_safetensors(dd + "/model-00002-of-00002.safetensors", {{"y", DType::F32, {3}, a.data(), 12}});
    write_bytes(dd + "/model.safetensors.index.json",
                R"({"metadata":{},"weight_map":{"x":"model-00001-of-00002.safetensors","y":"model-00002-of-00002.safetensors"}})");
    auto c2 = Checkpoint::open(dd);
    CHECK(c2->has("x") && c2->has("y") && c2->get("y").numel() == 3, "sharded open");
    write_bytes(dd + "/model.safetensors.index.json",
                R"({"weight_map":{"x":"model-00001-of-00002.safetensors","z":"model-00003-of-00003.safetensors"}})");
    CHECK(throws_with([&] { Checkpoint::open(dd); }, "model-00003-of-00003.safetensors\" (for tensor \"z\") does not exist"),
          "index names missing shard");
    write_bytes(dd + "/model.safetensors.index.json",
                R"({"weight_map":{"x":"model-00001-of-00002.safetensors","q":"model-00002-of-00002.safetensors"}})");
    CHECK(throws_with([&] { Checkpoint::open(dd); }, "tensor \"q\" listed in model.safetensors.index.json is absent"),
          "index tensor absent from shard");
    write_bytes(dd + "/model.safetensors.index.json", R"({"weight_map": 3})");
    CHECK(throws_with([&] { Checkpoint::open(dd); }, "weight_map"), "index bad weight_map");
  }
  // Directory of *.safetensors without index; duplicates rejected.
  {
    std::string dd = tmpdir("glob");
    write_safetensors(dd + "/a.safetensors", {{"x", DType::F32, {2}, a.data(), 8}});
    write_safetensors(dd + "/b.safetensors", {{"x", DType::F32, {2}, a.data(), 8}});
    CHECK(throws_with([&] { Checkpoint::open(dd); }, "duplicate tensor \"x\""), "duplicate across files");
    CHECK(throws_with([&] { Checkpoint::open(tmpdir("empty")); }, "no .safetensors"), "empty dir");
  }
}

static void test_quant_config_and_load() {
  Json cfg = Json::parse(R"({"quantization": {"group_size": 64, "bits": 4,
      "model.layers.0.mlp.gate": {"group_size": 64, "bits": 8},
      "language_model.model.layers.1.mlp.down_proj": false,
      "model.layers.2.q_proj": {"bits": 3, "group_size": 32, "mode": "mxfp4"}}})");
  QuantConfig qc = QuantConfig::from_config(cfg);
  CHECK(qc.present && qc.global.bits == 4 && qc.global.group_size == 64 && qc.global.mode == "affine", "global qc");
  auto p = qc.for_module("language_model.model.layers.0.mlp.gate");
  CHECK(p && p->bits == 8, "override with language_model. removed");
  CHECK(!qc.for_module("model.layers.1.mlp.down_proj"), "false override with language_model. added");
  CHECK(qc.for_module("model.layers.5.self_attn.q_proj")->bits == 4, "global fallback");
  CHECK(qc.describe() == "mixed", "describe mixed: %s", qc.describe().c_str());
  CHECK(QuantConfig::from_config(Json::parse("{}")).describe() == "none", "describe none");
  QuantConfig q2 = QuantConfig::from_config(Json::parse(R"({"quantization_config":{"group_size":32,"bits":8}})"));
  CHECK(q2.describe() == "affine 8-bit g32", "describe %s", q2.describe().c_str());

  // Build a checkpoint: one quantized linear, one dense, one bad-mode module, one missing biases.
  std::mt19937 rng(5);
  std::string d = tmpdir("qload");
  auto w = random_vec(rng, 8 * 128);
  std::vector<uint32_t> packed;
  std::vector<uint8_t> sc, bi;
  quantize_affine_typed(w.data(), 8, 128, 64, 4, DType::BF16, packed, sc, bi);
  std::vector<uint16_t> dense(4 * 128, f32_to_bf16(0.25f));
  write_safetensors(d + "/model.safetensors",
                    {{"model.layers.5.self_attn.q_proj.weight", DType::U32, {8, 16}, packed.data(), packed.size() * 4},
                     {"model.layers.5.self_attn.q_proj.scales", DType::BF16, {8, 2}, sc.data(), sc.size()},
                     {"model.layers.5.self_attn.q_proj.biases", DType::BF16, {8, 2}, bi.data(), bi.size()},
                     {"model.layers.2.q_proj.weight", DType::U32, {8, 16}, packed.data(), packed.size() * 4},
                     {"model.layers.2.q_proj.scales", DType::BF16, {8, 2}, sc.data(), sc.size()},
                     {"model.layers.2.q_proj.biases", DType::BF16, {8, 2}, bi.data(), bi.size()},
                     {"nobias.weight", DType::U32, {8, 16}, packed.data(), packed.size() * 4},
                     {"nobias.scales", DType::BF16, {8, 2}, sc.data(), sc.size()},
                     {"dense.weight", DType::BF16, {4, 128}, dense.data(), dense.size() * 2}});
  auto ck = Checkpoint::open(d);
  Weight q = load_weight(*ck, qc, "model.layers.5.self_attn.q_proj");
  CHECK(q.kind == WeightKind::Affine && q.out == 8 && q.in == 128 && q.bits == 4 && q.group == 64 &&
            q.dtype == DType::BF16, "load affine");
  CHECK(weight_bytes(q) == 8 * 64 + 2 * 8 * 2 * 2, "weight_bytes %zu", weight_bytes(q));
  std::vector<float> row(128);
  dequantize_row(q, 3, row.data());
  CHECK(std::fabs(row[5] - w[3 * 128 + 5]) < 0.2f, "dequantize_row plausible");
  Weight dn = load_weight(*ck, qc, "dense");
  CHECK(dn.kind == WeightKind::Dense && dn.out == 4 && dn.in == 128 && dn.dtype == DType::BF16, "load dense");
  CHECK(throws_with([&] { load_weight(*ck, qc, "model.layers.2.q_proj"); }, "model.layers.2.q_proj: unsupported quantization mode \"mxfp4\""),
        "bad mode names module and mode");
  CHECK(throws_with([&] { load_weight(*ck, qc, "nobias"); }, "nobias.biases is missing"), "missing biases");
  CHECK(throws_with([&] { load_weight(*ck, qc, "absent"); }, "missing tensor absent.weight"), "missing weight");
  CHECK(!try_load_weight(*ck, qc, "absent").valid(), "try_load_weight absent");
  QuantConfig q8 = QuantConfig::from_config(Json::parse(R"({"quantization":{"group_size":64,"bits":8}})"));
  CHECK(throws_with([&] { load_weight(*ck, q8, "model.layers.5.self_attn.q_proj"); }, "packed shapes inconsistent"),
        "bits mismatch vs shapes");
  QuantConfig q7 = QuantConfig::from_config(Json::parse(R"({"quantization":{"group_size":64,"bits":7}})"));
  CHECK(throws_with([&] { load_weight(*ck, q7, "model.layers.5.self_attn.q_proj"); }, "affine 7-bit g64"),
        "unsupported bits named");
  Weight e = load_embedding(*ck, qc, "model.layers.5.self_attn.q_proj");
  CHECK(e.kind == WeightKind::Affine, "load_embedding");
}

static void test_convert(ThreadPool& pool) {
  std::mt19937 rng(11);
  std::string src = tmpdir("conv_src"), dst = tmpdir("conv_dst");
  auto emb = random_vec(rng, 32 * 128), lin = random_vec(rng, 16 * 128), norm = random_vec(rng, 128),
       vis = random_vec(rng, 8 * 64);
  std::vector<uint16_t> embb(emb.size()), linb(lin.size()), normb(norm.size()), visb(vis.size());
  for (size_t i = 0; i < emb.size(); ++i) embb[i] = f32_to_bf16(emb[i]);
  for (size_t i = 0; i < lin.size(); ++i) linb[i] = f32_to_bf16(lin[i]);
  for (size_t i = 0; i < norm.size(); ++i) normb[i] = f32_to_bf16(norm[i]);
  for (size_t i = 0; i < vis.size(); ++i) visb[i] = f32_to_bf16(vis[i]);
  write_safetensors(src + "/model.safetensors",
                    {{"model.embed_tokens.weight", DType::BF16, {32, 128}, embb.data(), embb.size() * 2},
                     {"model.layers.0.mlp.up_proj.weight", DType::BF16, {16, 128}, linb.data(), linb.size() * 2},
                     {"model.norm.weight", DType::BF16, {128}, normb.data(), normb.size() * 2},
                     {"vision_tower.fc.weight", DType::BF16, {8, 64}, visb.data(), visb.size() * 2}});
  write_bytes(src + "/config.json", R"({"model_type":"qwen2","torch_dtype":"bfloat16"})");
  write_bytes(src + "/tokenizer.json", "{}");
  ConvertStats st = convert_checkpoint(src, dst, 4, 64);
  CHECK(st.quantized == 2 && st.kept == 2 && st.dtype == "BF16", "convert stats q=%d k=%d dtype=%s", st.quantized,
        st.kept, st.dtype.c_str());
  CHECK(fs::exists(dst + "/tokenizer.json"), "tokenizer copied");
  auto ck = Checkpoint::open(dst);
  Json cfg = ck->config();
  CHECK(cfg.at("quantization").at("bits").as_int() == 4 && cfg.at("quantization_config").at("group_size").as_int() == 64 &&
            cfg.at("quantization").at("mode").as_string() == "affine", "convert config");
  CHECK(ck->get("vision_tower.fc.weight").dtype == DType::BF16 && !ck->has("vision_tower.fc.scales"), "vision kept");
  CHECK(ck->get("model.norm.weight").dtype == DType::BF16, "norm kept");
  QuantConfig qc = QuantConfig::from_config(cfg);
  Weight w = load_weight(*ck, qc, "model.layers.0.mlp.up_proj");
  CHECK(w.kind == WeightKind::Affine && w.bits == 4 && w.in == 128 && w.out == 16, "converted weight loads");
  std::vector<float> x = random_vec(rng, 128), y(16);
  matmul(pool, w, x.data(), y.data(), 1, Precision::Exact);
  double err = 0, mag = 0;
  for (int r = 0; r < 16; ++r) {
    double ref = 0;
    for (int i = 0; i < 128; ++i) ref += double(bf16_to_f32(linb[size_t(r * 128 + i)])) * x[size_t(i)];
    err = std::max(err, std::fabs(ref - y[size_t(r)]));
    mag = std::max(mag, std::fabs(ref));
  }
  CHECK(err < 0.15 * mag, "converted matmul close to float (err %.3g, mag %.3g)", err, mag);
  CHECK(throws_with([&] { convert_checkpoint(dst, tmpdir("conv2"), 4, 64); }, "already quantized"), "reconvert refused");
}

static void test_threadpool(ThreadPool& pool) {
  std::vector<int64_t> v(100000, 0);
  pool.parallel_for(int64_t(v.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) v[size_t(i)] = i;
  });
  bool ok = true;
  for (size_t i = 0; i < v.size(); ++i) ok = ok && v[i] == int64_t(i);
  CHECK(ok, "parallel_for covers range");
  bool caught = throws_with([&] { pool.run([&](int tid, int n) { if (tid == n - 1) throw std::runtime_error("boom"); }); }, "boom");
  CHECK(caught, "exception from a worker is rethrown");
  std::atomic<int> cnt{0};
  pool.run([&](int, int) {
    pool.run([&](int, int) { cnt.fetch_add(1); });  // nested → inline
  });
  CHECK(cnt.load() == pool.size() * pool.size(), "nested run inline (%d)", cnt.load());
  // Dispatch latency.
  auto t0 = std::chrono::steady_clock::now();
  const int iters = 20000;
  std::atomic<int> sink{0};
  for (int i = 0; i < iters; ++i) pool.run([&](int tid, int) { sink.fetch_add(tid, std::memory_order_relaxed); });
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
  std::printf("threadpool: %d threads, run() dispatch %.2f us\n", pool.size(), us);
}

// ------------------------------------------------------------------------------------------------
// Microbench: the Qwen2.5-0.5B shapes, 4-bit group 64, BF16 scales; 24 distinct layers so the
// weights stream from DRAM as in a real forward pass.

struct RawMat {
  std::vector<uint8_t> data, scales, biases;
  Weight w;
};

static void make_raw(RawMat& m, std::mt19937& rng, int64_t out, int64_t in, int bits, int group) {
  m.data.resize(size_t(out * in * bits / 8));
  for (size_t i = 0; i < m.data.size(); i += 4) {
    uint32_t r = rng();
    std::memcpy(&m.data[i], &r, std::min<size_t>(4, m.data.size() - i));
  }
  int64_t ng = out * (in / group);
  m.scales.resize(size_t(ng * 2));
  m.biases.resize(size_t(ng * 2));
  std::uniform_real_distribution<float> u(-0.02f, 0.02f);
  for (int64_t i = 0; i < ng; ++i) {
    uint16_t s = f32_to_bf16(0.01f + u(rng)), b = f32_to_bf16(u(rng) * 8);
    std::memcpy(&m.scales[size_t(2 * i)], &s, 2);
    std::memcpy(&m.biases[size_t(2 * i)], &b, 2);
  }
  m.w.kind = WeightKind::Affine;
  m.w.dtype = DType::BF16;
  m.w.out = out;
  m.w.in = in;
  m.w.bits = bits;
  m.w.group = group;
  m.w.data = m.data.data();
  m.w.scales = m.scales.data();
  m.w.biases = m.biases.data();
}

static double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of the calling thread: with 1 thread, immune to other processes taking the core.
static double cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

static void bench(int threads, int bits, int group) {
  ThreadPool pool(threads);
  std::printf("bench: %d threads, kernels=%s, features:", pool.size(), matmul_kernel_name());
  for (auto& f : cpu_simd_features()) std::printf(" %s", f.c_str());
  std::printf("\n");
  double bw = measure_read_bandwidth(pool, size_t(512) << 20);
  std::printf("measured read bandwidth (%d threads): %.2f GB/s\n", pool.size(), bw / 1e9);

  const int L = 24;
  const int64_t H = 896, KV = 128, F = 4864, V = 151936;
  struct Sh { const char* name; int64_t out, in; int count; };
  const Sh shapes[] = {{"q_proj 896->896", H, H, 1}, {"k/v_proj 896->128", KV, H, 2}, {"o_proj 896->896", H, H, 1},
                       {"gate/up 896->4864", F, H, 2}, {"down 4864->896", H, F, 1}};
  std::mt19937 rng(99);
  std::vector<std::vector<RawMat>> layers(L);
  for (int l = 0; l < L; ++l) {
    layers[size_t(l)].resize(7);
    int i = 0;
    for (const Sh& s : shapes)
      for (int c = 0; c < s.count; ++c) make_raw(layers[size_t(l)][size_t(i++)], rng, s.out, s.in, bits, group);
  }
  RawMat head;
  make_raw(head, rng, V, H, bits, group);
  const int shape_of[7] = {0, 1, 1, 2, 3, 3, 4};
  size_t layer_bytes = 0;
  for (auto& m : layers[0]) layer_bytes += weight_bytes(m.w);
  size_t total_bytes = layer_bytes * L + weight_bytes(head.w);
  std::printf("weights: layers %.1f MB + head %.1f MB = %.1f MB per decode token\n", layer_bytes * L / 1e6,
              weight_bytes(head.w) / 1e6, total_bytes / 1e6);
  std::printf("decode roofline at measured bandwidth: %.1f tok/s\n", bw / double(total_bytes));

  const int64_t NP = 512;
  std::vector<float> x(size_t(NP * F)), y(size_t(std::max<int64_t>(NP * F, V)));
  {
    std::normal_distribution<float> nd(0, 1);
    for (auto& v : x) v = nd(rng);
  }
  for (Precision p : {Precision::Fast, Precision::Exact}) {
    const char* pn = p == Precision::Fast ? "fast" : "exact";
    // Decode: n = 1. The machine may be shared, so report the fastest of several full passes.
    double best_shape[5] = {1e9, 1e9, 1e9, 1e9, 1e9}, best_total = 1e9, th = 1e9;
    std::vector<double> call_best(size_t(L * 7), 1e9);  // per (layer, matrix): fastest call
    const int iters = 12;
    for (int it = 0; it < iters + 1; ++it) {
      double t_shape[5] = {0, 0, 0, 0, 0};
      for (int l = 0; l < L; ++l)
        for (int i = 0; i < 7; ++i) {
          double t0 = now_s();
          matmul(pool, layers[size_t(l)][size_t(i)].w, x.data(), y.data(), 1, p);
          double dt = now_s() - t0;
          t_shape[shape_of[i]] += dt;
          if (it) call_best[size_t(l * 7 + i)] = std::min(call_best[size_t(l * 7 + i)], dt);
        }
      double t0 = now_s();
      matmul(pool, head.w, x.data(), y.data(), 1, p);
      double t_head = now_s() - t0;
      if (!it) continue;
      double tot = t_head;
      for (int s2 = 0; s2 < 5; ++s2) {
        tot += t_shape[s2];
        best_shape[s2] = std::min(best_shape[s2], t_shape[s2]);
      }
      th = std::min(th, t_head);
      best_total = std::min(best_total, tot);
    }
    std::printf("\n[%s] decode n=1 (per token, best of %d passes):\n", pn, iters);
    for (int s = 0; s < 5; ++s) {
      double t = best_shape[s];
      double bytes = double(weight_bytes(layers[0][size_t(s == 0 ? 0 : s == 1 ? 1 : s == 2 ? 3 : s == 3 ? 4 : 6)].w)) *
                     shapes[s].count * L;
      std::printf("  %-20s x%-3d %8.3f ms  %6.2f GB/s\n", shapes[s].name, shapes[s].count * L, t * 1e3,
                  bytes / t / 1e9);
    }
    std::printf("  %-20s x1   %8.3f ms  %6.2f GB/s\n", "head 896->151936", th * 1e3, weight_bytes(head.w) / th / 1e9);
    double tt = best_total;
    std::printf("  total %.3f ms → %.1f tok/s; %.2f GB/s = %.0f%% of measured bandwidth\n", tt * 1e3, 1 / tt,
                total_bytes / tt / 1e9, 100.0 * total_bytes / tt / bw);
    double tc = th;
    for (double v : call_best) tc += v;
    std::printf("  sum of per-call best times %.3f ms → %.1f tok/s; %.2f GB/s = %.0f%% of measured bandwidth\n",
                tc * 1e3, 1 / tc, total_bytes / tc / 1e9, 100.0 * total_bytes / tc / bw);

    // Prefill: n = 512; per shape the fastest of several runs over distinct layers, times 24.
    double tp_shape[5] = {1e9, 1e9, 1e9, 1e9, 1e9};
    const int piters = p == Precision::Fast ? 6 : 2;
    for (int it = 0; it < piters; ++it)
      for (int i = 0; i < 7; ++i) {
        if (i == 2 || i == 5) continue;  // v_proj/up_proj: same shape as k_proj/gate_proj
        const Weight& w = layers[size_t(it % L)][size_t(i)].w;
        double t0 = now_s();
        matmul(pool, w, x.data(), y.data(), NP, p);
        double t = (now_s() - t0) * L * shapes[shape_of[i]].count;
        tp_shape[shape_of[i]] = std::min(tp_shape[shape_of[i]], t);
      }
    std::printf("[%s] prefill n=%ld:\n", pn, long(NP));
    double tp = 0, flops_total = 0;
    for (int s = 0; s < 5; ++s) {
      double t = tp_shape[s];
      tp += t;
      double fl = 2.0 * shapes[s].out * shapes[s].in * NP * shapes[s].count * L;
      flops_total += fl;
      std::printf("  %-20s %8.2f ms  %7.1f GFLOP/s\n", shapes[s].name, t * 1e3, fl / t / 1e9);
    }
    tp += th;  // head for the last token
    std::printf("  total %.1f ms (%.1f GFLOP/s) → %.1f tok/s prefill (matmuls only)\n", tp * 1e3,
                flops_total / tp / 1e9, NP / tp);
  }
}

// Min-of-many timing of one cache-resident matmul: robust on a shared machine.
static void kbench(int threads, int64_t out, int64_t in, int64_t n, int bits, int group, int reps) {
  ThreadPool pool(threads);
  std::mt19937 rng(3);
  RawMat m;
  make_raw(m, rng, out, in, bits, group);
  // The interleaved copies where the family reads them (RAPID_INTERLEAVED_GEMV=0 for the rows).
  if (bits == 4 || bits == 8) m.w.interleaved = std::make_shared<InterleavedSlot>();
  std::vector<float> x(size_t(n * in)), y(size_t(n * out));
  std::normal_distribution<float> nd(0, 1);
  for (auto& v : x) v = nd(rng);
  for (Precision p : {Precision::Fast, Precision::Exact}) {
    double best = 1e9, best_cpu = 1e9;
    for (int r = 0; r < reps; ++r) {
      double t0 = now_s(), c0 = cpu_s();
      matmul(pool, m.w, x.data(), y.data(), n, p);
      best = std::min(best, now_s() - t0);
      best_cpu = std::min(best_cpu, cpu_s() - c0);
    }
    double fl = 2.0 * out * in * n;
    std::printf("%s [%ld->%ld] n=%ld b%d g%d %dT: %.3f ms  %.1f GFLOP/s  %.2f GB/s weights", p == Precision::Fast ? "fast " : "exact",
                long(in), long(out), long(n), bits, group, threads, best * 1e3, fl / best / 1e9, weight_bytes(m.w) / best / 1e9);
    if (threads == 1) std::printf("  (thread CPU time: %.1f GFLOP/s)", fl / best_cpu / 1e9);
    std::printf("\n");
  }
}

// Decode GEMV over many distinct matrices (DRAM resident): bytes/s of weights, best pass.
static void dbench(int threads, int64_t out, int64_t in, int copies, int bits, int reps) {
  ThreadPool pool(threads);
  std::mt19937 rng(5);
  std::vector<RawMat> ms(static_cast<size_t>(copies));
  for (auto& m : ms) make_raw(m, rng, out, in, bits, 64);
  std::vector<float> x(static_cast<size_t>(in)), y(static_cast<size_t>(out));
  for (auto& v : x) v = 0.5f;
  // Fast on the rows as stored and on the interleaved copies (where the family has that GEMV),
  // alternating within each rep; then Exact.
  std::vector<Weight> rows_only;
  for (auto& m : ms) {
    rows_only.push_back(m.w);
    rows_only.back().interleaved = nullptr;
    if (bits == 4 || bits == 8) m.w.interleaved = std::make_shared<InterleavedSlot>();
  }
  double best[3] = {1e9, 1e9, 1e9};
  std::vector<double> ratio;  // per rep: rows / interleaved time
  for (int r = 0; r < reps; ++r) {
    double t[2];
    for (int k = 0; k < 2; ++k) {
      const int v = r % 2 ? 1 - k : k;
      double t0 = now_s();
      for (size_t i = 0; i < ms.size(); ++i) matmul(pool, v ? ms[i].w : rows_only[i], x.data(), y.data(), 1, Precision::Fast);
      t[v] = now_s() - t0;
      best[v] = std::min(best[v], t[v]);
    }
    if (r > 0) ratio.push_back(t[0] / t[1]);  // the first rep builds the copies
    double t0 = now_s();
    for (auto& m : ms) matmul(pool, m.w, x.data(), y.data(), 1, Precision::Exact);
    best[2] = std::min(best[2], now_s() - t0);
  }
  const char* names[3] = {"fast (rows)", "fast (interleaved)", "exact"};
  for (int v = 0; v < 3; ++v)
    std::printf("%s dram gemv [%ld->%ld] x%d b%d %dT: %.2f GB/s\n", names[v], long(in), long(out), copies, bits,
                threads, double(weight_bytes(ms[0].w)) * copies / best[v] / 1e9);
  std::sort(ratio.begin(), ratio.end());
  if (!ratio.empty())
    std::printf("time rows / interleaved per rep: median %.3f, quartiles %.3f-%.3f\n", ratio[ratio.size() / 2],
                ratio[ratio.size() / 4], ratio[ratio.size() * 3 / 4]);
}

// Kernel families side by side: the Fast matmuls of `layers` Qwen2.5-0.5B-shaped layers (DRAM resident)
// at n activation rows, each family timed in turn within every rep (order alternating), so load
// from other processes hits both alike. Prints each family's median and best, and the median and
// quartiles of the per-rep ratio to the first family.
static void isabench(int threads, int64_t n, int bits, int layers, int reps) {
  ThreadPool pool(threads);
  std::mt19937 rng(11);
  const int64_t shapes[][2] = {{896, 896}, {128, 896}, {128, 896}, {896, 896}, {4864, 896}, {4864, 896}, {896, 4864}};
  std::vector<RawMat> ms(size_t(layers) * 7);
  for (size_t i = 0; i < ms.size(); ++i) make_raw(ms[i], rng, shapes[i % 7][0], shapes[i % 7][1], bits, 64);
  std::vector<float> x(size_t(n * 4864), 0.5f), y(size_t(n * 4864));
  for (auto& v : x) v = std::normal_distribution<float>(0, 1)(rng);
  std::vector<std::string> fams = cpu_kernel_families();
  fams.pop_back();
  std::vector<std::vector<double>> t(fams.size());
  for (int r = 0; r < reps; ++r)
    for (size_t k = 0; k < fams.size(); ++k) {
      const size_t f = r % 2 ? fams.size() - 1 - k : k;
      force_kernels(fams[f].c_str());
      double t0 = now_s();
      for (auto& m : ms) matmul(pool, m.w, x.data(), y.data(), n, Precision::Fast);
      t[f].push_back(now_s() - t0);
    }
  force_kernels(nullptr);
  auto q = [](std::vector<double> v, double at) { std::sort(v.begin(), v.end()); return v[size_t(at * double(v.size() - 1))]; };
  for (size_t f = 0; f < fams.size(); ++f) {
    std::printf("isabench %s n=%ld b%d %dT x%d layers: median %.3f ms, best %.3f ms", fams[f].c_str(), long(n), bits,
                threads, layers, q(t[f], 0.5) * 1e3, q(t[f], 0) * 1e3);
    if (f > 0) {
      std::vector<double> ratio;
      for (size_t i = 0; i < t[f].size(); ++i) ratio.push_back(t[f][i] / t[0][i]);
      std::printf("; time / %s per rep: median %.3f, quartiles %.3f-%.3f", fams[0].c_str(), q(ratio, 0.5), q(ratio, 0.25),
                  q(ratio, 0.75));
    }
    std::printf("\n");
  }
}

// Where batch-1 decode loses bandwidth: per rep, in turn, the Fast GEMVs of `layers` Qwen2.5-0.5B-shaped
// layers (168 matrices: many short weight streams), one 896-wide matrix of about the same bytes (one long
// stream) and the read probe (measure_read_bandwidth's pass) over the same bytes. Median and best GB/s, from
// thread CPU time at one thread.
// only (argument SHAPE): -1 the layer's seven shapes in turn, else every matrix of shapes[only] (4 gate, 6 down).
static void streambench(int threads, int layers, int reps, int only) {
  ThreadPool pool(threads);
  std::mt19937 rng(13);
  const int64_t shapes[][2] = {{896, 896}, {128, 896}, {128, 896}, {896, 896}, {4864, 896}, {4864, 896}, {896, 4864}};
  std::vector<RawMat> ms(size_t(layers) * 7);
  size_t stack_bytes = 0;
  for (size_t i = 0; i < ms.size(); ++i) {
    const size_t k = only >= 0 && only < 7 ? size_t(only) : i % 7;
    make_raw(ms[i], rng, shapes[k][0], shapes[k][1], 4, 64);
    ms[i].w.interleaved = std::make_shared<InterleavedSlot>();  // the decode GEMV's copies, where the family has it
    stack_bytes += weight_bytes(ms[i].w);
  }
  RawMat big;
  const int64_t big_out = int64_t(stack_bytes / weight_bytes(ms[0].w)) * 896 / 16 * 16;
  make_raw(big, rng, big_out, 896, 4, 64);
  big.w.interleaved = std::make_shared<InterleavedSlot>();
  std::vector<float> x(4864), y(static_cast<size_t>(big_out));
  for (auto& v : x) v = std::normal_distribution<float>(0, 1)(rng);
  const size_t n64 = stack_bytes / 8 / 64 * 64;
  std::vector<uint64_t> buf(n64);
  for (size_t i = 0; i < n64; ++i) buf[i] = i;
  std::atomic<uint64_t> sink{0};
  auto stack = [&] { for (auto& m : ms) matmul(pool, m.w, x.data(), y.data(), 1, Precision::Fast); };
  auto one = [&] { matmul(pool, big.w, x.data(), y.data(), 1, Precision::Fast); };
  auto probe = [&] {
    pool.parallel_for(int64_t(n64), [&](int64_t b, int64_t e) {
      sink.fetch_add(detail::active_kernels().read_sum(buf.data() + b, size_t(e - b)), std::memory_order_relaxed);
    }, 64);
  };
  stack();
  one();  // builds the copies
  std::vector<double> gbs[3];
  const double bytes[3] = {double(stack_bytes), double(weight_bytes(big.w)), double(n64 * 8)};
  for (int r = 0; r < reps; ++r)
    for (int k = 0; k < 3; ++k) {
      const int v = (k + r) % 3;
      // One thread: its CPU time (memory stalls count, time descheduled by other processes does not).
      const double t0 = threads == 1 ? cpu_s() : now_s();
      if (v == 0) stack();
      else if (v == 1) one();
      else probe();
      gbs[v].push_back(bytes[v] / ((threads == 1 ? cpu_s() : now_s()) - t0) / 1e9);
    }
  auto q = [](std::vector<double> v, double at) { std::sort(v.begin(), v.end()); return v[size_t(at * double(v.size() - 1))]; };
  std::printf("streambench %dT: %d-layer stack %.1f GB/s (best %.1f), one %ldx896 matrix %.1f (best %.1f), probe %.1f "
              "(best %.1f); medians, %zu MB each\n",
              threads, layers, q(gbs[0], 0.5), q(gbs[0], 1), long(big_out), q(gbs[1], 0.5), q(gbs[1], 1), q(gbs[2], 0.5),
              q(gbs[2], 1), stack_bytes >> 20);
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "isabench") {
    auto arg = [&](int i, long d) { return argc > i ? std::atol(argv[i]) : d; };
    isabench(int(arg(2, 2)), arg(3, 1), int(arg(4, 4)), int(arg(5, 8)), int(arg(6, 40)));
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "streambench") {
    auto arg = [&](int i, long d) { return argc > i ? std::atol(argv[i]) : d; };
    streambench(int(arg(2, 2)), int(arg(3, 24)), int(arg(4, 40)), int(arg(5, -1)));
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "dbench") {
    auto arg = [&](int i, long d) { return argc > i ? std::atol(argv[i]) : d; };
    dbench(int(arg(2, 1)), arg(3, 4864), arg(4, 896), int(arg(5, 64)), int(arg(6, 4)), int(arg(7, 10)));
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "kbench") {
    auto arg = [&](int i, long d) { return argc > i ? std::atol(argv[i]) : d; };
    kbench(int(arg(2, 1)), arg(3, 896), arg(4, 896), arg(5, 64), int(arg(6, 4)), int(arg(7, 64)), int(arg(8, 200)));
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "bench") {
    int threads = argc > 2 ? std::atoi(argv[2]) : 2;
    int bits = argc > 3 ? std::atoi(argv[3]) : 4;
    int group = argc > 4 ? std::atoi(argv[4]) : 64;
    bench(threads, bits, group);
    return 0;
  }
  ThreadPool pool(argc > 1 ? std::atoi(argv[1]) : 2);
  std::printf("kernels: %s\n", matmul_kernel_name());
  std::printf("families:");
  for (const std::string& f : cpu_kernel_families()) std::printf(" %s", f.c_str());
  std::printf("\n");
  test_dtype();
  test_json();
  test_threadpool(pool);
  test_quantize();
  test_safetensors();
  test_quant_config_and_load();
  test_matmul(pool);
  test_batch_invariance(pool);
  test_isa_identity(pool);
  test_interleaved(pool);
  test_convert(pool);
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
