// Op test of the CUDA MoE block (cuda/moe.*) against layers/moe.cpp (the CPU reference, Exact) on random weights:
// expert formats affine 4-bit g64 and g32, 8-bit g64, dense bf16 (router 8-bit for the affine cases, bf16 for the
// dense one); T = 1, 7, 64, 300 tokens; E = 8 and 128 experts, top-2 and top-8. Per case: the routing (a differing
// choice must be a near-tie of the CPU's probabilities), the weights, the block output h += moe(x); then bitwise batch
// invariance (a row alone == the row in a batch of 64) and a replayed CUDA graph (== the eager launches).
// Built by `node scripts/build-cuda.mjs --tests` into build/cuda/tests/cuda_moe_test; run on an sm_90 GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "cpu/matmul.h"
#include "cpu/threadpool.h"
#include "cuda/moe.h"
#include "cuda_test_util.h"
#include "layers/linear.h"
#include "layers/moe.h"
#include "quant/quantize.h"
#include "tensor/weight.h"

using namespace rapid;
namespace cu = rapid::cuda;
using namespace rapid::cuda::test;

namespace {

std::mt19937 g_rng(4321);

// A weight format of the case: bits 0 = dense bf16.
struct Format {
  int bits = 4, group = 64;
  std::string name() const { return bits ? std::to_string(bits) + "-bit g" + std::to_string(group) : "bf16"; }
};

// Stacked [E * out, in] weight bytes (kept alive by the case) and its per-expert views.
struct Stacked {
  std::vector<uint32_t> codes;
  std::vector<uint8_t> scales, biases, dense;
  Weight all;
  std::vector<Weight> views(int64_t E) const {
    std::vector<Weight> v(static_cast<size_t>(E));
    const int64_t out = all.out / E;
    for (int64_t e = 0; e < E; ++e) {
      Weight w = all;
      w.out = out;
      const int64_t r = e * out;
      if (all.kind == WeightKind::Dense) {
        w.data = dense.data() + size_t(r * all.in) * 2;
      } else {
        w.data = codes.data() + size_t(r * all.in * all.bits / 32);
        w.scales = scales.data() + size_t(r * (all.in / all.group)) * 2;
        w.biases = biases.data() + size_t(r * (all.in / all.group)) * 2;
      }
      v[size_t(e)] = w;
    }
    return v;
  }
};

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

Stacked make_stacked(int64_t rows, int64_t in, Format f, float scale, const std::string& name) {
  std::vector<float> w = uniform_vec(g_rng, size_t(rows * in), -scale, scale);
  for (float& v : w) v = from_bf16(to_bf16(v));  // the checkpoint's bf16 values
  Stacked s;
  s.all.out = rows;
  s.all.in = in;
  s.all.name = name;
  s.all.dtype = DType::BF16;
  if (f.bits == 0) {
    s.dense.resize(size_t(rows * in) * 2);
    for (size_t i = 0; i < w.size(); ++i) {
      const uint16_t b = to_bf16(w[i]);
      std::memcpy(s.dense.data() + 2 * i, &b, 2);
    }
    s.all.kind = WeightKind::Dense;
    s.all.data = s.dense.data();
    return s;
  }
  quantize_affine_typed(w.data(), rows, in, f.group, f.bits, DType::BF16, s.codes, s.scales, s.biases);
  s.all.kind = WeightKind::Affine;
  s.all.bits = f.bits;
  s.all.group = f.group;
  s.all.data = s.codes.data();
  s.all.scales = s.scales.data();
  s.all.biases = s.biases.data();
  return s;
}

// One random MoE block in format f and its device copy.
struct Case {
  Stacked router, gate, up, down;
  MoeBlock block;
  cu::DevMoe dev;
  std::vector<void*> allocations;
  Case(int64_t E, int64_t H, int64_t I, int k, Format f) {
    const Format rf = f.bits ? Format{8, 64} : f;  // mlx-community quantizes the router to 8 bits
    router = make_stacked(E, H, rf, 1.0f, "router");
    gate = make_stacked(E * I, H, f, 0.08f, "gate");
    up = make_stacked(E * I, H, f, 0.08f, "up");
    down = make_stacked(E * H, I, f, 0.08f, "down");
    block.router.gate.w = router.all;
    block.router.opt.top_k = k;
    MoeExperts& ex = block.experts;
    ex.n_experts = E;
    ex.hidden = H;
    ex.ffn = I;
    ex.gate = gate.views(E);
    ex.up = up.views(E);
    ex.down = down.views(E);
    const std::string why = cu::moe_unsupported(block);
    if (!why.empty()) throw std::runtime_error("moe_unsupported: " + why);
    dev = cu::upload_moe(block, allocations);
  }
  ~Case() {
    for (void* p : allocations) cudaFree(p);
  }
};

// CPU router probabilities [n, E] (Exact logits, softmax as moe_route).
std::vector<float> cpu_probs(ThreadPool& pool, const MoeRouter& r, const std::vector<float>& x, int64_t n) {
  const int64_t E = r.n_experts();
  std::vector<float> p(size_t(n * E));
  linear(pool, r.gate, x.data(), p.data(), n, Precision::Exact);
  for (int64_t t = 0; t < n; ++t) {
    float* pr = p.data() + t * E;
    const float mx = *std::max_element(pr, pr + E);
    float sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += (pr[e] = std::exp(pr[e] - mx));
    for (int64_t e = 0; e < E; ++e) pr[e] /= sum;
  }
  return p;
}

// h after moe_forward on the device from h0 (x, h0 [T, H]).
std::vector<float> gpu_block(const Case& c, const std::vector<float>& x, const std::vector<float>& h0, int64_t T) {
  Dev<float> dx(x), dh(h0);
  Dev<char> scratch(cu::moe_scratch_bytes(c.dev, T));
  cudaStream_t s = nullptr;
  cu::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  cu::moe_forward(c.dev, dx.p, T, dh.p, scratch.p, s);
  cu::check(cudaStreamSynchronize(s), "moe_forward");
  cudaStreamDestroy(s);
  return dh.download();
}

void run_case(ThreadPool& pool, int64_t E, int k, Format f, const std::vector<int64_t>& Ts) {
  const int64_t H = 256, I = 128;
  Case c(E, H, I, k, f);
  for (int64_t T : Ts) {
    const std::string tag = "moe " + f.name() + " E=" + std::to_string(E) + " k=" + std::to_string(k) + " T=" + std::to_string(T);
    const std::vector<float> x = uniform_vec(g_rng, size_t(T * H)), h0 = uniform_vec(g_rng, size_t(T * H));
    // Routing.
    std::vector<int32_t> idx(size_t(T * k));
    std::vector<float> w(size_t(T * k));
    moe_route(pool, c.block.router, x.data(), T, Precision::Exact, idx.data(), w.data());
    Dev<float> dx(x);
    Dev<int32_t> didx(size_t(T * k));
    Dev<float> dw(size_t(T * k));
    cu::moe_route_dev(c.dev, dx.p, T, didx.p, dw.p, nullptr);
    cu::check(cudaDeviceSynchronize(), "moe_route_dev");
    const std::vector<int32_t> gidx = didx.download();
    const std::vector<float> gw = dw.download();
    const std::vector<float> probs = cpu_probs(pool, c.block.router, x, T);
    std::vector<uint8_t> tie(size_t(T), 0);  // tokens whose choice differs within a near-tie: left out below
    bool route_ok = true;
    double w_err = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (std::equal(idx.begin() + t * k, idx.begin() + (t + 1) * k, gidx.begin() + t * k)) {
        for (int j = 0; j < k; ++j) w_err = std::max(w_err, double(std::fabs(w[size_t(t * k + j)] - gw[size_t(t * k + j)])));
        continue;
      }
      // Each GPU pick must be within rounding of the CPU's pick at its rank.
      for (int j = 0; j < k; ++j) {
        const int32_t ge = gidx[size_t(t * k + j)];
        const float pc = probs[size_t(t * E + idx[size_t(t * k + j)])];
        if (ge < 0 || ge >= E || std::fabs(probs[size_t(t * E + ge)] - pc) > 1e-5f * std::max(pc, 1e-3f)) route_ok = false;
      }
      tie[size_t(t)] = 1;
    }
    report_bool(tag + " routing", route_ok, std::to_string(std::count(tie.begin(), tie.end(), 1)) + " near-tie row(s)");
    report(tag + " router weights", w_err, 1e-5);
    // The block.
    std::vector<float> y(size_t(T * H));
    MoeScratch ms;
    moe_block_forward(pool, c.block, x.data(), T, y.data(), Precision::Exact, ms);
    const std::vector<float> hg = gpu_block(c, x, h0, T);
    double err = 0, ref = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (tie[size_t(t)]) continue;
      for (int64_t i = 0; i < H; ++i) {
        const double d = double(hg[size_t(t * H + i)]) - double(h0[size_t(t * H + i)]);
        const double r = y[size_t(t * H + i)];
        err = std::max(err, std::isfinite(d) ? std::fabs(d - r) : INFINITY);
        ref = std::max(ref, std::fabs(r));
      }
    }
    report(tag + " block output (rel)", err / std::max(ref, 1e-30), 2e-5);
  }
}

