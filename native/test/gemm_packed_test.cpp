// The packed dense GEMM (cpu/gemm_packed.h) on every kernel family this CPU runs: against a double
// reference, bitwise identical across families, row counts, row offsets and thread counts, strided
// operands, partial panels and k slices. `gemm_packed_test bench OUT IN N THREADS ROUNDS [DTYPE]` times it
// against the row kernels (the same weight unpacked) in process CPU seconds, the ratio printed per round.
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "cpu/gemm_packed.h"
#include "cpu/matmul.h"
#include "tensor/dtype.h"

using namespace rapid;

namespace {

struct Dense {
  Weight w;
  std::vector<uint8_t> bytes;
  std::vector<double> ref;  // [out, in] the values the kernels see
};

Dense make_dense(std::mt19937& rng, int64_t out, int64_t in, DType dt) {
  Dense d;
  std::normal_distribution<float> nd(0.0f, 0.5f);
  const size_t es = dtype_size(dt);
  d.bytes.resize(size_t(out * in) * es);
  d.ref.resize(size_t(out * in));
  for (size_t i = 0; i < d.ref.size(); ++i) {
    const float v = nd(rng);
    if (dt == DType::F32) std::memcpy(d.bytes.data() + 4 * i, &v, 4);
    else {
      const uint16_t h = dt == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
      std::memcpy(d.bytes.data() + 2 * i, &h, 2);
    }
    d.ref[i] = load_float(d.bytes.data(), dt, i);
  }
  d.w.dtype = dt;
  d.w.out = out;
  d.w.in = in;
  d.w.data = d.bytes.data();
  d.w.name = "test.packed";
  d.w.packed = pack_dense(d.w);
  return d;
}

std::vector<float> random_x(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// Worst |y - Σ w x| / Σ |w x| over every output (y at stride ldy, x at stride ldx).
double rel_err(const Dense& d, const float* x, int64_t ldx, const float* y, int64_t ldy, int64_t n) {
  double worst = 0;
  for (int64_t c = 0; c < n; ++c)
    for (int64_t o = 0; o < d.w.out; ++o) {
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < d.w.in; ++k) {
        const double t = d.ref[size_t(o * d.w.in + k)] * double(x[c * ldx + k]);
        ref += t;
        mag += std::fabs(t);
      }
      worst = std::max(worst, std::fabs(double(y[c * ldy + o]) - ref) / (mag + 1e-30));
    }
  return worst;
}

void test_reference(ThreadPool& pool) {
  std::mt19937 rng(26);
  struct Shape { int64_t out, in; };
  // Partial panels (out % 16), two k slices (in > 8192), a single column, a k of 1; n = 230 spans two
  // row blocks of every family's work items.
  const Shape shapes[] = {{17, 100}, {5, 7}, {64, 896}, {19, 8200}, {1, 33}, {130, 1}};
  for (const std::string& fam : cpu_kernel_families()) {
    CHECK(force_kernels(fam.c_str()), "force_kernels(%s)", fam.c_str());
    for (DType dt : {DType::F32, DType::BF16, DType::F16})
      for (const Shape& s : shapes)
        for (int64_t n : {1, 3, 15, 17, 64, 230}) {
          Dense d = make_dense(rng, s.out, s.in, dt);
#if defined(__x86_64__)
          CHECK(d.w.packed != nullptr, "pack_dense %s", dtype_name(dt));
#else
          CHECK(d.w.packed == nullptr, "pack_dense %s: x86 only", dtype_name(dt));
#endif
          // Strided operands with a sentinel column past each y row.
          const int64_t ldx = s.in + 3, ldy = s.out + 2;
          auto x = random_x(rng, size_t(n * ldx));
          std::vector<float> y(size_t(n * ldy), 7.0f);
          matmul_strided(pool, d.w, x.data(), ldx, y.data(), ldy, n);
          const double e = rel_err(d, x.data(), ldx, y.data(), ldy, n);
          CHECK(e < 1e-5, "%s packed %s [%ld,%ld] n=%ld rel err %.3g", fam.c_str(), dtype_name(dt), long(s.out),
                long(s.in), long(n), e);
          bool sentinel = true;
          for (int64_t c = 0; c < n; ++c)
            for (int64_t o = s.out; o < ldy; ++o) sentinel = sentinel && y[size_t(c * ldy + o)] == 7.0f;
          CHECK(sentinel, "%s packed %s [%ld,%ld] n=%ld wrote past a row", fam.c_str(), dtype_name(dt), long(s.out),
                long(s.in), long(n));
        }
  }
  force_kernels(nullptr);
}

// One fma chain per output in k order: the same bits whatever the family (scalar included), the
// number of rows, a row's position in the batch, or the thread count.
void test_identity(ThreadPool& pool) {
  std::mt19937 rng(2626);
  ThreadPool one(1);
  int checked = 0;
  for (DType dt : {DType::BF16, DType::F32, DType::F16}) {
    Dense d = make_dense(rng, 75, 700, dt);
    const int64_t N = 37;
    auto x = random_x(rng, size_t(N * d.w.in));
    std::vector<float> y0(size_t(N * d.w.out));
    force_kernels(cpu_kernel_families().front().c_str());
    matmul(pool, d.w, x.data(), y0.data(), N);
    for (const std::string& fam : cpu_kernel_families()) {
      force_kernels(fam.c_str());
      for (int64_t c0 : {int64_t(0), int64_t(5), int64_t(36)})
        for (int64_t n : {int64_t(1), int64_t(2), int64_t(14), int64_t(N)}) {
          if (c0 + n > N) continue;
          for (ThreadPool* p : {&pool, &one}) {
            std::vector<float> y(size_t(n * d.w.out));
            matmul(*p, d.w, x.data() + c0 * d.w.in, y.data(), n);
            CHECK(std::memcmp(y.data(), y0.data() + c0 * d.w.out, y.size() * 4) == 0,
                  "%s %s rows [%ld, %ld) threads %d differ from %s at n=%ld", fam.c_str(), dtype_name(dt), long(c0),
                  long(c0 + n), p->size(), cpu_kernel_families().front().c_str(), long(N));
            ++checked;
          }
        }
    }
  }
  force_kernels(nullptr);
  std::printf("packed identity: %d comparisons\n", checked);
}

void test_unpackable() {
  Weight a;
  a.kind = WeightKind::Affine;
  a.out = 16;
  a.in = 64;
  uint32_t dummy = 0;
  a.data = &dummy;
  CHECK(pack_dense(a) == nullptr, "affine weights are not packed");
  Weight e;
  CHECK(pack_dense(e) == nullptr, "an unloaded weight is not packed");
}

// GFLOP/s of the packed GEMM and of the row kernels on the same bf16 weight, interleaved per round.
void bench(int64_t out, int64_t in, int64_t n, int threads, int rounds, DType dt) {
  std::mt19937 rng(7);
  Dense d = make_dense(rng, out, in, dt);
  Weight rows = d.w;
  rows.packed = nullptr;
  ThreadPool pool(threads);
  auto x = random_x(rng, size_t(n * in));
  std::vector<float> y(size_t(n * out));
  const double flop = 2.0 * double(n) * double(out) * double(in);
  // Process CPU seconds (all threads): on a shared machine steadier than wall time, and per core.
  auto time = [&](const Weight& w) {
    timespec a{}, b{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
    matmul(pool, w, x.data(), y.data(), n);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
    return double(b.tv_sec - a.tv_sec) + 1e-9 * double(b.tv_nsec - a.tv_nsec);
  };
  time(d.w);
  time(rows);
  std::printf("bench %s [%ld, %ld] x n=%ld, %d threads, kernels %s\n", dtype_name(dt), long(out), long(in), long(n),
              threads, matmul_kernel_name());
  for (int r = 0; r < rounds; ++r) {
    const double tp = time(d.w), tr = time(rows);
    std::printf("round %d: packed %.1f GFLOP per CPU s, rows %.1f, ratio %.2fx\n", r, flop / tp / 1e9,
                flop / tr / 1e9, tr / tp);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "bench") {
    auto arg = [&](int i, long def) { return argc > i ? std::atol(argv[i]) : def; };
    bench(arg(2, 3420), arg(3, 1280), arg(4, 1024), int(arg(5, 2)), int(arg(6, 5)),
          argc > 7 ? parse_dtype(argv[7]) : DType::BF16);
    return 0;
  }
  ThreadPool pool(2);
  std::printf("kernels: %s\n", matmul_kernel_name());
  test_reference(pool);
  test_identity(pool);
  test_unpackable();
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}
