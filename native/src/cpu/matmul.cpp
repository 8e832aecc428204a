// Matmul driver: picks the kernel family once (cpuid / hwcaps), quantizes activations for the Fast path,
// and splits output rows across the pool. Kernels live in cpu/kernels_*.cpp.
#include "cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cpu/gemm_packed.h"
#include "cpu/kernels.h"
#include "cpu/matmul_fast.h"
#include "cpu/row_split.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)  // <asm/hwcap.h>; older libcs lack the name
#endif
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

namespace rapid {
namespace {

std::atomic<bool> g_force_scalar{false};

bool cpu_is_intel() {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0), "c"(0));
  return b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e;  // "GenuineIntel"
#else
  return false;
#endif
}

int init_prefetch_rows() {
  if (const char* e = std::getenv("RAPID_PREFETCH_ROWS")) return std::max(0, std::atoi(e));
  return cpu_is_intel() ? 20 : 4;  // measured: Intel Xeon 37 → 57 tok/s decode; AMD Zen3 ±5%
}

// The kernel families this CPU can run, best first (scalar always last).
std::vector<const kern::Kernels*> available_kernels() {
  std::vector<const kern::Kernels*> v;
#if defined(__x86_64__)
  if (kern::cpu_has_avx512_vnni()) v.push_back(&kern::avx512_vnni_kernels());
  if (kern::cpu_has_avx2_fma_f16c()) v.push_back(&kern::avx2_kernels());
#elif defined(__aarch64__)
  if (kern::cpu_has_dotprod()) v.push_back(&kern::neon_dotprod_kernels());
  v.push_back(&kern::neon_kernels());
#endif
  v.push_back(&kern::scalar_kernels());
  return v;
}

// Looks a family up by name among those the CPU can run ("avx512" is short for "avx512-vnni").
const kern::Kernels* find_kernels(std::string_view isa) {
  if (isa == "avx512") isa = "avx512-vnni";
  for (const kern::Kernels* k : available_kernels())
    if (isa == k->name) return k;
  return nullptr;
}

// The best family, or the one RAPID_CPU_ISA names (tests run the kernel suite per ISA with it);
// RAPID_NO_SIMD forces the portable kernels. An ISA the CPU lacks is reported on stderr and the best
// family runs (the first matmul may be on a pool thread, where an exception would terminate).
const kern::Kernels& pick_kernels() {
  if (std::getenv("RAPID_NO_SIMD") != nullptr) return kern::scalar_kernels();
  const kern::Kernels& best = *available_kernels().front();
  const char* isa = std::getenv("RAPID_CPU_ISA");
  if (isa == nullptr || *isa == '\0') return best;
  if (const kern::Kernels* k = find_kernels(isa)) return *k;
  std::string names;
  for (const kern::Kernels* k : available_kernels()) names += std::string(names.empty() ? "" : ", ") + k->name;
  std::fprintf(stderr, "rapid: RAPID_CPU_ISA=%s is not one this CPU runs (%s); using %s\n", isa, names.c_str(),
               best.name);
  return best;
}

std::atomic<const kern::Kernels*> g_forced{nullptr};

const kern::Kernels& kernels() {
  static const bool init = (kern::g_prefetch_rows = init_prefetch_rows(), true);
  (void)init;
  if (const kern::Kernels* f = g_forced.load(std::memory_order_relaxed)) return *f;
  if (g_force_scalar.load(std::memory_order_relaxed)) return kern::scalar_kernels();
  static const kern::Kernels& picked = pick_kernels();
  return picked;
}