// A row alone, and in a batch of 64, give the same bits; a replayed graph gives the eager launches' bits.
void invariance_and_graph(int64_t E, int k, Format f) {
  const int64_t H = 256, I = 128, T = 64;
  Case c(E, H, I, k, f);
  const std::string tag = "moe " + f.name() + " E=" + std::to_string(E) + " k=" + std::to_string(k);
  const std::vector<float> x = uniform_vec(g_rng, size_t(T * H)), h0 = uniform_vec(g_rng, size_t(T * H));
  const std::vector<float> batch = gpu_block(c, x, h0, T);
  bool same = true;
  for (int64_t t : {int64_t(0), int64_t(5), int64_t(63)}) {
    const std::vector<float> xr(x.begin() + t * H, x.begin() + (t + 1) * H), hr(h0.begin() + t * H, h0.begin() + (t + 1) * H);
    const std::vector<float> alone = gpu_block(c, xr, hr, 1);
    same = same && std::memcmp(alone.data(), batch.data() + t * H, size_t(H) * sizeof(float)) == 0;
  }
  report_bool(tag + " batch invariance (rows 0, 5, 63 alone vs T=64)", same);

  Dev<float> dx(x), dh(h0);
  Dev<char> scratch(cu::moe_scratch_bytes(c.dev, T));
  cudaStream_t s = nullptr;
  cu::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  cu::check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  cu::moe_forward(c.dev, dx.p, T, dh.p, scratch.p, s);
  cudaGraph_t g = nullptr;
  cu::check(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  cu::check(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(g);
  dh.upload(h0);
  cu::check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
  cu::check(cudaStreamSynchronize(s), "graph");
  const std::vector<float> graphed = dh.download();
  cudaGraphExecDestroy(exec);
  cudaStreamDestroy(s);
  report_bool(tag + " captured graph == eager", std::memcmp(graphed.data(), batch.data(), batch.size() * sizeof(float)) == 0);
}

}  // namespace

int main() {
  return run_op_test([] {
    ThreadPool pool(4);
    const std::vector<int64_t> Ts = {1, 7, 64, 300};
    for (Format f : {Format{4, 64}, Format{4, 32}, Format{8, 64}, Format{0, 0}})
      for (auto [E, k] : {std::pair<int64_t, int>{8, 2}, {128, 8}, {128, 2}, {8, 8}}) run_case(pool, E, k, f, Ts);
    for (Format f : {Format{4, 64}, Format{0, 0}}) invariance_and_graph(128, 8, f);
  });
}
