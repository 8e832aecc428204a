// Op test of cuda::matmul / cuda::matmul_glu against the CPU matmul (Precision::Exact): every weight
// format x n x shape, bitwise batch invariance, bias/accumulate, fused multi-job launches, GLU, and
// the decode bandwidth of 4-bit weights. Prints one PASS/FAIL line per case; exits 1 on any failure.
//
// Build (from the repo root; one command):
//   mkdir -p /tmp/k1 && nvcc -std=c++20 -O3 -gencode arch=compute_90,code=sm_90
//     -Xcompiler -Wall,-Wextra -Werror all-warnings -Inative/src
//     native/test/cuda_matmul_test.cu native/src/cuda/matmul.cu native/src/cuda/matmul_mma.cu native/src/cuda/norm_rope.cu native/src/cuda/check.cu native/src/cuda/tiled_codes.cpp
//     native/src/cpu/matmul.cpp native/src/cpu/kernels_scalar.cpp native/src/cpu/kernels_x86.cpp
//     native/src/cpu/threadpool.cpp native/src/quant/quantize.cpp native/src/format/json.cpp
//     native/src/format/safetensors.cpp -o /tmp/k1/cuda_matmul_test -lpthread
// (kernels_x86.cpp selects AVX2 / AVX-512 with target pragmas itself: no -mavx2 needed.)
// Run: /tmp/k1/cuda_matmul_test            (RAPID_CUDA_MM_QUICK=1 skips the n=130 sweeps)
//
// Error metric: rel = |gpu - cpu| / Σ_i |w_i·x_i| (the dot product's own magnitude scale, so a
// cancelling sum near 0 is not mistaken for a large relative error); pass if rel <= 1e-5.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/threadpool.h"
#include "cuda/cuda_kernels.h"
#include "cuda/rope_rows.h"
#include "cuda/tiled_codes.h"
#include "layers/activations.h"
#include "quant/quantize.h"
#include "tensor/dtype.h"

using namespace rapid;

namespace {

int g_failures = 0;
constexpr double kTol = 1e-5;
// Fast: x is rounded to bf16 (relative error <= 2^-9 per element), so |error| <= 2^-9 · Σ|w·x| plus f32 sums.
constexpr double kFastTol = 2.5e-3;
cuda::MathMode g_mode = cuda::MathMode::Exact;  // the arithmetic every GPU call of the current pass uses
double tolerance() { return g_mode == cuda::MathMode::Fast ? kFastTol : kTol; }
std::string mode_prefix() { return g_mode == cuda::MathMode::Fast ? "fast " : ""; }

void ck(cudaError_t e, const char* what) { cuda::check(e, what); }

// Device buffer owning its bytes.
struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  DevBuf() = default;
  explicit DevBuf(size_t b) : bytes(b) { ck(cudaMalloc(&p, b ? b : 16), "cudaMalloc"); }
  DevBuf(const void* host, size_t b) : DevBuf(b) { ck(cudaMemcpy(p, host, b, cudaMemcpyHostToDevice), "h2d"); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : p(o.p), bytes(o.bytes) { o.p = nullptr; }
  DevBuf& operator=(DevBuf&& o) noexcept {
    std::swap(p, o.p);
    std::swap(bytes, o.bytes);
    return *this;
  }
  ~DevBuf() { if (p) cudaFree(p); }
  float* f() const { return static_cast<float*>(p); }
};

struct Format {
  WeightKind kind;
  int bits, group;
  DType dtype;
  std::string name() const {
    if (kind == WeightKind::Dense) return std::string("dense-") + dtype_name(dtype);
    char b[48];  // snprintf, not operator+: GCC 12 reports a false -Wrestrict on "a" + std::string
    std::snprintf(b, sizeof b, "a%dg%d-%s", bits, group, dtype_name(dtype));
    return b;
  }
};

// A host weight (bytes owned here), its device copy, and the f32 dequantized rows |W| for the error scale.
struct TestWeight {
  Format fmt;
  int64_t out = 0, in = 0;
  std::vector<uint8_t> data, scales, biases;
  std::vector<float> absw;  // [out, in] |dequantized W|
  Weight host;
  DevBuf d_data, d_scales, d_biases;
  cuda::DevWeight dev;
  size_t weight_bytes() const { return data.size() + scales.size() + biases.size(); }
};

uint16_t to_bits(float v, DType t) { return t == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v); }

void store(std::vector<uint8_t>& dst, const std::vector<float>& v, DType t) {
  dst.resize(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::F32) {
      std::memcpy(dst.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t b = to_bits(v[i], t);
      std::memcpy(dst.data() + 2 * i, &b, 2);
    }
  }
}

float round_to(float v, DType t) {
  if (t == DType::F16) return f16_to_f32(f32_to_f16(v));
  if (t == DType::BF16) return bf16_to_f32(f32_to_bf16(v));
  return v;
}

TestWeight make_weight(const Format& f, int64_t out, int64_t in, std::mt19937& rng, bool dev_copy = true) {
  TestWeight W;
  W.fmt = f;
  W.out = out;
  W.in = in;
  std::normal_distribution<float> nd(0.f, 0.05f);
  std::vector<float> w(size_t(out * in));
  for (auto& v : w) v = round_to(nd(rng), f.dtype);
  if (f.kind == WeightKind::Dense) {
    store(W.data, w, f.dtype);
  } else {
    std::vector<uint32_t> packed;
    quantize_affine_typed(w.data(), out, in, f.group, f.bits, f.dtype, packed, W.scales, W.biases);
    W.data.resize(packed.size() * 4);
    std::memcpy(W.data.data(), packed.data(), W.data.size());
  }
  W.host.kind = f.kind;
  W.host.dtype = f.dtype;
  W.host.out = out;
  W.host.in = in;
  W.host.data = W.data.data();
  W.host.scales = W.scales.empty() ? nullptr : W.scales.data();
  W.host.biases = W.biases.empty() ? nullptr : W.biases.data();
  W.host.bits = f.bits;
  W.host.group = f.group;
  W.host.name = "test." + f.name();
  if (!dev_copy) return W;  // benchmark weights: no error scale, copies made by the caller
  // |W| through the CPU's own dequantization (embedding_rows gathers and dequantizes rows).
  W.absw.resize(size_t(out * in));
  std::vector<int32_t> ids(static_cast<size_t>(out));
  for (int64_t r = 0; r < out; ++r) ids[size_t(r)] = int32_t(r);
  embedding_rows(W.host, ids.data(), out, W.absw.data());
  for (auto& v : W.absw) v = std::fabs(v);
  {
    W.d_data = DevBuf(W.data.data(), W.data.size());
    if (!W.scales.empty()) {
      W.d_scales = DevBuf(W.scales.data(), W.scales.size());
      W.d_biases = DevBuf(W.biases.data(), W.biases.size());
    }
    W.dev = cuda::device_view(W.host, W.d_data.p, W.d_scales.p, W.d_biases.p);
  }
  return W;
}

// scale[r*out + o] = Σ_i |W[o,i]|·|x[r,i]| over n rows of x [n, ldx].
std::vector<double> abs_scale(const TestWeight& W, const float* x, int64_t ldx, int64_t n) {
  std::vector<double> s(size_t(n * W.out));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < W.out; ++o) {
      const float* wr = W.absw.data() + o * W.in;
      const float* xr = x + r * ldx;
      double a = 0;
      for (int64_t i = 0; i < W.in; ++i) a += double(wr[i]) * std::fabs(double(xr[i]));
      s[size_t(r * W.out + o)] = a;
    }
  return s;
}

