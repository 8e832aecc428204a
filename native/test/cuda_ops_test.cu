// The CUDA op backend (cuda/cuda_ops.h) against the CPU reference (cpu/cpu_ops.h): every op of ops::Backend on
// random inputs with awkward sizes (n = 1, 63, 1000; head_dim 64/72/80; many short segments and one long one), the
// shared op-by-op suite (backend_ops_compare.h: every weight format, empty segments), then every tiny VLM tower
// fixture (test/fixtures/vlm) encoding one image on both backends. One PASS/FAIL line per
// check; exit status 1 on any failure. Without a usable GPU it prints one SKIP line and exits 0.
//   node scripts/build-cuda.mjs --tests && build/cuda/tests/cuda_ops_test [FIXTURE_ROOT]   (default test/fixtures/vlm)
// Tolerances: max |cuda - cpu| / max |cpu| over the output. Exact (f32 both): 2e-5 per op, 1e-4 per tower (every
// tower layer adds its own rounding-order differences). Fast (bf16 operands on tensor cores, f32 sums, against the
// CPU's f32): 2e-2 per op, 5e-2 per tower; the shared suite's Fast linears compare against the CPU's Fast (int8
// activations for 4/8-bit weights): 3e-2.
#include <cuda_runtime.h>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>
#include "backend/ops.h"
#include "cpu/cpu_ops.h"
#include "cpu/threadpool.h"
#include "cuda/cuda_ops.h"
#include "cuda/dense_gemm.h"
#include "cuda/launch.cuh"
#include "cuda/segment_attention.h"
#include "format/json.h"
#include "format/safetensors.h"
#include "quant/quantize.h"
#include "tensor/dtype.h"
#include "vision/vision.h"
#include "backend_ops_compare.h"
#include "cuda_test_util.h"

using namespace rapid;
using cuda::test::report;
using cuda::test::report_bool;
namespace fs = std::filesystem;