// Per-thread growable scratch (pool threads are persistent, so this allocates once).
float* scratch_floats(size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

struct XQBuffers {
  std::vector<int8_t> q;
  std::vector<float> d, dT, sx, sxT;
  std::vector<uint32_t> xp;
};
thread_local XQBuffers t_xq_buffers;

// xp[t][p][l] = dword p of activation row 16t + l, XOR flip (Kernels::gemm_rows' layout).
void pack_gemm_x(const int8_t* q, int64_t n, int64_t K, uint32_t flip, uint32_t* xp) {
  const int64_t nd = K / 4;
  for (int64_t t = 0; t < (n + 15) / 16; ++t)
    for (int l = 0; l < 16; ++l) {
      const int64_t c = t * 16 + l;
      uint32_t* dst = xp + t * nd * 16 + l;
      if (c >= n) {
        for (int64_t p = 0; p < nd; ++p) dst[p * 16] = 0;
        continue;
      }
      for (int64_t p = 0; p < nd; ++p) {
        uint32_t v;
        std::memcpy(&v, q + c * K + p * 4, 4);
        dst[p * 16] = v ^ flip;
      }
    }
}

void check_shapes(const Weight& W, int64_t n) {
  if (!W.valid()) throw std::runtime_error("matmul: weight " + W.name + " is not loaded");
  if (n < 0) throw std::runtime_error("matmul: negative row count");
}

bool fast_ok(const Weight& W) {
  return W.kind == WeightKind::Affine && (W.bits == 4 || W.bits == 8) && W.in % 64 == 0 &&
         (W.group == 32 || W.group == 64 || W.group == 128);
}

}  // namespace

bool force_scalar_kernels(bool on) { return g_force_scalar.exchange(on); }

const char* matmul_kernel_name() { return kernels().name; }

bool force_kernels(const char* isa) {
  if (isa == nullptr) {
    g_forced.store(nullptr);
    return true;
  }
  const kern::Kernels* k = find_kernels(isa);
  if (k != nullptr) g_forced.store(k);
  return k != nullptr;
}

std::vector<std::string> cpu_kernel_families() {
  std::vector<std::string> v;
  for (const kern::Kernels* k : available_kernels()) v.emplace_back(k->name);
  return v;
}

// dst[j, c] = src[c, j] for src [n, m]; dst [m, ldd] with columns n..ldd zeroed.
static void transpose_padded(const float* src, int64_t n, int64_t m, int64_t ldd, float* dst) {
  for (int64_t j = 0; j < m; ++j) {
    float* row = dst + j * ldd;
    for (int64_t c = 0; c < n; ++c) row[c] = src[c * m + j];
    for (int64_t c = n; c < ldd; ++c) row[c] = 0;
  }
}

namespace detail {

const kern::Kernels& active_kernels() { return kernels(); }

bool fast_path_ok(const Weight& W) { return fast_ok(W); }

float* thread_scratch(size_t n) { return scratch_floats(n); }

kern::XQuant quantize_activations(ThreadPool& pool, const kern::Kernels& k, const Weight& W, const float* x,
                                  int64_t ldx, int64_t n) {
  const int64_t K = W.in;
  XQBuffers& xb = t_xq_buffers;
  kern::XQuant xq;
  kern::xq_layout(W, xq.xb, xq.perm);
  xq.K = K;
  xq.nblk = K / xq.xb;
  xq.ngp = ((K / W.group) + 7) / 8 * 8;
  if (xb.q.size() < size_t(n * K)) xb.q.resize(size_t(n * K));
  if (xb.d.size() < size_t(n * xq.nblk)) xb.d.resize(size_t(n * xq.nblk));
  if (xb.sx.size() < size_t(n * xq.ngp)) xb.sx.resize(size_t(n * xq.ngp));
  xq.q = xb.q.data();
  xq.d = xb.d.data();
  xq.sx = xb.sx.data();
  auto quant = [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      k.quantize_x(x + c * ldx, K, xq.xb, xq.perm, W.group, xq.ngp, xq.q + c * K, xq.d + c * xq.nblk,
                   xq.sx + c * xq.ngp);
  };
  if (n * K >= 16384 && pool.size() > 1) pool.parallel_for(n, quant);
  else quant(0, n);
  // Block-major copy of the scales: the kernels load 4 rows' scales of one block at once.
  xq.ldd = (n + 3) / 4 * 4;
  if (xb.dT.size() < size_t(xq.nblk * xq.ldd)) xb.dT.resize(size_t(xq.nblk * xq.ldd));
  xq.dT = xb.dT.data();
  transpose_padded(xq.d, n, xq.nblk, xq.ldd, xq.dT);
  if (xb.sxT.size() < size_t(xq.ngp * xq.ldd)) xb.sxT.resize(size_t(xq.ngp * xq.ldd));
  xq.sxT = xb.sxT.data();
  transpose_padded(xq.sx, n, xq.ngp, xq.ldd, xq.sxT);
  return xq;
}

}  // namespace detail