std::vector<float> random_vec(size_t n, std::mt19937& rng, float sd = 1.f) {
  std::normal_distribution<float> nd(0.f, sd);
  std::vector<float> v(n);
  for (auto& e : v) e = nd(rng);
  return v;
}

std::vector<float> download(const DevBuf& b, size_t n) {
  std::vector<float> h(n);
  ck(cudaMemcpy(h.data(), b.p, n * 4, cudaMemcpyDeviceToHost), "d2h");
  return h;
}

// Whether the first `count` floats of a and b are bitwise equal.
bool same_bits(const DevBuf& a, const DevBuf& b, size_t count) {
  return std::memcmp(download(a, count).data(), download(b, count).data(), count * 4) == 0;
}

struct Err {
  double max_abs = 0, max_rel = 0;
  bool finite = true;
  void add(double got, double want, double scale) {
    if (!std::isfinite(got)) finite = false;
    const double d = std::fabs(got - want);
    max_abs = std::fmax(max_abs, d);
    max_rel = std::fmax(max_rel, d / std::fmax(scale, 1e-30));
  }
  bool ok() const { return finite && max_rel <= tolerance(); }
};

void report(bool ok, const std::string& name, const std::string& detail) {
  std::printf("%s %s %s\n", ok ? "PASS" : "FAIL", name.c_str(), detail.c_str());
  if (!ok) ++g_failures;
}

// GPU y[n, out] = x·Wᵀ (contiguous y), one job.
void gpu_matmul(const TestWeight& W, const float* d_x, int64_t ldx, int64_t n, float* d_y) {
  cuda::MatmulJob j;
  j.w = W.dev;
  j.y = d_y;
  j.ldy = W.out;
  cuda::matmul(d_x, ldx, n, &j, 1, nullptr, g_mode);
  ck(cudaGetLastError(), "matmul");
}

// All n of one format and shape: accuracy vs CPU, plus bitwise invariance against single-row launches.
void test_shape(ThreadPool& pool, const Format& f, int64_t out, int64_t in, const std::vector<int>& ns,
                std::mt19937& rng) {
  const int64_t nmax = ns.back();
  TestWeight W = make_weight(f, out, in, rng);
  const std::vector<float> x = random_vec(size_t(nmax * in), rng);
  const std::vector<double> scale = abs_scale(W, x.data(), in, nmax);
  DevBuf d_x(x.data(), x.size() * 4), d_y(size_t(nmax * out) * 4), d_y1(size_t(out) * 4);
  std::vector<float> cpu(size_t(nmax * out));
  for (int n : ns) {
    matmul(pool, W.host, x.data(), cpu.data(), n, Precision::Exact);
    ck(cudaMemset(d_y.p, 0xFF, d_y.bytes), "memset");  // NaN: an unwritten element fails
    gpu_matmul(W, d_x.f(), in, n, d_y.f());
    const std::vector<float> gpu = download(d_y, size_t(n * out));
    Err e;
    for (size_t i = 0; i < gpu.size(); ++i) e.add(gpu[i], cpu[i], scale[i]);
    // Batch invariance: each row alone must give the bitwise same result.
    int bad_rows = 0;
    if (n > 1) {
      for (int r = 0; r < n; ++r) {
        gpu_matmul(W, d_x.f() + int64_t(r) * in, in, 1, d_y1.f());
        const std::vector<float> one = download(d_y1, size_t(out));
        if (std::memcmp(one.data(), gpu.data() + size_t(r * out), size_t(out) * 4) != 0) ++bad_rows;
      }
    }
    char buf[256];
    std::snprintf(buf, sizeof buf, "max_abs=%.3g max_rel=%.3g invariance_bad_rows=%d", e.max_abs, e.max_rel,
                  bad_rows);
    report(e.ok() && bad_rows == 0,
           mode_prefix() + "matmul " + f.name() + " [" + std::to_string(out) + "x" + std::to_string(in) + "] n=" + std::to_string(n),
           buf);
  }
}

// Fused launch: jobs sharing x with strided x/y, bias and accumulate, one of another format (split launch).
void test_fused(ThreadPool& pool, const Format& f, std::mt19937& rng) {
  const int64_t in = 256, ldx = in + 8;
  const int64_t outs[4] = {200, 64, 64, 96};
  std::vector<TestWeight> Ws;
  for (int j = 0; j < 4; ++j) {
    const Format fj = j == 3 ? Format{WeightKind::Dense, 0, 0, DType::BF16} : f;  // job 3: another format
    Ws.push_back(make_weight(fj, outs[j], in, rng));
  }
  for (int n : {1, 5, 8, 19}) {
    const std::vector<float> x = random_vec(size_t(n * ldx), rng);
    DevBuf d_x(x.data(), x.size() * 4);
    cuda::MatmulJob jobs[4];
    std::vector<DevBuf> d_y, d_b;
    std::vector<std::vector<float>> y0(4), bias(4);
    std::vector<int64_t> ldy(4);
    for (int j = 0; j < 4; ++j) {
      ldy[size_t(j)] = outs[j] + 3 * j;
      y0[size_t(j)] = random_vec(size_t(n * ldy[size_t(j)]), rng);
      bias[size_t(j)] = random_vec(size_t(outs[j]), rng, 0.5f);
      d_y.emplace_back(y0[size_t(j)].data(), y0[size_t(j)].size() * 4);
      d_b.emplace_back(bias[size_t(j)].data(), bias[size_t(j)].size() * 4);
      jobs[j].w = Ws[size_t(j)].dev;
      jobs[j].bias = j % 2 == 0 ? d_b.back().f() : nullptr;
      jobs[j].y = d_y.back().f();
      jobs[j].ldy = ldy[size_t(j)];
      jobs[j].accumulate = j >= 2;
    }
    cuda::matmul(d_x.f(), ldx, n, jobs, 4, nullptr, g_mode);
    ck(cudaDeviceSynchronize(), "fused");
    for (int j = 0; j < 4; ++j) {
      const TestWeight& W = Ws[size_t(j)];
      std::vector<float> cpu(size_t(n * W.out));
      matmul_strided(pool, W.host, x.data(), ldx, cpu.data(), W.out, n, Precision::Exact);
      const std::vector<double> scale = abs_scale(W, x.data(), ldx, n);
      const std::vector<float> gpu = download(d_y[size_t(j)], size_t(n * ldy[size_t(j)]));
      Err e;
      for (int r = 0; r < n; ++r)
        for (int64_t o = 0; o < ldy[size_t(j)]; ++o) {
          const size_t i = size_t(r * ldy[size_t(j)] + o);
          if (o >= W.out) {  // padding between rows must be untouched
            e.add(gpu[i], y0[size_t(j)][i], 1.0);
            continue;
          }
          float want = cpu[size_t(r * W.out + o)];
          if (jobs[j].bias) want = want + bias[size_t(j)][size_t(o)];
          if (jobs[j].accumulate) want = y0[size_t(j)][i] + want;
          const double sc = scale[size_t(r * W.out + o)] + std::fabs(double(y0[size_t(j)][i])) +
                            (jobs[j].bias ? std::fabs(double(bias[size_t(j)][size_t(o)])) : 0.0);
          e.add(gpu[i], want, sc);
        }
      char buf[256];
      std::snprintf(buf, sizeof buf, "max_abs=%.3g max_rel=%.3g", e.max_abs, e.max_rel);
      report(e.ok(),
             mode_prefix() + "fused " + W.fmt.name() + " job" + std::to_string(j) + (jobs[j].bias ? "+bias" : "") +
                 (jobs[j].accumulate ? "+acc" : "") + " n=" + std::to_string(n),
             buf);
    }
  }
}