namespace {

constexpr double kExactOp = 2e-5, kFastOp = 2e-2, kExactTower = 1e-4, kFastTower = 5e-2;

std::mt19937 g_rng(7);

std::vector<float> randv(int64_t n, float sd = 1.f, float mean = 0.f) {
  std::normal_distribution<float> nd(mean, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(g_rng);
  return v;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double md = 0, mb = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    md = std::max(md, std::fabs(double(a[i]) - double(b[i])));
    mb = std::max(mb, std::fabs(double(b[i])));
  }
  return std::isnan(md) ? NAN : md / std::max(mb, 1e-30);
}

// The two backends side by side: inputs uploaded to both, an op run on both, outputs downloaded and compared.
// Weight structs are kept for the backends' lifetime (ops.h: a backend caches device copies by their address).
struct Pair {
  ops::Backend& cpu;
  ops::Backend& gpu;
  std::vector<std::shared_ptr<void>> kept;
  template <class T>
  T& keep(T v) {
    auto p = std::make_shared<T>(std::move(v));
    kept.push_back(p);
    return *p;
  }
  struct Bufs {
    ops::Buf c, g;
  };
  Bufs up(const std::vector<float>& h) { return {cpu.upload(h.data(), int64_t(h.size())), gpu.upload(h.data(), int64_t(h.size()))}; }
  Bufs zeros(int64_t n) { return {cpu.alloc(n), gpu.alloc(n)}; }
  // Runs f(backend, its buffer pointers...) on both.
  template <class F>
  void run(F&& f) {
    f(cpu, false);
    f(gpu, true);
  }
  void compare(const std::string& name, const Bufs& b, double tol) {
    std::vector<float> hc(size_t(b.c.size())), hg(size_t(b.g.size()));
    cpu.download(b.c.data(), b.c.size(), hc.data());
    gpu.download(b.g.data(), b.g.size(), hg.data());
    report(name, rel_err(hg, hc), tol);
  }
};
float* P(const Pair::Bufs& b, bool g) { return g ? b.g.data() : b.c.data(); }

struct OwnedLinear {
  Linear l;
  std::vector<float> f32;
  std::vector<uint8_t> data, scales, biases;
};

// A Linear [out, in] with bias: dense f32, or MLX affine 4-bit g64 (bf16 scales) quantized from random values.
std::unique_ptr<OwnedLinear> make_linear(int64_t out, int64_t in, bool affine) {
  auto o = std::make_unique<OwnedLinear>();
  o->f32 = randv(out * in, 0.05f);
  Weight& w = o->l.w;
  w.out = out;
  w.in = in;
  w.name = affine ? "test.affine4" : "test.dense";
  if (affine) {
    std::vector<uint32_t> packed;
    quantize_affine_typed(o->f32.data(), out, in, 64, 4, DType::BF16, packed, o->scales, o->biases);
    o->data.resize(packed.size() * 4);
    std::memcpy(o->data.data(), packed.data(), o->data.size());
    w.kind = WeightKind::Affine;
    w.dtype = DType::BF16;
    w.bits = 4;
    w.group = 64;
    w.data = o->data.data();
    w.scales = o->scales.data();
    w.biases = o->biases.data();
  } else {
    w.data = o->f32.data();
  }
  o->l.bias = randv(out, 0.1f);
  return o;
}

void linear_cases(Pair& pr) {
  struct Shape {
    int64_t n, out, in;
  };
  // Rows 1, 127, 4096 and widths off the 128 x 64 tiles; k = 96 and 1000 end in a half-live 64-wide k tile.
  for (const Shape s : {Shape{1, 64, 64}, Shape{63, 130, 72}, Shape{1000, 200, 333}, Shape{257, 384, 1280},
                        Shape{1, 1000, 96}, Shape{127, 257, 96}, Shape{4096, 300, 1000}})
    for (const bool affine : {false, true}) {
      if (affine && s.in % 64) continue;  // g64 needs in % 64 == 0
      const std::shared_ptr<OwnedLinear> L = make_linear(s.out, s.in, affine);
      pr.kept.push_back(L);
      for (const Precision p : {Precision::Exact, Precision::Fast})
        for (const int64_t pad : {5, 8}) {
          // Strided: x rows of in + pad, y rows of out + pad - 2 (the towers write q/k/v side by side); pad 8 keeps
          // rows 16-byte aligned where in is a multiple of 4 (the vector paths), pad 5 does not.
          const int64_t ldx = s.in + pad, ldy = s.out + pad - 2;
          auto x = pr.up(randv(s.n * ldx));
          auto y = pr.zeros(s.n * ldy);
          pr.run([&](ops::Backend& be, bool g) { be.linear(L->l, P(x, g), ldx, P(y, g), ldy, s.n, p); });
          char name[160];
          std::snprintf(name, sizeof name, "linear %s n=%lld out=%lld in=%lld ldx=%lld %s", affine ? "affine4" : "f32",
                        (long long)s.n, (long long)s.out, (long long)s.in, (long long)ldx,
                        p == Precision::Fast ? "fast" : "exact");
          // CPU Fast quantizes affine activations to int8: compare Fast against the CPU's Exact instead.
          if (p == Precision::Fast) {
            auto yc = pr.zeros(s.n * ldy);
            pr.cpu.linear(L->l, x.c.data(), ldx, yc.c.data(), ldy, s.n, Precision::Exact);
            std::vector<float> hc(size_t(s.n * ldy)), hg(size_t(s.n * ldy));
            pr.cpu.download(yc.c.data(), s.n * ldy, hc.data());
            pr.gpu.download(y.g.data(), s.n * ldy, hg.data());
            report(name, rel_err(hg, hc), kFastOp);
          } else {
            pr.compare(name, y, kExactOp);
          }
        }
    }
}

// The warpgroup-MMA GEMM (v3, sm_90a) at every tile width against the mma.sync one (v2): the same bf16 operands in the
// same 16-wide k steps from zero per output, on the same tensor cores, give the same bits (H100: they do).
void gemm_ab_cases(Pair& pr) {
  if (!cuda::wgmma_supported()) {
    std::printf("SKIP linear fast v3 (no sm_90a code for this device)\n");
    return;
  }
  struct Shape {
    int64_t n, out, in, ldx, ldy;
  };
  const Shape shapes[] = {{1, 300, 1000, 1008, 303}, {127, 300, 1000, 1008, 303}, {4096, 300, 1000, 1008, 303},
                          {300, 1152, 4304, 4304, 1152}, {4096, 1152, 1152, 1152, 1152}};
  for (const Shape& sh : shapes) {
    const std::shared_ptr<OwnedLinear> L = make_linear(sh.out, sh.in, false);
    pr.kept.push_back(L);
    auto x = pr.up(randv(sh.n * sh.ldx));
    auto run = [&](const char* gemm) {
      setenv("RAPID_CUDA_TOWER_GEMM", gemm, 1);
      auto y = pr.zeros(sh.n * sh.ldy);
      pr.gpu.linear(L->l, x.g.data(), sh.ldx, y.g.data(), sh.ldy, sh.n, Precision::Fast);
      std::vector<float> h(size_t(sh.n * sh.ldy));
      pr.gpu.download(y.g.data(), sh.n * sh.ldy, h.data());
      return h;
    };
    const std::vector<float> v2 = run("v2");
    for (const std::string& v3 : cuda::gemm_kernel_names()) {
      if (v3 == "v2") continue;
      const std::vector<float> h = run(v3.c_str());
      char name[128];
      std::snprintf(name, sizeof name, "linear fast %s == v2 n=%lld out=%lld in=%lld", v3.c_str(), (long long)sh.n,
                    (long long)sh.out, (long long)sh.in);
      const bool same = std::memcmp(h.data(), v2.data(), h.size() * sizeof(float)) == 0;
      report_bool(name, same, same ? "same bits" : "bits differ, rel_err=" + std::to_string(rel_err(h, v2)));
    }
  }
  unsetenv("RAPID_CUDA_TOWER_GEMM");
}

// The GEMMs' epilogues (ops::Backend::linear_epilogue on CUDA: the activation or the residual add applied as the GEMM
// stores) against the default's linear, then act or add, on the GPU: the same bits, Fast (v2 and v3) and Exact.
void epilogue_cases(Pair& pr) {
  const int64_t n = 300, out = 1152, in = 1000;
  const std::shared_ptr<OwnedLinear> L = make_linear(out, in, false);
  pr.kept.push_back(L);
  auto x = pr.up(randv(n * in));
  const std::vector<float> resid = randv(n * out);
  std::vector<std::pair<std::string, ops::Backend::LinearEpilogue>> eps;
  for (const auto& [name, a] : {std::pair{"silu", ops::VAct::Silu}, {"gelu_tanh", ops::VAct::GeluTanh}, {"gelu_erf", ops::VAct::GeluErf},
                                {"quick_gelu", ops::VAct::QuickGelu}})
    eps.push_back({name, ops::Backend::LinearEpilogue::activation(a)});
  eps.push_back({"residual", ops::Backend::LinearEpilogue::residual()});
  for (const char* gemm : {"v2", "v3"}) {
    if (std::strcmp(gemm, "v3") == 0 && !cuda::wgmma_supported()) continue;
    setenv("RAPID_CUDA_TOWER_GEMM", gemm, 1);
    for (const Precision p : {Precision::Fast, Precision::Exact}) {
      if (p == Precision::Exact && std::strcmp(gemm, "v3") == 0) continue;  // Exact has one kernel
      for (const auto& [name, e] : eps) {
        auto fused = pr.up(resid), plain = pr.up(resid), t = pr.zeros(n * out);
        pr.gpu.linear_epilogue(L->l, x.g.data(), fused.g.data(), n, p, e);
        if (e.accumulate) {
          pr.gpu.linear(L->l, x.g.data(), t.g.data(), n, p);
          pr.gpu.add(plain.g.data(), t.g.data(), n * out);
        } else {
          pr.gpu.linear(L->l, x.g.data(), plain.g.data(), n, p);
          pr.gpu.act(plain.g.data(), n, out, *e.act);
        }
        std::vector<float> hf(size_t(n * out)), hp(size_t(n * out));
        pr.gpu.download(fused.g.data(), n * out, hf.data());
        pr.gpu.download(plain.g.data(), n * out, hp.data());
        const bool same = std::memcmp(hf.data(), hp.data(), hf.size() * sizeof(float)) == 0;
        report_bool(std::string("linear epilogue ") + name + (p == Precision::Fast ? " fast " : " exact ") + gemm +
                        " == linear then op",
                    same, same ? "same bits" : "bits differ, rel_err=" + std::to_string(rel_err(hf, hp)));
      }
    }
  }
  unsetenv("RAPID_CUDA_TOWER_GEMM");
}

void attention_cases(Pair& pr) {
  struct Case {
    const char* what;
    int heads, kv_heads, hd;
    std::vector<int64_t> cu;
  };
  std::vector<int64_t> windows{0};  // many short windows of awkward lengths, then one long segment
  std::uniform_int_distribution<int> len(1, 70);
  while (windows.back() < 1200) windows.push_back(windows.back() + len(g_rng));
  windows.push_back(windows.back() + 1500);
  const std::vector<Case> cases = {
      {"one token", 4, 4, 64, {0, 1}},
      {"63 tokens", 4, 4, 72, {0, 63}},
      {"windows of 64 + full", 4, 4, 80, {0, 64, 128, 192, 256, 1000}},
      {"short windows + 1500", 2, 2, 64, windows},
      {"short windows + 1500", 2, 2, 72, windows},
      {"GQA 8/2, 1000 tokens", 8, 2, 64, {0, 1000}},
      {"head_dim 128, 300 tokens", 2, 2, 128, {0, 17, 300}},
  };
  for (const Case& c : cases) {
    const int64_t n = c.cu.back();
    // Packed q|k|v rows as the towers lay them out, plus 4 floats of slack per row.
    const int64_t ld = int64_t(c.heads + 2 * c.kv_heads) * c.hd + 4, ldo = int64_t(c.heads) * c.hd + 2;
    auto qkv = pr.up(randv(n * ld));
    for (const Precision p : {Precision::Exact, Precision::Fast}) {
      auto out = pr.zeros(n * ldo);
      const float scale = 1.0f / std::sqrt(float(c.hd));
      pr.run([&](ops::Backend& be, bool g) {
        const float* q = P(qkv, g);
        be.attention(q, ld, q + int64_t(c.heads) * c.hd, q + int64_t(c.heads + c.kv_heads) * c.hd, ld, P(out, g), ldo,
                     c.heads, c.kv_heads, c.hd, scale, c.cu, p);
      });
      char name[160];
      std::snprintf(name, sizeof name, "attention %s hd=%d heads=%d/%d segs=%zu %s", c.what, c.hd, c.heads,
                    c.kv_heads, c.cu.size() - 1, p == Precision::Fast ? "fast" : "exact");
      // The CPU's Fast attention is f32 (Exact): one reference for both.
      pr.compare(name, out, p == Precision::Fast ? kFastOp : kExactOp);
    }
  }
}

// Fast attention's row arithmetic does not depend on the query tile (64 queries on 4 warps or 128 on 8): both
// launches of the same segments give the same bits, also where a tile runs past its segment or the last token.
void attention_tile_cases() {
  using cuda::test::Dev;
  const std::vector<std::vector<int64_t>> segs = {{0, 1000}, {0, 64, 200, 333, 461}, {0, 5, 4096}};
  for (const int hd : {64, 72, 128})
    for (const std::vector<int64_t>& cu : segs) {
      const int heads = 4, kv_heads = 2;
      const int64_t n = cu.back(), ld = int64_t(heads + 2 * kv_heads) * hd, ldo = int64_t(heads) * hd;
      const Dev<float> qkv(randv(n * ld));
      Dev<char> scratch(cuda::segment_attention_scratch_bytes(n, heads, kv_heads, hd, true));
      std::vector<float> out[2];
      for (int v = 0; v < 2; ++v) {
        const int tile = v ? 128 : 64;
        const std::vector<cuda::SegTile> tiles = cuda::seg_tiles(cu, tile);
        const Dev<cuda::SegTile> dt(tiles);
        Dev<float> dout(size_t(n * ldo));
        cuda::segment_attention(qkv.p, ld, qkv.p + heads * hd, qkv.p + (heads + kv_heads) * hd, ld, dout.p, ldo, n,
                                heads, kv_heads, hd, 1.0f / std::sqrt(float(hd)), dt.p, int(tiles.size()), tile, true,
                                scratch.p, nullptr);
        out[v] = dout.download();
      }
      char name[128];
      std::snprintf(name, sizeof name, "attention fast tile 128 == tile 64 bits hd=%d tokens=%lld segs=%zu", hd,
                    (long long)n, cu.size() - 1);
      report(name, std::memcmp(out[0].data(), out[1].data(), out[0].size() * 4) == 0 ? 0.0 : 1.0, 0.0);
    }
}

void row_cases(Pair& pr) {
  for (const int64_t n : {int64_t(1), int64_t(63), int64_t(1000)}) {
    const std::string sz = " n=" + std::to_string(n);
    const int64_t dim = 200;
    {
      const NormWeight& w = pr.keep(NormWeight{randv(dim, 0.1f, 1.f), 1e-6f});
      auto x = pr.up(randv(n * dim, 2.f, 0.3f));
      auto y = pr.zeros(n * dim);
      pr.run([&](ops::Backend& be, bool g) { be.rms_norm(P(x, g), P(y, g), n, w); });
      pr.compare("rms_norm" + sz, y, kExactOp);
    }
    for (const bool weighted : {true, false}) {
      const int heads = 3, hd = 72;
      const int64_t ld = heads * hd + 8;
      const NormWeight& w = pr.keep(NormWeight{weighted ? randv(hd, 0.1f, 1.f) : std::vector<float>{}, 1e-6f});
      auto x = pr.up(randv(n * ld));
      pr.run([&](ops::Backend& be, bool g) { be.rms_norm_heads(P(x, g), ld, n, heads, hd, w); });
      pr.compare(std::string("rms_norm_heads ") + (weighted ? "weighted" : "unweighted") + sz, x, kExactOp);
    }
    {
      LayerNormW& w = pr.keep(LayerNormW{});
      w.w = randv(dim, 0.1f, 1.f);
      w.b = randv(dim, 0.1f);
      w.eps = 1e-6f;
      auto x = pr.up(randv(n * dim, 2.f, 0.5f));
      auto y = pr.zeros(n * dim);
      pr.run([&](ops::Backend& be, bool g) { be.layer_norm(P(x, g), P(y, g), n, w); });
      pr.compare("layer_norm" + sz, y, kExactOp);
    }
    const char* acts[] = {"silu", "gelu_tanh", "gelu_erf", "quick_gelu"};
    for (int a = 0; a < 4; ++a) {
      auto x = pr.up(randv(n * 33, 3.f));
      auto u = pr.up(randv(n * 33));
      auto x2 = pr.up(randv(n * 33, 3.f));
      pr.run([&](ops::Backend& be, bool g) {
        be.act(P(x, g), n, 33, ops::VAct(a));
        be.act_mul(P(x2, g), P(u, g), n, 33, ops::VAct(a));
      });
      pr.compare(std::string("act ") + acts[a] + sz, x, kExactOp);
      pr.compare(std::string("act_mul ") + acts[a] + sz, x2, kExactOp);
    }
    {
      const int64_t w = 37;
      auto y = pr.up(randv(n * w));
      auto x = pr.up(randv(n * w));
      const std::vector<float>& sub = pr.keep(randv(w));
      const std::vector<float>& mul = pr.keep(randv(w));
      auto c = pr.zeros(n * (w + 3));
      pr.run([&](ops::Backend& be, bool g) {
        be.add(P(y, g), P(x, g), n * w);
        be.scale_shift(P(y, g), n * w, 0.25f, 1.5f);
        be.scale_shift_cols(P(x, g), n, sub, mul);
        be.clamp(P(x, g), w, P(c, g), w + 3, n, w, -0.5f, 0.75f);
      });
      pr.compare("add + scale_shift" + sz, y, kExactOp);
      pr.compare("scale_shift_cols" + sz, x, kExactOp);
      pr.compare("clamp (strided)" + sz, c, kExactOp);
    }
    {
      const int64_t w = 45, ldx = 50, ldy = 47;
      std::vector<int32_t> idx(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = int32_t(n - 1 - i);
      std::shuffle(idx.begin(), idx.end(), g_rng);
      auto x = pr.up(randv(n * ldx));
      auto ga = pr.zeros(n * ldy);
      auto sc = pr.zeros(n * ldy);
      auto tr = pr.zeros(3 * n * 17);
      auto trs = pr.up(randv(3 * n * 17));
      pr.run([&](ops::Backend& be, bool g) {
        be.gather_rows(P(x, g), ldx, P(ga, g), ldy, w, idx);
        be.scatter_rows(P(x, g), ldx, P(sc, g), ldy, w, idx);
        be.transpose(P(trs, g), P(tr, g), 3, n, 17);
      });
      pr.compare("gather_rows" + sz, ga, kExactOp);
      pr.compare("scatter_rows" + sz, sc, kExactOp);
      pr.compare("transpose [3, n, 17]" + sz, tr, kExactOp);
    }
    {
      // Average pooling of 4 taps, weighted (bilinear-like) taps, and a position table add.
      const int64_t w = 40, rows = n;
      ops::Taps avg, wt;
      avg.k = 4;
      avg.div = 4.f;
      wt.k = 4;
      std::uniform_int_distribution<int32_t> pick(0, int32_t(n - 1));
      for (int64_t i = 0; i < rows * 4; ++i) {
        avg.idx.push_back(pick(g_rng));
        wt.idx.push_back(pick(g_rng));
        wt.w.push_back(std::uniform_real_distribution<float>(0.f, 1.f)(g_rng));
      }
      auto x = pr.up(randv(n * w));
      auto ya = pr.zeros(rows * (w + 1));
      auto yw = pr.zeros(rows * w);
      const std::vector<float>& table = pr.keep(randv(n * w));
      Weight& tw = pr.keep(Weight{});
      tw.out = n;
      tw.in = w;
      tw.data = table.data();
      tw.name = "test.table";
      auto xt = pr.up(randv(rows * (w + 2)));
      pr.run([&](ops::Backend& be, bool g) {
        be.pool_rows(P(x, g), w, P(ya, g), w + 1, w, avg);
        be.pool_rows(P(x, g), w, P(yw, g), w, w, wt);
        be.add_table_rows(tw, wt, P(xt, g), w + 2);
      });
      pr.compare("pool_rows average" + sz, ya, kExactOp);
      pr.compare("pool_rows weighted" + sz, yw, kExactOp);
      pr.compare("add_table_rows" + sz, xt, kExactOp);
    }
    for (const int hd : {64, 72, 80}) {
      // Whole-head rope over 3 heads of a packed row, and Gemma 4's per-half 2-D variant (two calls).
      const int heads = 3;
      const int64_t ld = 2 * heads * hd + 4;
      auto x = pr.up(randv(n * ld));
      auto x2 = pr.up(randv(n * ld));
      auto cs = pr.up(randv(n * hd / 2)), sn = pr.up(randv(n * hd / 2));
      auto cq = pr.up(randv(n * hd / 4)), sq = pr.up(randv(n * hd / 4));
      auto cr = pr.up(randv(n * hd / 4)), sr = pr.up(randv(n * hd / 4));
      pr.run([&](ops::Backend& be, bool g) {
        be.rope(P(x, g) + hd, ld, n, heads, hd, hd / 2, P(cs, g), P(sn, g));
        be.rope(P(x2, g), ld, n, heads, hd, hd / 4, P(cq, g), P(sq, g));
        be.rope(P(x2, g) + hd / 2, ld, n, heads, hd, hd / 4, P(cr, g), P(sr, g));
      });
      pr.compare("rope whole head hd=" + std::to_string(hd) + sz, x, kExactOp);
      pr.compare("rope 2-D per half hd=" + std::to_string(hd) + sz, x2, kExactOp);
    }
  }
}

std::vector<float> read_f32(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + p.string());
  f.seekg(0, std::ios::end);
  std::vector<float> v(size_t(f.tellg()) / 4);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * 4));
  return v;
}