void matmul(ThreadPool& pool, const Weight& W, const float* x, float* y, int64_t n, Precision p) {
  matmul_strided(pool, W, x, W.in, y, W.out, n, p);
}

void matmul_strided(ThreadPool& pool, const Weight& W, const float* x, int64_t ldx, float* y, int64_t ldy,
                    int64_t n, Precision p) {
  check_shapes(W, n);
  if (n == 0 || W.out == 0) return;
  const kern::Kernels& k = kernels();
  if (W.packed != nullptr && W.kind == WeightKind::Dense) {
    gemm_packed(pool, *W.packed, x, ldx, y, ldy, n, k.name);  // same bits for every n and family
    return;
  }
  const int64_t K = W.in;

  if (p == Precision::Fast && fast_ok(W)) {
    // Quantize the activations once; all threads read them.
    kern::XQuant xq = detail::quantize_activations(pool, k, W, x, ldx, n);
    XQBuffers& xb = t_xq_buffers;
    const size_t scratch = kern::fast_scratch_floats(W);
    const InterleavedRows* il = detail::interleaved_for(pool, k, W, n);
    if (il == nullptr && k.gemm_rows != nullptr && n >= kern::kGemmMinRows) {
      const size_t np = size_t((n + 15) / 16 * 16 * K / 4);
      if (xb.xp.size() < np) xb.xp.resize(np);
      xq.xp = xb.xp.data();
      pack_gemm_x(xq.q, n, K, W.bits == 8 ? kern::kGemmXFlip8 : 0u, xq.xp);
      split_rows(pool, W.out, n * K, [&](int64_t r0, int64_t r1) {
        k.gemm_rows(W, xq, n, r0, r1, y, ldy, scratch_floats(scratch));
      });
      return;
    }
    split_rows(pool, W.out, n * K, [&](int64_t r0, int64_t r1) {
      detail::fast_rows_on(k, il, W, xq, n, r0, r1, y, ldy, scratch_floats(scratch));
    }, il != nullptr ? detail::kInterleavedAlign : 4);
    return;
  }

  if (n == 1) {
    split_rows(pool, W.out, K, [&](int64_t r0, int64_t r1) {
      k.gemv_exact(W, x, r0, r1, y, scratch_floats(size_t(2 * K + 64)));
    });
    return;
  }
  // Exact: convert two weight rows at a time to f32 (no conversion for F32 Dense), then dot with a
  // panel of activation rows small enough to stay in L2.
  int64_t P = (192 * 1024) / std::max<int64_t>(1, K * 4);
  P = std::max<int64_t>(4, P / 4 * 4);
  split_rows(pool, W.out, n * K, [&](int64_t r0, int64_t r1) {
    float* buf = scratch_floats(size_t(2 * K));
    for (int64_t c0 = 0; c0 < n; c0 += P) {
      const int64_t c1 = std::min(n, c0 + P);
      for (int64_t r = r0; r < r1; r += 2) {
        const int R = r + 2 <= r1 ? 2 : 1;
        const float* w[2];
        w[0] = k.row_f32(W, r, buf);
        w[1] = R == 2 ? k.row_f32(W, r + 1, buf + K) : nullptr;
        k.dot_rows(w, R, x + c0 * ldx, ldx, c1 - c0, K, y + c0 * ldy + r, ldy);
      }
    }
  });
}