// fu == nullptr: gate and up share format f and run fused (matmul_glu); else up is stored as *fu and the
// decoder's fallback runs: one matmul launch with two jobs, then cuda::glu.
void test_glu(ThreadPool& pool, const Format& f, int64_t ffn, int64_t in, std::mt19937& rng, const Format* fu = nullptr) {
  TestWeight G = make_weight(f, ffn, in, rng), U = make_weight(fu ? *fu : f, ffn, in, rng);
  DevBuf d_u(size_t(64 * ffn) * 4);  // up scratch of the fallback, [n <= 64, ffn]
  auto run = [&](const float* d_x, int64_t n, float* d_out, int act) {
    if (!fu) return cuda::matmul_glu(d_x, n, G.dev, U.dev, act, d_out, nullptr, g_mode);
    cuda::MatmulJob jobs[2];
    jobs[0].w = G.dev;
    jobs[0].y = d_out;
    jobs[0].ldy = ffn;
    jobs[1].w = U.dev;
    jobs[1].y = d_u.f();
    jobs[1].ldy = ffn;
    cuda::matmul(d_x, in, n, jobs, 2, nullptr, g_mode);
    cuda::glu(d_out, d_u.f(), n * ffn, act, nullptr);
  };
  for (int act = 0; act < 2; ++act)
    for (int n : {1, 3, 8, 13, 64}) {
      const std::vector<float> x = random_vec(size_t(n * in), rng);
      DevBuf d_x(x.data(), x.size() * 4), d_out(size_t(n * ffn) * 4), d_o1(size_t(ffn) * 4);
      ck(cudaMemset(d_out.p, 0xFF, d_out.bytes), "memset");
      run(d_x.f(), n, d_out.f(), act);
      const std::vector<float> gpu = download(d_out, size_t(n * ffn));
      std::vector<float> g(size_t(n * ffn)), u(size_t(n * ffn));
      matmul(pool, G.host, x.data(), g.data(), n, Precision::Exact);
      matmul(pool, U.host, x.data(), u.data(), n, Precision::Exact);
      const std::vector<double> sg = abs_scale(G, x.data(), in, n), su = abs_scale(U, x.data(), in, n);
      std::vector<float> want = g;
      glu_inplace(want.data(), u.data(), int64_t(want.size()), act == 0 ? Activation::Silu : Activation::GeluTanh);
      Err e;
      for (size_t i = 0; i < want.size(); ++i) {
        // First-order propagation: |act'| <= 1.2 for silu and gelu_tanh, plus ulps of exp/tanh.
        const double a = act == 0 ? silu(g[i]) : gelu_tanh(g[i]);
        const double sc = 1.2 * std::fabs(double(u[i])) * sg[i] + std::fabs(a) * su[i] + 1e-1 * std::fabs(double(want[i]));
        e.add(gpu[i], want[i], sc);
      }
      int bad_rows = 0;
      for (int r = 0; n > 1 && r < n; ++r) {
        run(d_x.f() + int64_t(r) * in, 1, d_o1.f(), act);
        const std::vector<float> one = download(d_o1, size_t(ffn));
        if (std::memcmp(one.data(), gpu.data() + size_t(r * ffn), size_t(ffn) * 4) != 0) ++bad_rows;
      }
      char buf[256];
      std::snprintf(buf, sizeof buf, "max_abs=%.3g max_rel=%.3g invariance_bad_rows=%d", e.max_abs, e.max_rel,
                    bad_rows);
      report(e.ok() && bad_rows == 0,
             mode_prefix() + "glu " + (act == 0 ? "silu " : "gelu_tanh ") + f.name() + (fu ? " + up " + fu->name() : "") +
                 " [" + std::to_string(ffn) + "x" +
                 std::to_string(in) + "] n=" + std::to_string(n),
             buf);
    }
}

// Fast launches with the input RMSNorm fused (in the gemv kernel for n = 1, in the activation prepare pass
// above): bitwise equal to rms_norm followed by the plain launch, for matmul (q/k/v-like jobs with bias) and GLU;
// and refused where it cannot fuse (Exact).
void test_fused_norm(std::mt19937& rng) {
  const Format f{WeightKind::Affine, 4, 64, DType::BF16};
  const int64_t in = 896;
  TestWeight Q = make_weight(f, 896, in, rng), K = make_weight(f, 128, in, rng), V = make_weight(f, 128, in, rng);
  TestWeight G = make_weight(f, 1000, in, rng), U = make_weight(f, 1000, in, rng);
  const std::vector<float> nw = random_vec(size_t(in), rng, 0.5f), bq = random_vec(896, rng, 0.5f);
  DevBuf d_nw(nw.data(), nw.size() * 4), d_bq(bq.data(), bq.size() * 4);
  const float eps = 1e-6f;
  for (int n : {1, 3, 8, 9, 40, 70}) {
    const std::vector<float> x = random_vec(size_t(n * in), rng, 3.0f);
    DevBuf d_x(x.data(), x.size() * 4), d_xn(x.size() * 4);
    DevBuf y1(size_t(n) * 1152 * 4), y2(size_t(n) * 1152 * 4), g1(size_t(n * 1000) * 4), g2(size_t(n * 1000) * 4);
    auto jobs = [&](float* y) {
      std::vector<cuda::MatmulJob> j(3);
      const TestWeight* ws[3] = {&Q, &K, &V};
      int64_t off = 0;
      for (int i = 0; i < 3; ++i) {
        j[size_t(i)].w = ws[i]->dev;
        j[size_t(i)].y = y + off;
        j[size_t(i)].ldy = 1152;
        j[size_t(i)].bias = i == 0 ? d_bq.f() : nullptr;
        off += ws[i]->out;
      }
      return j;
    };
    const auto ja = jobs(y1.f()), jb = jobs(y2.f());
    const cuda::RowNorm norm{d_nw.f(), eps};
    const bool can = cuda::can_fuse_norm(ja.data(), 3, n, cuda::MathMode::Fast);
    cuda::rms_norm(d_x.f(), d_xn.f(), n, in, d_nw.f(), eps, nullptr);
    cuda::matmul(d_xn.f(), in, n, ja.data(), 3, nullptr, cuda::MathMode::Fast);
    cuda::matmul(d_x.f(), in, n, jb.data(), 3, nullptr, cuda::MathMode::Fast, &norm);
    cuda::matmul_glu(d_xn.f(), n, G.dev, U.dev, 0, g1.f(), nullptr, cuda::MathMode::Fast);
    cuda::matmul_glu(d_x.f(), n, G.dev, U.dev, 0, g2.f(), nullptr, cuda::MathMode::Fast, &norm);
    ck(cudaDeviceSynchronize(), "fused norm");
    const auto a = download(y1, size_t(n) * 1152), b = download(y2, size_t(n) * 1152);
    const auto ga = download(g1, size_t(n * 1000)), gb = download(g2, size_t(n * 1000));
    const bool same = std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
    const bool gsame = std::memcmp(ga.data(), gb.data(), ga.size() * 4) == 0;
    report(can && same, "fast matmul + fused norm n=" + std::to_string(n), same ? "bitwise equal to rms_norm + matmul" : "differs");
    report(gsame, "fast glu + fused norm n=" + std::to_string(n), gsame ? "bitwise equal to rms_norm + glu" : "differs");
  }
  // Exact: not fusable, and a norm passed anyway is refused.
  const cuda::MatmulJob one{Q.dev, nullptr, nullptr, 896, false};
  bool refused = false;
  DevBuf d_x(size_t(9 * in) * 4), d_y(size_t(9 * 896) * 4);
  cuda::MatmulJob j = one;
  j.y = d_y.f();
  const cuda::RowNorm norm{d_nw.f(), eps};
  try {
    cuda::matmul(d_x.f(), in, 9, &j, 1, nullptr, cuda::MathMode::Exact, &norm);
  } catch (const std::exception&) {
    refused = true;
  }
  const bool rules = !cuda::can_fuse_norm(&one, 1, 1, cuda::MathMode::Exact) && cuda::can_fuse_norm(&one, 1, 8, cuda::MathMode::Fast) &&
                     cuda::can_fuse_norm(&one, 1, 300, cuda::MathMode::Fast);
  report(refused && rules, "fused norm rules", refused && rules ? "Exact refused, Fast allowed at any n" : "wrong rule");
}