// Every fixture dir with a vision tower: its first stored image through the tower on both backends.
void tower_cases(ThreadPool& pool, const fs::path& root) {
  std::vector<fs::path> dirs;
  if (fs::is_directory(root))
    for (const auto& e : fs::directory_iterator(root))
      if (fs::exists(e.path() / "reference.json") && fs::exists(e.path() / "config.json")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  int towers = 0;
  for (const fs::path& dir : dirs) {
    const std::string label = "tower " + dir.filename().string();
    try {
      const Json ref = Json::parse(read_text_file((dir / "reference.json").string()));
      std::shared_ptr<const Checkpoint> ck = Checkpoint::open(dir.string());
      const Json config = ck->config();
      if (!config.find("vision_config")) continue;
      const std::unique_ptr<VisionEncoder> enc = load_vision_encoder(ck, config, ref.get_string("family", ""));
      const Json* im = nullptr;
      if (const Json* cases = ref.find("cases"); cases && cases->is_array())
        for (const Json& c : cases->array())
          if (const Json* ims = c.find("images"); !im && ims && ims->is_array() && ims->size() > 0 &&
                                                  (*ims)[0].find("pixel_values") && (*ims)[0].find("features"))
            im = &(*ims)[0];
      if (!im) continue;
      ++towers;
      const std::vector<float> pix = read_f32(dir / im->at("pixel_values").as_string());
      const std::vector<float> feat = read_f32(dir / im->at("features").as_string());
      const Json& g = im->at("grid");  // [t, h, w]
      const ImageInput in{pix.data(), int64_t(pix.size()), int(g[0].as_int()), int(g[1].as_int()), int(g[2].as_int())};
      ops::CpuBackend cpu(pool);
      const std::unique_ptr<ops::Backend> gpu = cuda::make_cuda_ops();
      const ImageEmbedding c = enc->encode(in, cpu, Precision::Exact);
      const ImageEmbedding e = enc->encode(in, *gpu, Precision::Exact);
      const ImageEmbedding f = enc->encode(in, *gpu, Precision::Fast);
      report(label + " cuda exact vs cpu", rel_err(e.embeddings, c.embeddings), kExactTower);
      report(label + " cuda exact vs transformers", rel_err(e.embeddings, feat), kExactTower);
      report(label + " cuda fast vs cpu exact", rel_err(f.embeddings, c.embeddings), kFastTower);
      if (!c.deepstack.empty() || !e.deepstack.empty())
        report(label + " deepstack cuda exact vs cpu", rel_err(e.deepstack, c.deepstack), kExactTower);
      const ImageEmbedding e2 = enc->encode(in, *gpu, Precision::Exact);
      report_bool(label + " cuda deterministic (second encode bitwise)", e2.embeddings == e.embeddings);
      // Batch invariance on the GPU: every image of the fixture (and the first again) in one forward gives
      // each image bitwise its single encode, in both precisions.
      std::vector<std::vector<float>> pixs;
      std::vector<std::array<int, 3>> grids;
      for (const Json& c : ref.find("cases")->array())
        if (const Json* ims = c.find("images"); ims && ims->is_array())
          for (const Json& x : ims->array())
            if (x.find("pixel_values")) {
              pixs.push_back(read_f32(dir / x.at("pixel_values").as_string()));
              const Json& xg = x.at("grid");
              grids.push_back({int(xg[0].as_int()), int(xg[1].as_int()), int(xg[2].as_int())});
            }
      std::vector<ImageInput> batch;
      for (size_t i = 0; i < pixs.size(); ++i)
        batch.push_back({pixs[i].data(), int64_t(pixs[i].size()), grids[i][0], grids[i][1], grids[i][2]});
      batch.push_back(in);
      for (const Precision p : {Precision::Exact, Precision::Fast}) {
        const std::vector<ImageEmbedding> b = enc->encode_batch(batch, *gpu, p);
        bool same = b.size() == batch.size();
        for (size_t i = 0; same && i < batch.size(); ++i) {
          const ImageEmbedding one = enc->encode(batch[i], *gpu, p);
          same = one.tokens == b[i].tokens && one.embeddings == b[i].embeddings && one.deepstack == b[i].deepstack;
        }
        report_bool(label + " cuda batch of " + std::to_string(batch.size()) + " bitwise == single encodes (" +
                        (p == Precision::Exact ? "exact" : "fast") + ")",
                    same);
      }
    } catch (const std::exception& ex) {
      report_bool(label, false, std::string("threw: ") + ex.what());
    }
  }
  report_bool("tower fixtures found under " + root.string(), towers > 0, std::to_string(towers) + " towers");
}

}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIP cuda_ops_test: no CUDA device (%s)\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
  }
  const fs::path root = argc >= 2 ? fs::path(argv[1]) : fs::path("test/fixtures/vlm");
  return cuda::test::run_op_test([&] {
    ThreadPool pool(0);
    ops::CpuBackend cpu(pool);
    const std::unique_ptr<ops::Backend> gpu = cuda::make_cuda_ops();
    Pair pr{cpu, *gpu, {}};
    linear_cases(pr);
    gemm_ab_cases(pr);
    epilogue_cases(pr);
    attention_cases(pr);
    attention_tile_cases();
    row_cases(pr);
    {
      // A backend of its own: the suite's weights die with it, and a later one at the same address must not hit.
      const std::unique_ptr<ops::Backend> fresh = cuda::make_cuda_ops();
      ops_compare::compare_backends(cpu, *fresh, {kExactOp, 3e-2}, [](bool ok, const std::string& what, double err) {
        report_bool("compare_backends " + what, ok, "rel_err=" + std::to_string(err));
      });
    }
    tower_cases(pool, root);
  });
}