void embedding_rows(const Weight& E, const int32_t* ids, int64_t n, float* out) {
  if (!E.valid()) throw std::runtime_error("embedding: weight " + E.name + " is not loaded");
  const kern::Kernels& k = kernels();
  for (int64_t i = 0; i < n; ++i) {
    int32_t id = ids[i];
    if (id < 0 || id >= E.out)
      throw std::runtime_error("embedding " + E.name + ": token id " + std::to_string(id) + " outside [0, " +
                               std::to_string(E.out) + ")");
    float* dst = out + i * E.in;
    const float* src = k.row_f32(E, id, dst);
    if (src != dst) std::memcpy(dst, src, size_t(E.in) * 4);
  }
}

std::vector<std::string> cpu_simd_features() {
  std::vector<std::string> f;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("sse4.2")) f.push_back("sse4.2");
  if (__builtin_cpu_supports("avx")) f.push_back("avx");
  if (__builtin_cpu_supports("avx2")) f.push_back("avx2");
  if (__builtin_cpu_supports("fma")) f.push_back("fma");
  if (kern::cpu_has_avx2_fma_f16c()) f.push_back("f16c");
  if (__builtin_cpu_supports("avx512f")) f.push_back("avx512f");
  if (__builtin_cpu_supports("avx512bw")) f.push_back("avx512bw");
  if (__builtin_cpu_supports("avx512vl")) f.push_back("avx512vl");
  if (kern::cpu_has_avx512_vnni()) f.push_back("avx512_vnni");  // /proc/cpuinfo's name; OS state checked
#elif defined(__aarch64__)
  f.push_back("neon");
  if (kern::cpu_has_dotprod()) f.push_back("asimddp");  // /proc/cpuinfo's name, as doctor reports it
#endif
  return f;
}

namespace kern {
int g_prefetch_rows = 4;

bool cpu_has_avx2_fma_f16c() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
  // F16C: CPUID.1:ECX bit 29 (no __builtin_cpu_supports name in older compilers).
  unsigned a, b, c, d;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
  return (c >> 29) & 1;
#else
  return false;
#endif
}

bool cpu_has_avx512_vnni() {
#if defined(__x86_64__)
  if (!cpu_has_avx2_fma_f16c()) return false;
  unsigned a, b, c, d;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0), "c"(0));
  if (a < 7) return false;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
  if (!((c >> 27) & 1)) return false;  // OSXSAVE: xgetbv is usable
  // The OS must save the opmask and ZMM state (XCR0 bits 5-7) as well as SSE/AVX (bits 1-2).
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0xE6) != 0xE6) return false;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
  const bool f = (b >> 16) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1, vnni = (c >> 11) & 1;
  return f && bw && vl && vnni;
#else
  return false;
#endif
}

bool cpu_has_dotprod() {
#if defined(__aarch64__) && defined(__linux__)
  return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__aarch64__) && defined(__APPLE__)
  int v = 0;
  size_t len = sizeof v;
  return sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &len, nullptr, 0) == 0 && v != 0;
#else
  return false;
#endif
}
}  // namespace kern

double measure_read_bandwidth(ThreadPool& pool, size_t bytes) {
  size_t n = std::max<size_t>(bytes / 8, 1 << 16);
  n = (n + 63) / 64 * 64;
  std::unique_ptr<uint64_t[]> buf(new uint64_t[n]);
  pool.parallel_for(int64_t(n), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) buf[size_t(i)] = uint64_t(i);
  }, 64);
  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int pass = 0; pass < 5; ++pass) {
    auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(int64_t(n), [&](int64_t b, int64_t e) {
      sink.fetch_add(kernels().read_sum(buf.get() + b, size_t(e - b)), std::memory_order_relaxed);
    }, 64);
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, double(n * 8) / dt);
  }
  if (sink.load() == 42) best += 0;  // keep the reads alive
  return best;
}

}  // namespace rapid