// Codes of W's shape (W's own, or a reordering of them) in the tiled layout, uploaded into `keep`: the device address.
void* upload_tiled(const uint8_t* codes, const TestWeight& W, std::vector<DevBuf>& keep) {
  std::vector<uint32_t> t(cuda::tiled_words(W.out, W.in, W.fmt.bits));
  cuda::tile_codes(reinterpret_cast<const uint32_t*>(codes), W.out, W.in, W.fmt.bits, W.fmt.group, t.data());
  keep.emplace_back(t.data(), t.size() * 4);
  return keep.back().p;
}

// Scales and biases of W's shape (W's own, or a reordering) in the tiled layout, uploaded into `keep`.
void* upload_tiled_scales(const uint8_t* sc, const uint8_t* bi, const TestWeight& W, std::vector<DevBuf>& keep) {
  const int esz = int(dtype_size(W.fmt.dtype));
  const int64_t ng = W.in / W.fmt.group;
  std::vector<uint8_t> t(cuda::tiled_scale_bytes(W.out, ng, esz));
  cuda::tile_scales(sc, bi, W.out, ng, esz, t.data());
  keep.emplace_back(t.data(), t.size());
  return keep.back().p;
}

// W on the device in the tiled layout (codes, and scales with biases: what the decoder uploads for Fast).
cuda::DevWeight tiled_copy(const TestWeight& W, std::vector<DevBuf>& keep) {
  cuda::DevWeight d = W.dev;
  d.data = upload_tiled(W.data.data(), W, keep);
  d.scales = d.biases = upload_tiled_scales(W.scales.data(), W.biases.data(), W, keep);
  d.tiled = true;
  return d;
}

// The tiled code layout (what the decoder uploads for Fast): bitwise the same outputs as row-major codes, for one
// weight, a fused multi-job launch, GLU and GLU with a fused norm, at n = 1 (gemv) and more (prepare + direct), with a
// partial last tile; and refused by the Exact path.
void test_tiled(std::mt19937& rng) {
  for (const Format& f : {Format{WeightKind::Affine, 4, 64, DType::BF16}, Format{WeightKind::Affine, 4, 32, DType::F16},
                          Format{WeightKind::Affine, 8, 64, DType::BF16}, Format{WeightKind::Affine, 4, 128, DType::F32},
                          Format{WeightKind::Affine, 8, 128, DType::F16}}) {
    const int64_t in = 512;
    TestWeight A = make_weight(f, 200, in, rng), B = make_weight(f, 72, in, rng), G = make_weight(f, 333, in, rng),
               U = make_weight(f, 333, in, rng);
    std::vector<DevBuf> keep;
    const cuda::DevWeight At = tiled_copy(A, keep), Bt = tiled_copy(B, keep), Gt = tiled_copy(G, keep), Ut = tiled_copy(U, keep);
    const std::vector<float> nw = random_vec(size_t(in), rng, 0.5f);
    DevBuf d_nw(nw.data(), nw.size() * 4);
    const cuda::RowNorm norm{d_nw.f(), 1e-6f};
    bool all = true;
    std::string where;
    for (int n : {1, 3, 8, 33}) {
      const std::vector<float> x = random_vec(size_t(n * in), rng);
      DevBuf d_x(x.data(), x.size() * 4);
      DevBuf y[2] = {DevBuf(size_t(n * 272) * 4), DevBuf(size_t(n * 272) * 4)};
      DevBuf g[2] = {DevBuf(size_t(n * 333) * 4), DevBuf(size_t(n * 333) * 4)};
      DevBuf h[2] = {DevBuf(size_t(n * 333) * 4), DevBuf(size_t(n * 333) * 4)};
      for (int v = 0; v < 2; ++v) {
        const cuda::MatmulJob jobs[2] = {{v ? At : A.dev, nullptr, y[v].f(), 272, false}, {v ? Bt : B.dev, nullptr, y[v].f() + 200, 272, false}};
        cuda::matmul(d_x.f(), in, n, jobs, 2, nullptr, cuda::MathMode::Fast);
        cuda::matmul_glu(d_x.f(), n, v ? Gt : G.dev, v ? Ut : U.dev, 0, g[v].f(), nullptr, cuda::MathMode::Fast);
        cuda::matmul_glu(d_x.f(), n, v ? Gt : G.dev, v ? Ut : U.dev, 1, h[v].f(), nullptr, cuda::MathMode::Fast, &norm);
      }
      ck(cudaDeviceSynchronize(), "tiled");
      const bool ys = same_bits(y[0], y[1], size_t(n * 272)), gs = same_bits(g[0], g[1], size_t(n * 333)),
                 hs = same_bits(h[0], h[1], size_t(n * 333));
      if (!(ys && gs && hs)) {
        all = false;
        where += " n=" + std::to_string(n) + (ys ? "" : " matmul") + (gs ? "" : " glu") + (hs ? "" : " glu+norm");
      }
    }
    report(all, "fast tiled codes " + f.name(), all ? "bitwise equal to row-major at n 1, 3, 8, 33" : "differs:" + where);
  }
  // Exact reads row-major codes only: a tiled weight is refused, not misread.
  const Format f{WeightKind::Affine, 4, 64, DType::BF16};
  TestWeight W = make_weight(f, 64, 256, rng);
  std::vector<DevBuf> keep;
  const cuda::DevWeight Wt = tiled_copy(W, keep);
  DevBuf d_x(size_t(256) * 4), d_y(size_t(64) * 4);
  const cuda::MatmulJob j{Wt, nullptr, d_y.f(), 64, false};
  bool refused = false;
  try {
    cuda::matmul(d_x.f(), 256, 1, &j, 1, nullptr, cuda::MathMode::Exact);
  } catch (const std::exception&) {
    refused = true;
  }
  report(refused, "exact refuses tiled codes", refused ? "refused" : "ran");
}

// The cluster kernel (n > 1, tiled weights, sm_90: a block's warps share their token tile's activations, streamed into
// shared memory in batches; the K parts of a cluster of blocks added through distributed shared memory): bitwise the
// row-major direct kernel's outputs, for a fused two-job launch with bias and accumulate (the 72-row job leaves most of
// its 128-row block without rows), GLU and GLU with a fused norm, a K whose parts take several batches, a launch of
// one K part (no cluster reduction), and n across every token tiling (1, 2, 4 and 8 subtiles, partial last tiles); on
// a created stream (PDL and clusters together, as in the decoder), each launch twice back to back.
void test_cluster(std::mt19937& rng) {
  cudaStream_t s = nullptr;
  ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  for (const Format& f : {Format{WeightKind::Affine, 4, 64, DType::BF16}, Format{WeightKind::Affine, 4, 32, DType::F16},
                          Format{WeightKind::Affine, 8, 128, DType::F32}}) {
    bool all = true;
    std::string where;
    for (const int64_t in : {int64_t(512), int64_t(6144)}) {
      TestWeight A = make_weight(f, 200, in, rng), B = make_weight(f, 72, in, rng), G = make_weight(f, 333, in, rng),
                 U = make_weight(f, 333, in, rng);
      std::vector<DevBuf> keep;
      const cuda::DevWeight At = tiled_copy(A, keep), Bt = tiled_copy(B, keep), Gt = tiled_copy(G, keep),
                            Ut = tiled_copy(U, keep);
      const std::vector<float> bias = random_vec(200, rng), nw = random_vec(size_t(in), rng, 0.5f);
      DevBuf d_bias(bias.data(), bias.size() * 4), d_nw(nw.data(), nw.size() * 4);
      const cuda::RowNorm norm{d_nw.f(), 1e-6f};
      for (int n : {2, 9, 17, 40, 64, 65, 130}) {
        cuda::matmul_reserve(s, n, in);
        const std::vector<float> x = random_vec(size_t(n * in), rng), y0 = random_vec(size_t(n * 272), rng);
        DevBuf d_x(x.data(), x.size() * 4);
        DevBuf y[2] = {DevBuf(y0.data(), y0.size() * 4), DevBuf(y0.data(), y0.size() * 4)};
        DevBuf g[2] = {DevBuf(size_t(n * 333) * 4), DevBuf(size_t(n * 333) * 4)};
        DevBuf h[2] = {DevBuf(size_t(n * 333) * 4), DevBuf(size_t(n * 333) * 4)};
        for (int v = 0; v < 2; ++v) {
          const cuda::MatmulJob jobs[2] = {{v ? At : A.dev, d_bias.f(), y[v].f(), 272, false},
                                           {v ? Bt : B.dev, nullptr, y[v].f() + 200, 272, true}};
          for (int rep = 0; rep < 2; ++rep) {
            cuda::matmul(d_x.f(), in, n, jobs, 2, s, cuda::MathMode::Fast);
            cuda::matmul_glu(d_x.f(), n, v ? Gt : G.dev, v ? Ut : U.dev, 0, g[v].f(), s, cuda::MathMode::Fast);
            cuda::matmul_glu(d_x.f(), n, v ? Gt : G.dev, v ? Ut : U.dev, 1, h[v].f(), s, cuda::MathMode::Fast, &norm);
          }
        }
        ck(cudaStreamSynchronize(s), "cluster");
        const bool ys = same_bits(y[0], y[1], size_t(n * 272)), gs = same_bits(g[0], g[1], size_t(n * 333)),
                   hs = same_bits(h[0], h[1], size_t(n * 333));
        if (!(ys && gs && hs)) {
          all = false;
          where += " in=" + std::to_string(in) + " n=" + std::to_string(n) + (ys ? "" : " matmul") + (gs ? "" : " glu") +
                   (hs ? "" : " glu+norm");
        }
      }
    }
    // 2048 16-row tiles take one K part: each block writes its outputs itself.
    {
      const int64_t out = 32768, in = 256;
      TestWeight W = make_weight(f, out, in, rng);
      std::vector<DevBuf> keep;
      const cuda::DevWeight Wt = tiled_copy(W, keep);
      for (int n : {3, 64}) {
        cuda::matmul_reserve(s, n, in);
        const std::vector<float> x = random_vec(size_t(n * in), rng);
        DevBuf d_x(x.data(), x.size() * 4);
        DevBuf y[2] = {DevBuf(size_t(n * out) * 4), DevBuf(size_t(n * out) * 4)};
        for (int v = 0; v < 2; ++v) {
          const cuda::MatmulJob j{v ? Wt : W.dev, nullptr, y[v].f(), out, false};
          cuda::matmul(d_x.f(), in, n, &j, 1, s, cuda::MathMode::Fast);
        }
        ck(cudaStreamSynchronize(s), "cluster ks 1");
        if (!same_bits(y[0], y[1], size_t(n * out))) {
          all = false;
          where += " one part n=" + std::to_string(n);
        }
      }
    }
    report(all, "fast cluster n>1 " + f.name(), all ? "bitwise equal to the row-major direct kernel" : "differs:" + where);
  }
  cuda::matmul_release(s);
  ck(cudaStreamDestroy(s), "stream destroy");
}

// The bulk kernel (n = 1, tiled weights, sm_90: codes and scales through bulk copies into shared memory): bitwise the
// row-major gemv kernel's outputs, for a fused multi-job launch with bias and accumulate, GLU and GLU with a fused
// norm, with K long enough that each warp's ring of chunks wraps several times; on a created stream (PDL on where the
// device has it), launched twice back to back so one launch's copies overlap the previous one. B's 3 tiles leave a
// block's second tile without rows under a 2-tile split (RAPID_CUDA_MM_WARPS=40). The bulk launch's
// accumulating job is settled (y_settled: the GLU launches between its two runs write other buffers), so the second
// run reads y before waiting.
void test_bulk(std::mt19937& rng) {
  cudaStream_t s = nullptr;
  ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  for (const Format& f : {Format{WeightKind::Affine, 4, 64, DType::BF16}, Format{WeightKind::Affine, 4, 32, DType::F16},
                          Format{WeightKind::Affine, 8, 64, DType::BF16}, Format{WeightKind::Affine, 4, 128, DType::F32},
                          Format{WeightKind::Affine, 8, 128, DType::F16}}) {
    bool all = true;
    std::string where;
    for (const int64_t in : {int64_t(512), int64_t(11008)}) {
      TestWeight A = make_weight(f, 256, in, rng), B = make_weight(f, 48, in, rng), G = make_weight(f, 320, in, rng),
                 U = make_weight(f, 320, in, rng);
      std::vector<DevBuf> keep;
      const cuda::DevWeight At = tiled_copy(A, keep), Bt = tiled_copy(B, keep), Gt = tiled_copy(G, keep),
                            Ut = tiled_copy(U, keep);
      const std::vector<float> nw = random_vec(size_t(in), rng, 0.5f), bias = random_vec(256, rng),
                               x = random_vec(size_t(in), rng), y0 = random_vec(304, rng);
      DevBuf d_nw(nw.data(), nw.size() * 4), d_b(bias.data(), bias.size() * 4), d_x(x.data(), x.size() * 4);
      const cuda::RowNorm norm{d_nw.f(), 1e-6f};
      DevBuf y[2] = {DevBuf(y0.data(), 304 * 4), DevBuf(y0.data(), 304 * 4)};
      DevBuf g[2] = {DevBuf(320 * 4), DevBuf(320 * 4)}, h[2] = {DevBuf(320 * 4), DevBuf(320 * 4)};
      for (int v = 0; v < 2; ++v)
        for (int rep = 0; rep < 2; ++rep) {  // accumulate: the second launch adds onto the first
          const cuda::MatmulJob jobs[2] = {{v ? At : A.dev, d_b.f(), y[v].f(), 304, false},
                                           {v ? Bt : B.dev, nullptr, y[v].f() + 256, 304, true, 0, v == 1}};
          cuda::matmul(d_x.f(), in, 1, jobs, 2, s, cuda::MathMode::Fast);
          cuda::matmul_glu(d_x.f(), 1, v ? Gt : G.dev, v ? Ut : U.dev, 0, g[v].f(), s, cuda::MathMode::Fast);
          cuda::matmul_glu(d_x.f(), 1, v ? Gt : G.dev, v ? Ut : U.dev, 1, h[v].f(), s, cuda::MathMode::Fast, &norm);
        }
      ck(cudaStreamSynchronize(s), "bulk");
      const bool ys = same_bits(y[0], y[1], 304), gs = same_bits(g[0], g[1], 320), hs = same_bits(h[0], h[1], 320);
      if (!(ys && gs && hs)) {
        all = false;
        where += " in=" + std::to_string(in) + (ys ? "" : " matmul") + (gs ? "" : " glu") + (hs ? "" : " glu+norm");
      }
    }
    report(all, "fast bulk n=1 " + f.name(), all ? "bitwise equal to the row-major gemv kernel (in 512, 11008)" : "differs:" + where);
  }
  // A GLU of more 8-warp blocks than an H200 has multiprocessors (689 tiles at a K split of 2: 173), so the bulk
  // launch takes blocks of 4 warps (RAPID_CUDA_MM_GLU_WARPS, default 4), its last block with a tile without rows.
  {
    const Format f{WeightKind::Affine, 4, 64, DType::BF16};
    const int64_t in = 2048, ffn = 689 * 16;
    TestWeight G = make_weight(f, ffn, in, rng), U = make_weight(f, ffn, in, rng);
    std::vector<DevBuf> keep;
    const cuda::DevWeight Gt = tiled_copy(G, keep), Ut = tiled_copy(U, keep);
    const std::vector<float> nw = random_vec(size_t(in), rng, 0.5f), x = random_vec(size_t(in), rng);
    DevBuf d_nw(nw.data(), nw.size() * 4), d_x(x.data(), x.size() * 4);
    const cuda::RowNorm norm{d_nw.f(), 1e-6f};
    DevBuf g[2] = {DevBuf(size_t(ffn) * 4), DevBuf(size_t(ffn) * 4)}, h[2] = {DevBuf(size_t(ffn) * 4), DevBuf(size_t(ffn) * 4)};
    for (int v = 0; v < 2; ++v) {
      cuda::matmul_glu(d_x.f(), 1, v ? Gt : G.dev, v ? Ut : U.dev, 0, g[v].f(), s, cuda::MathMode::Fast);
      cuda::matmul_glu(d_x.f(), 1, v ? Gt : G.dev, v ? Ut : U.dev, 1, h[v].f(), s, cuda::MathMode::Fast, &norm);
    }
    ck(cudaStreamSynchronize(s), "bulk glu");
    const bool gs = same_bits(g[0], g[1], ffn), hs = same_bits(h[0], h[1], ffn);
    report(gs && hs, "fast bulk n=1 glu " + std::to_string(ffn) + "x" + std::to_string(in) + " " + f.name(),
           gs && hs ? "bitwise equal to the row-major gemv kernel" : std::string("differs:") + (gs ? "" : " glu") + (hs ? "" : " glu+norm"));
  }
  ck(cudaStreamDestroy(s), "stream");
}

// A one-row matmul whose x is the merge of a token's attention partials (AttnPartials: the o projection at batch 1)
// gives the outputs of the matmul of attention_merge's x (the attention's own merge), bit for bit: the bulk kernel
// merging while it stages x (tiled weights) and the gemv kernel after attention_merge (row-major), groups of 64 / 32 /
// 128, heads of 64 and 128, and 1 (x read as it is), 2, 5, 8, 9 and 32 partitions (past the 8 read together); x of a
// split token is poisoned, so only the merge can give it.
void test_partials(std::mt19937& rng) {
  cudaStream_t s = nullptr;
  ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  std::uniform_real_distribution<float> um(-3.0f, 3.0f), ul(0.5f, 5.0f);
  for (const Format& f : {Format{WeightKind::Affine, 4, 64, DType::BF16}, Format{WeightKind::Affine, 4, 32, DType::F16},
                          Format{WeightKind::Affine, 8, 128, DType::F32}}) {
    bool all = true;
    std::string where;
    for (const auto& [n_heads, hd] : {std::pair<int, int>{4, 64}, {16, 128}}) {
      const int64_t in = int64_t(n_heads) * hd, out = 320;
      TestWeight W = make_weight(f, out, in, rng);
      std::vector<DevBuf> keep;
      const cuda::DevWeight Wt = tiled_copy(W, keep);
      const std::vector<float> o = random_vec(size_t(n_heads) * 32 * hd, rng), bias = random_vec(size_t(out), rng);
      std::vector<float> ml(size_t(n_heads) * 32 * 2);
      for (size_t i = 0; i < ml.size(); i += 2) ml[i] = um(rng), ml[i + 1] = ul(rng);
      DevBuf d_o(o.data(), o.size() * 4), d_ml(ml.data(), ml.size() * 4), d_b(bias.data(), bias.size() * 4);
      for (const int parts : {1, 2, 5, 8, 9, 32}) {
        const int32_t nkeys = parts == 1 ? 20 : 32 * parts - 5, q_pos = nkeys - 1;  // 32-key partitions
        DevBuf d_pos(&q_pos, 4), d_end(&nkeys, 4);
        const cuda::AttnPartials ap{d_o.f(), d_ml.f(), static_cast<const int32_t*>(d_pos.p),
                                    static_cast<const int32_t*>(d_end.p), 32, 0, n_heads, hd};
        const std::vector<float> x0 = random_vec(size_t(in), rng);
        DevBuf x_ref(x0.data(), x0.size() * 4), x_split(size_t(in) * 4);
        cuda::attention_merge(ap, x_ref.f(), s);  // a split token's x; one partition: x as the attention wrote it
        if (parts == 1) ck(cudaMemcpyAsync(x_split.p, x_ref.p, size_t(in) * 4, cudaMemcpyDeviceToDevice, s), "copy x");
        else ck(cudaMemsetAsync(x_split.p, 0xff, size_t(in) * 4, s), "poison x");
        for (int tiled = 0; tiled < 2; ++tiled) {
          DevBuf y[2] = {DevBuf(size_t(out) * 4), DevBuf(size_t(out) * 4)};
          for (int v = 0; v < 2; ++v) {
            const cuda::MatmulJob j{tiled ? Wt : W.dev, d_b.f(), y[v].f(), out, false};
            cuda::matmul(v ? x_split.f() : x_ref.f(), in, 1, &j, 1, s, cuda::MathMode::Fast, nullptr, nullptr,
                         v ? &ap : nullptr);
          }
          ck(cudaStreamSynchronize(s), "partials");
          if (!same_bits(y[0], y[1], size_t(out))) {
            all = false;
            where += ' ';
            where += std::to_string(n_heads);
            where += 'x';
            where += std::to_string(hd);
            where += " parts=";
            where += std::to_string(parts);
            where += tiled ? " bulk" : " gemv";
          }
        }
      }
    }
    report(all, "fast matmul of attention partials " + f.name(),
           all ? "bitwise the matmul of attention_merge's x (bulk and gemv kernels)" : "differs:" + where);
  }
  ck(cudaStreamDestroy(s), "stream");
}

// The RoPE epilogue (q/k rows in rope_pair_rows order; q rotated into q, k rotated and v as is into the KV pool at
// each token's slot) stores bitwise what matmul + rope_kv_write store, with and without a fused input norm, for the
// gemv (n = 1) and the prepared (n > 1) kernels, row-major and tiled codes, into f32, f16 and bf16 pools (int8 pools
// are written by rope_kv_write only); a slot of -1 stores nothing.
void test_rope_epilogue(std::mt19937& rng) {
  const int nh = 4, nkv = 2, hd = 64, half = hd / 2;
  const int64_t in = 256, qd = nh * hd, kd = nkv * hd, slots = 64;
  const auto permuted = [](const TestWeight& W, const std::vector<int64_t>& perm, bool tiled, std::vector<DevBuf>& keep) {
    const size_t cr = W.data.size() / size_t(W.out), sr = W.scales.size() / size_t(W.out);
    std::vector<uint8_t> c(W.data.size()), sc(W.scales.size()), bi(W.biases.size());
    for (size_t p = 0; p < perm.size(); ++p) {
      std::memcpy(c.data() + p * cr, W.data.data() + size_t(perm[p]) * cr, cr);
      std::memcpy(sc.data() + p * sr, W.scales.data() + size_t(perm[p]) * sr, sr);
      std::memcpy(bi.data() + p * sr, W.biases.data() + size_t(perm[p]) * sr, sr);
    }
    cuda::DevWeight d = W.dev;
    if (tiled) {
      d.data = upload_tiled(c.data(), W, keep);
      d.scales = d.biases = upload_tiled_scales(sc.data(), bi.data(), W, keep);
    } else {
      keep.emplace_back(c.data(), c.size());
      d.data = keep.back().p;
      keep.emplace_back(sc.data(), sc.size());
      d.scales = keep.back().p;
      keep.emplace_back(bi.data(), bi.size());
      d.biases = keep.back().p;
    }
    d.tiled = tiled;
    d.rope_rows = hd;
    return d;
  };
  const std::vector<int64_t> pq = cuda::rope_pair_rows(qd, hd), pk = cuda::rope_pair_rows(kd, hd);
  for (const Format& f : {Format{WeightKind::Affine, 4, 64, DType::BF16}, Format{WeightKind::Affine, 8, 32, DType::F16}}) {
    TestWeight Q = make_weight(f, qd, in, rng), K = make_weight(f, kd, in, rng), V = make_weight(f, kd, in, rng);
    const std::vector<float> bq = random_vec(size_t(qd), rng, 0.1f), bk = random_vec(size_t(kd), rng, 0.1f),
                             bv = random_vec(size_t(kd), rng, 0.1f), nw = random_vec(size_t(in), rng, 0.5f);
    std::vector<float> bqp(bq.size()), bkp(bk.size());
    for (size_t p = 0; p < pq.size(); ++p) bqp[p] = bq[size_t(pq[p])];
    for (size_t p = 0; p < pk.size(); ++p) bkp[p] = bk[size_t(pk[p])];
    DevBuf d_bq(bq.data(), bq.size() * 4), d_bk(bk.data(), bk.size() * 4), d_bv(bv.data(), bv.size() * 4);
    DevBuf d_bqp(bqp.data(), bqp.size() * 4), d_bkp(bkp.data(), bkp.size() * 4), d_nw(nw.data(), nw.size() * 4);
    const cuda::RowNorm norm{d_nw.f(), 1e-6f};
    bool all = true;
    std::string where;
    for (bool tiled : {false, true}) {
      std::vector<DevBuf> keep;
      const cuda::DevWeight Qp = permuted(Q, pq, tiled, keep), Kp = permuted(K, pk, tiled, keep);
      const cuda::DevWeight Qr = tiled ? tiled_copy(Q, keep) : Q.dev, Kr = tiled ? tiled_copy(K, keep) : K.dev,
                            Vr = tiled ? tiled_copy(V, keep) : V.dev;
      for (int n : {1, 3, 33}) {
        for (const auto& [with_norm, kt] : {std::pair{false, KvDtype::F32}, std::pair{true, KvDtype::F32},
                                            std::pair{false, KvDtype::F16}, std::pair{true, KvDtype::BF16}}) {
          const int64_t pool_words = slots * kd * int64_t(kv_elem_bytes(kt)) / 4;  // a pool's bytes / 4
          const std::vector<float> x = random_vec(size_t(n * in), rng), cs = random_vec(size_t(n * half), rng),
                                   sn = random_vec(size_t(n * half), rng);
          std::vector<int32_t> slot(static_cast<size_t>(n));
          for (int t = 0; t < n; ++t) slot[size_t(t)] = t == 1 ? -1 : int32_t((t * 7 + 5) % slots);
          DevBuf d_x(x.data(), x.size() * 4), d_cs(cs.data(), cs.size() * 4), d_sn(sn.data(), sn.size() * 4);
          DevBuf d_slot(slot.data(), slot.size() * 4);
          DevBuf q[2] = {DevBuf(size_t(n * qd) * 4), DevBuf(size_t(n * qd) * 4)};
          DevBuf k(size_t(n * kd) * 4), v(size_t(n * kd) * 4);
          DevBuf kp[2] = {DevBuf(size_t(pool_words) * 4), DevBuf(size_t(pool_words) * 4)};
          DevBuf vp[2] = {DevBuf(size_t(pool_words) * 4), DevBuf(size_t(pool_words) * 4)};
          for (int i = 0; i < 2; ++i) {
            ck(cudaMemset(kp[i].p, 0, kp[i].bytes), "memset");
            ck(cudaMemset(vp[i].p, 0, vp[i].bytes), "memset");
          }
          const cuda::RowNorm* nm = with_norm ? &norm : nullptr;
          const cuda::MatmulJob plain[3] = {{Qr, d_bq.f(), q[0].f(), qd, false}, {Kr, d_bk.f(), k.f(), kd, false}, {Vr, d_bv.f(), v.f(), kd, false}};
          cuda::matmul(d_x.f(), in, n, plain, 3, nullptr, cuda::MathMode::Fast, nm);
          cuda::KvCache pool0;
          pool0.dtype = kt;
          pool0.k = kp[0].p;
          pool0.v = vp[0].p;
          cuda::rope_kv_write(q[0].f(), k.f(), v.f(), n, nh, nkv, hd, half, d_cs.f(), d_sn.f(), nullptr,
                              static_cast<const int32_t*>(d_slot.p), pool0, nullptr);
          const cuda::MatmulJob fused[3] = {{Qp, d_bqp.f(), q[1].f(), qd, false, 1}, {Kp, d_bkp.f(), kp[1].f(), kd, false, 2},
                                            {Vr, d_bv.f(), vp[1].f(), kd, false, 3}};
          const cuda::RopeOut rope{d_cs.f(), d_sn.f(), static_cast<const int32_t*>(d_slot.p), hd, kt};
          cuda::matmul(d_x.f(), in, n, fused, 3, nullptr, cuda::MathMode::Fast, nm, &rope);
          ck(cudaDeviceSynchronize(), "rope epilogue");
          const bool qs = same_bits(q[0], q[1], size_t(n * qd)), ks = same_bits(kp[0], kp[1], size_t(pool_words)),
                     vs = same_bits(vp[0], vp[1], size_t(pool_words));
          if (!(qs && ks && vs)) {
            all = false;
            where += std::string(tiled ? " tiled" : " row-major") + " n=" + std::to_string(n) + (with_norm ? "+norm" : "") +
                     " kv " + kv_dtype_name(kt) + (qs ? "" : " q") + (ks ? "" : " k") + (vs ? "" : " v");
          }
        }
      }
    }
    report(all, "fast rope epilogue " + f.name(), all ? "bitwise equal to matmul + rope_kv_write (n 1, 3, 33; norm; tiled; KV f32/f16/bf16)" : "differs:" + where);
  }
}

// Decode bandwidth: cycles through enough weight copies that the set exceeds L2 (H200: 50 MB).
void bench(const Format& f, int64_t out, int64_t in, std::mt19937& rng) {
  TestWeight W = make_weight(f, out, in, rng, false);
  const size_t wb = W.weight_bytes();
  const int copies = int(std::max<size_t>(2, (size_t(256) << 20) / wb + 1));
  std::vector<DevBuf> bufs;
  std::vector<cuda::DevWeight> devs;
  for (int c = 0; c < copies; ++c) {
    bufs.emplace_back(W.data.data(), W.data.size());
    bufs.emplace_back(W.scales.data(), W.scales.size());
    bufs.emplace_back(W.biases.data(), W.biases.size());
    devs.push_back(cuda::device_view(W.host, bufs[bufs.size() - 3].p, bufs[bufs.size() - 2].p, bufs.back().p));
  }
  for (int n : {1, 8, 64, 256}) {
    const std::vector<float> x = random_vec(size_t(n * in), rng);
    DevBuf d_x(x.data(), x.size() * 4), d_y(size_t(n * out) * 4);
    cuda::MatmulJob j;
    j.y = d_y.f();
    j.ldy = out;
    for (int it = 0; it < copies; ++it) {
      j.w = devs[size_t(it % copies)];
      cuda::matmul(d_x.f(), in, n, &j, 1, nullptr, g_mode);
    }
    cudaEvent_t a, b;
    ck(cudaEventCreate(&a), "event");
    ck(cudaEventCreate(&b), "event");
    const int iters = std::max(copies * 4, 40);
    ck(cudaEventRecord(a), "record");
    for (int it = 0; it < iters; ++it) {
      j.w = devs[size_t(it % copies)];
      cuda::matmul(d_x.f(), in, n, &j, 1, nullptr, g_mode);
    }
    ck(cudaEventRecord(b), "record");
    ck(cudaEventSynchronize(b), "sync");
    float ms = 0;
    ck(cudaEventElapsedTime(&ms, a, b), "elapsed");
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    const double us = 1e3 * ms / iters;
    std::printf("BENCH %s%s [%lldx%lld] n=%d: %.2f us/launch, %.0f GB/s of weights (%d copies, %zu bytes each)\n",
                mode_prefix().c_str(), f.name().c_str(), (long long)out, (long long)in, n, us, double(wb) / (us * 1e3), copies, wb);
  }
}

}  // namespace

int main() {
  try {
    int dev_count = 0;
    ck(cudaGetDeviceCount(&dev_count), "cudaGetDeviceCount");
    cudaDeviceProp prop{};
    ck(cudaGetDeviceProperties(&prop, 0), "props");
    std::printf("device: %s\n", prop.name);
    ThreadPool pool(0);
    std::mt19937 rng(1234);
    const bool quick = std::getenv("RAPID_CUDA_MM_QUICK") != nullptr;
    std::vector<int> ns = {1, 2, 3, 7, 8, 9, 16, 33, 64, 130};
    if (quick) ns = {1, 3, 8, 9, 33};
    std::vector<Format> fmts;
    for (int bits : {4, 8})
      for (int g : {32, 64, 128})
        for (DType t : {DType::F32, DType::F16, DType::BF16}) fmts.push_back({WeightKind::Affine, bits, g, t});
    for (DType t : {DType::F32, DType::F16, DType::BF16}) fmts.push_back({WeightKind::Dense, 0, 0, t});
    // (out, in): small, a 0.5B-like square, a tied-embedding-like head [vocab=1000, 256], a down-proj-like K.
    const int64_t shapes[][2] = {{96, 64}, {896, 896}, {1000, 256}, {130, 4864}, {37, 136}};
    for (const Format& f : fmts)
      for (const auto& sh : shapes) {
        const int64_t mult = f.kind == WeightKind::Affine ? f.group : 8;
        if (sh[1] % mult != 0) continue;
        test_shape(pool, f, sh[0], sh[1], ns, rng);
      }
    // A K whose bf16 activations (56 KB) exceed the gemv kernel's default 48 KB of shared memory (opt-in path).
    for (const Format& f : {Format{WeightKind::Affine, 4, 64, DType::BF16}, Format{WeightKind::Affine, 8, 128, DType::F32}})
      test_shape(pool, f, 40, 28672, ns, rng);
    for (const Format& f : fmts) test_fused(pool, f, rng);
    for (const Format& f : {Format{WeightKind::Affine, 4, 64, DType::BF16}, Format{WeightKind::Affine, 8, 32, DType::F16},
                            Format{WeightKind::Dense, 0, 0, DType::BF16}, Format{WeightKind::Dense, 0, 0, DType::F32}})
      test_glu(pool, f, 1000, 896, rng);
    // Mixed per-layer quantization (a dense gate beside a 4-bit up, as in the qwen3-q4 fixture).
    const Format dense_f32{WeightKind::Dense, 0, 0, DType::F32}, a4{WeightKind::Affine, 4, 32, DType::F32};
    test_glu(pool, dense_f32, 1000, 896, rng, &a4);
    test_glu(pool, a4, 1000, 896, rng, &dense_f32);
    bench(Format{WeightKind::Affine, 4, 64, DType::BF16}, 4864, 896, rng);
    bench(Format{WeightKind::Affine, 4, 64, DType::BF16}, 151936, 896, rng);

    // The same cases for affine weights in Fast precision (tensor cores), then its decode bandwidth.
    g_mode = cuda::MathMode::Fast;
    for (const Format& f : fmts) {
      if (f.kind != WeightKind::Affine) continue;
      for (const auto& sh : shapes)
        if (sh[1] % f.group == 0) test_shape(pool, f, sh[0], sh[1], ns, rng);
      test_fused(pool, f, rng);
    }
    for (const Format& f : {Format{WeightKind::Affine, 4, 64, DType::BF16}, Format{WeightKind::Affine, 8, 32, DType::F16},
                            Format{WeightKind::Affine, 4, 128, DType::F32}, Format{WeightKind::Affine, 8, 128, DType::BF16}})
      test_glu(pool, f, 1000, 896, rng);
    test_glu(pool, dense_f32, 1000, 896, rng, &a4);
    test_fused_norm(rng);
    test_tiled(rng);
    test_bulk(rng);
    test_partials(rng);
    test_cluster(rng);
    test_rope_epilogue(rng);
    for (const auto& sh : {std::pair<int64_t, int64_t>{4864, 896}, {896, 4864}, {1152, 896}, {151936, 896},
                           {22016, 2048}, {2048, 11008}})
      bench(Format{WeightKind::Affine, 4, 64, DType::BF16}, sh.first, sh.second, rng);
  } catch (const std::exception& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
  std::printf("%s: %d failing case(s)\n", g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}
