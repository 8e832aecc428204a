// Standalone checks of the shared MoE block (native/src/layers/moe.{h,cpp}) against a double reference:
// the router with Qwen's and Gemma 4's options, every expert layout (transformers-saved fused, the hub's
// transposed fused, per-expert tensors, MLX SwitchLinear 4-bit), SiLU and gelu_tanh experts, bitwise
// batch invariance (a row alone == the row in any batch, Exact and Fast), the read-once counters, and
// the errors. Build (from the repo root):
//   g++ -O2 -std=c++20 -Wall -Wextra -Werror -pthread -Inative/src native/test/moe_test.cpp
//       native/src/layers/{moe,linear,vec_math}.cpp native/src/format/*.cpp native/src/quant/*.cpp
//       native/src/cpu/*.cpp -o /tmp/moe_test
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

#include "format/json.h"
#include "format/safetensors.h"
#include "layers/moe.h"
#include "quant/mlx_quant.h"
#include "quant/quantize.h"
#include "check.h"

using namespace rapid;
namespace fs = std::filesystem;

constexpr int64_t E = 6, H = 64, I = 32, N = 7;
constexpr int K = 2;

static std::mt19937 rng(1234);
static std::vector<float> randn(size_t n, float std) {
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

static std::string tmpdir(const std::string& name) {
  return fresh_tmpdir("rapid_moe_test_" + name + "_" + std::to_string(::getpid()));
}

static void write_dir(const std::string& d, const std::vector<TensorData>& t, const std::string& config) {
  write_safetensors(d + "/model.safetensors", t);
  std::ofstream(d + "/config.json") << config;
}

// The float weights every layout stores: gate_up [E, 2I, H] (gate = first I rows), down [E, H, I].
struct Master {
  std::vector<float> gate_up, down, router;  // router [E, H]
};

// y[t] = Σ_j w[t,j] · down_e(act(gate_e x) · up_e x), in double, from explicit per-expert matrices.
static std::vector<double> reference(const std::vector<float>& gu, const std::vector<float>& dn, const float* x,
                                     const int32_t* idx, const float* w, Activation act) {
  std::vector<double> y(size_t(N * H), 0.0);
  for (int64_t t = 0; t < N; ++t)
    for (int j = 0; j < K; ++j) {
      const int64_t e = idx[t * K + j];
      std::vector<double> h(static_cast<size_t>(I));
      for (int64_t r = 0; r < I; ++r) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < H; ++c) {
          g += double(gu[size_t((e * 2 * I + r) * H + c)]) * x[t * H + c];
          u += double(gu[size_t((e * 2 * I + I + r) * H + c)]) * x[t * H + c];
        }
        const double a = act == Activation::Silu ? g / (1 + std::exp(-g))
                                                 : 0.5 * g * (1 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
        h[size_t(r)] = a * u;
      }
      for (int64_t r = 0; r < H; ++r) {
        double s = 0;
        for (int64_t c = 0; c < I; ++c) s += double(dn[size_t((e * H + r) * I + c)]) * h[size_t(c)];
        y[size_t(t * H + r)] += double(w[t * K + j]) * s;
      }
    }
  return y;
}

static double max_rel(const std::vector<float>& got, const std::vector<double>& ref) {
  double m = 0, scale = 1;
  for (double r : ref) scale = std::max(scale, std::abs(r));
  for (size_t i = 0; i < got.size(); ++i) m = std::max(m, std::abs(double(got[i]) - ref[i]));
  return m / scale;
}

static void test_router(ThreadPool& pool, const Master& m, const std::vector<float>& x) {
  const std::string d = tmpdir("router");
  write_dir(d, {{"r.weight", DType::F32, {E, H}, m.router.data(), m.router.size() * 4}}, "{}");
  auto ck = Checkpoint::open(d);
  const QuantConfig qc = QuantConfig::from_config(Json::parse("{}"));
  const std::vector<float> scale = randn(size_t(H), 0.3f), pes = randn(size_t(E), 0.5f);
  for (int mode = 0; mode < 3; ++mode) {  // 0: Qwen renormalised, 1: not renormalised, 2: Gemma 4
    RouterOptions o;
    o.top_k = K;
    o.renormalize = mode != 1;
    if (mode == 2) {
      o.input_rmsnorm = true;
      o.input_eps = 1e-6f;
      o.input_scale = scale;
      o.input_mult = 1.0f / std::sqrt(float(H));
      o.per_expert_scale = pes;
    }
    const MoeRouter r = load_moe_router(*ck, qc, "r", E, H, o);
    std::vector<int32_t> idx(size_t(N * K));
    std::vector<float> w(size_t(N * K));
    moe_route(pool, r, x.data(), N, Precision::Fast, idx.data(), w.data());
    for (int64_t t = 0; t < N; ++t) {
      std::vector<double> xin(x.begin() + t * H, x.begin() + (t + 1) * H);
      if (mode == 2) {
        double ss = 0;
        for (double v : xin) ss += v * v;
        const double inv = 1 / std::sqrt(ss / H + 1e-6);
        for (int64_t i = 0; i < H; ++i) xin[size_t(i)] *= inv * scale[size_t(i)] / std::sqrt(double(H));
      }
      std::vector<double> p(static_cast<size_t>(E));
      double mx = -1e300, sum = 0;
      for (int64_t e = 0; e < E; ++e) {
        for (int64_t i = 0; i < H; ++i) p[size_t(e)] += double(m.router[size_t(e * H + i)]) * xin[size_t(i)];
        mx = std::max(mx, p[size_t(e)]);
      }
      for (double& v : p) sum += (v = std::exp(v - mx));
      for (double& v : p) v /= sum;
      std::vector<int> order(static_cast<size_t>(E));
      for (int e = 0; e < int(E); ++e) order[size_t(e)] = e;
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
      double top = 0;
      for (int j = 0; j < K; ++j) top += p[size_t(order[size_t(j)])];
      for (int j = 0; j < K; ++j) {
        const int e = order[size_t(j)];
        double want = p[size_t(e)] / (o.renormalize ? top : 1.0);
        if (mode == 2) want *= pes[size_t(e)];
        CHECK(idx[size_t(t * K + j)] == e, "router mode %d row %lld slot %d: expert %d, want %d", mode, (long long)t, j,
              idx[size_t(t * K + j)], e);
        CHECK(std::abs(w[size_t(t * K + j)] - want) <= 1e-6 * std::max(1.0, std::abs(want)),
              "router mode %d row %lld slot %d: weight %g, want %g", mode, (long long)t, j, w[size_t(t * K + j)], want);
      }
    }
  }
  RouterOptions too_many;
  too_many.top_k = int(E) + 1;
  CHECK(throws_with([&] { load_moe_router(*ck, qc, "r", E, H, too_many); }, "top_k"), "top_k > E");
  RouterOptions ok;
  ok.top_k = K;
  CHECK(throws_with([&] { load_moe_router(*ck, qc, "r", E + 1, H, ok); }, "module r has shape"), "router shape");
  fs::remove_all(d);
}

// One expert layout: loads it, then checks values, batch invariance and the counters.
static void test_layout(ThreadPool& pool, const std::string& label, const std::string& dir, const std::string& fused,
                        const std::string& split, const std::string& want_layout, const std::vector<float>& gu,
                        const std::vector<float>& dn, const std::vector<float>& x, const std::vector<int32_t>& idx,
                        const std::vector<float>& w, double tol) {
  auto ck = Checkpoint::open(dir);
  const QuantConfig qc = QuantConfig::from_config(ck->config());
  for (Activation act : {Activation::Silu, Activation::GeluTanh}) {
    const MoeExperts ex = load_moe_experts(*ck, qc, fused, split, E, H, I, act);
    CHECK(ex.layout == want_layout, "%s: layout %s, want %s", label.c_str(), ex.layout.c_str(), want_layout.c_str());
    MoeScratch s;
    MoeStats st;
    std::vector<float> y(size_t(N * H));
    moe_experts_forward(pool, ex, x.data(), N, idx.data(), w.data(), K, y.data(), Precision::Exact, s, &st);
    const double err = max_rel(y, reference(gu, dn, x.data(), idx.data(), w.data(), act));
    CHECK(err <= tol, "%s (%s): max rel error %g > %g", label.c_str(), activation_name(act), err, tol);
    std::set<int32_t> distinct(idx.begin(), idx.end());
    size_t bytes = 0;
    for (int32_t e : distinct) bytes += ex.expert_bytes(e);
    CHECK(st.expert_runs == int64_t(distinct.size()) && st.active_experts == st.expert_runs &&
              st.routed_rows == N * K && st.expert_bytes == int64_t(bytes),
          "%s: counters runs %lld active %lld routed %lld bytes %lld (want %zu runs, %zu bytes)", label.c_str(),
          (long long)st.expert_runs, (long long)st.active_experts, (long long)st.routed_rows,
          (long long)st.expert_bytes, distinct.size(), bytes);
    // Bitwise batch invariance: each row alone, and the batch reversed, equal the batch's rows.
    for (Precision p : {Precision::Exact, Precision::Fast}) {
      std::vector<float> yb(static_cast<size_t>(N * H)), one(static_cast<size_t>(H)), yr(static_cast<size_t>(N * H));
      moe_experts_forward(pool, ex, x.data(), N, idx.data(), w.data(), K, yb.data(), p, s);
      std::vector<float> xr(size_t(N * H)), wr(size_t(N * K));
      std::vector<int32_t> ir(size_t(N * K));
      for (int64_t t = 0; t < N; ++t) {
        const int64_t u = N - 1 - t;
        std::memcpy(xr.data() + u * H, x.data() + t * H, size_t(H) * 4);
        std::memcpy(ir.data() + u * K, idx.data() + t * K, size_t(K) * 4);
        std::memcpy(wr.data() + u * K, w.data() + t * K, size_t(K) * 4);
      }
      moe_experts_forward(pool, ex, xr.data(), N, ir.data(), wr.data(), K, yr.data(), p, s);
      for (int64_t t = 0; t < N; ++t) {
        MoeStats solo;
        moe_experts_forward(pool, ex, x.data() + t * H, 1, idx.data() + t * K, w.data() + t * K, K, one.data(), p, s,
                            &solo);
        CHECK(std::memcmp(one.data(), yb.data() + t * H, size_t(H) * 4) == 0, "%s: row %lld alone != in batch",
              label.c_str(), (long long)t);
        CHECK(std::memcmp(yr.data() + (N - 1 - t) * H, yb.data() + t * H, size_t(H) * 4) == 0,
              "%s: row %lld differs in a reversed batch", label.c_str(), (long long)t);
        CHECK(solo.expert_runs == K, "%s: one row ran %lld experts", label.c_str(), (long long)solo.expert_runs);
      }
    }
  }
}

static void test_experts(ThreadPool& pool, const Master& m, const std::vector<float>& x) {
  // Routing with shared experts: rows 0..6 over 6 experts, top-2, distinct per row.
  std::vector<int32_t> idx = {0, 3, 3, 0, 5, 1, 3, 5, 0, 1, 2, 3, 5, 0};
  std::vector<float> w = {0.7f, 0.3f, 0.6f, 0.4f, 0.55f, 0.45f, 0.9f, 0.1f, 0.5f, 0.5f, 0.8f, 0.2f, 0.65f, 0.35f};
  const std::string cfg = "{}";
  // 1. transformers-saved fused (views, no copy).
  const std::string a = tmpdir("saved");
  write_dir(a, {{"l.mlp.experts.gate_up_proj", DType::F32, {E, 2 * I, H}, m.gate_up.data(), m.gate_up.size() * 4},
                {"l.mlp.experts.down_proj", DType::F32, {E, H, I}, m.down.data(), m.down.size() * 4}}, cfg);
  test_layout(pool, "saved fused", a, "l.mlp.experts", "l.mlp.switch_mlp", "fused", m.gate_up, m.down, x, idx, w, 1e-5);
  // 2. hub fused: [E, H, 2I] + [E, I, H]. H == 2I here: only down_proj tells the layouts apart.
  std::vector<float> gu_t(m.gate_up.size()), dn_t(m.down.size());
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t r = 0; r < 2 * I; ++r)
      for (int64_t c = 0; c < H; ++c) gu_t[size_t((e * H + c) * 2 * I + r)] = m.gate_up[size_t((e * 2 * I + r) * H + c)];
    for (int64_t r = 0; r < H; ++r)
      for (int64_t c = 0; c < I; ++c) dn_t[size_t((e * I + c) * H + r)] = m.down[size_t((e * H + r) * I + c)];
  }
  const std::string b = tmpdir("hub");
  write_dir(b, {{"l.mlp.experts.gate_up_proj", DType::F32, {E, H, 2 * I}, gu_t.data(), gu_t.size() * 4},
                {"l.mlp.experts.down_proj", DType::F32, {E, I, H}, dn_t.data(), dn_t.size() * 4}}, cfg);
  test_layout(pool, "hub fused", b, "l.mlp.experts", "", "fused-hub", m.gate_up, m.down, x, idx, w, 1e-5);
  // 3. one tensor per expert (Qwen3-MoE hub).
  const std::string c = tmpdir("per_expert");
  std::vector<TensorData> pe;
  for (int64_t e = 0; e < E; ++e) {
    const std::string p = "l.mlp.experts." + std::to_string(e);
    pe.push_back({p + ".gate_proj.weight", DType::F32, {I, H}, m.gate_up.data() + e * 2 * I * H, size_t(I * H) * 4});
    pe.push_back({p + ".up_proj.weight", DType::F32, {I, H}, m.gate_up.data() + (e * 2 * I + I) * H, size_t(I * H) * 4});
    pe.push_back({p + ".down_proj.weight", DType::F32, {H, I}, m.down.data() + e * H * I, size_t(H * I) * 4});
  }
  write_dir(c, pe, cfg);
  test_layout(pool, "per-expert", c, "l.mlp.experts", "l.mlp.switch_mlp", "per-expert", m.gate_up, m.down, x, idx, w,
              1e-5);
  // 4. MLX SwitchLinear, 4-bit g32, f32 scales; the reference runs on the dequantized weights.
  std::vector<float> gate(size_t(E * I * H)), up(size_t(E * I * H));
  for (int64_t e = 0; e < E; ++e) {
    std::memcpy(gate.data() + e * I * H, m.gate_up.data() + e * 2 * I * H, size_t(I * H) * 4);
    std::memcpy(up.data() + e * I * H, m.gate_up.data() + (e * 2 * I + I) * H, size_t(I * H) * 4);
  }
  struct Q {
    std::vector<uint32_t> packed;
    std::vector<float> scales, biases, deq;
  };
  auto quant = [](const std::vector<float>& wt, int64_t rows, int64_t cols) {
    Q q;
    quantize_affine(wt.data(), rows, cols, 32, 4, q.packed, q.scales, q.biases);
    q.deq.resize(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      dequantize_affine_row(q.packed.data() + r * cols * 4 / 32, q.scales.data() + r * cols / 32,
                            q.biases.data() + r * cols / 32, cols, 32, 4, q.deq.data() + r * cols);
    return q;
  };
  const Q qg = quant(gate, E * I, H), qu = quant(up, E * I, H), qd = quant(m.down, E * H, I);
  const std::string d = tmpdir("switch");
  std::vector<TensorData> sw;
  auto add = [&](const std::string& name, const Q& q, int64_t out, int64_t in) {
    sw.push_back({name + ".weight", DType::U32, {E, out, in * 4 / 32}, q.packed.data(), q.packed.size() * 4});
    sw.push_back({name + ".scales", DType::F32, {E, out, in / 32}, q.scales.data(), q.scales.size() * 4});
    sw.push_back({name + ".biases", DType::F32, {E, out, in / 32}, q.biases.data(), q.biases.size() * 4});
  };
  add("l.mlp.switch_mlp.gate_proj", qg, I, H);
  add("l.mlp.switch_mlp.up_proj", qu, I, H);
  add("l.mlp.switch_mlp.down_proj", qd, H, I);
  write_dir(d, sw, R"({"quantization": {"group_size": 32, "bits": 4}})");
  std::vector<float> gu_q(m.gate_up.size());
  for (int64_t e = 0; e < E; ++e) {
    std::memcpy(gu_q.data() + e * 2 * I * H, qg.deq.data() + e * I * H, size_t(I * H) * 4);
    std::memcpy(gu_q.data() + (e * 2 * I + I) * H, qu.deq.data() + e * I * H, size_t(I * H) * 4);
  }
  test_layout(pool, "switch 4-bit", d, "l.mlp.experts", "l.mlp.switch_mlp", "switch", gu_q, qd.deq, x, idx, w, 1e-5);
  {
    auto ck = Checkpoint::open(d);
    const QuantConfig qc = QuantConfig::from_config(ck->config());
    const MoeExperts ex = load_moe_experts(*ck, qc, "l.mlp.experts", "l.mlp.switch_mlp", E, H, I, Activation::Silu);
    const size_t want = 3 * size_t(I * H / 2 + 2 * (I * H / 32) * 4);  // codes + f32 scales and biases
    CHECK(ex.expert_bytes(0) == want, "switch 4-bit: expert bytes %zu, want %zu", ex.expert_bytes(0), want);
  }
  // Errors: a bad index, shapes matching neither fused layout, no experts at all.
  {
    auto ck = Checkpoint::open(a);
    const QuantConfig qc = QuantConfig::from_config(ck->config());
    const MoeExperts ex = load_moe_experts(*ck, qc, "l.mlp.experts", "", E, H, I, Activation::Silu);
    MoeScratch s;
    std::vector<int32_t> bad = idx;
    bad[3] = int32_t(E);
    std::vector<float> y(size_t(N * H));
    CHECK(throws_with([&] { moe_experts_forward(pool, ex, x.data(), N, bad.data(), w.data(), K, y.data(), Precision::Exact, s); },
                      "expert index 6 outside [0, 6)"),
          "bad expert index");
    CHECK(throws_with([&] { load_moe_experts(*ck, qc, "l.mlp.experts", "", E, H, I / 2, Activation::Silu); },
                      "l.mlp.experts.gate_up_proj [6, 64, 64] and l.mlp.experts.down_proj"),
          "fused shapes matching no layout");
    CHECK(throws_with([&] { load_moe_experts(*ck, qc, "nope", "nope2", E, H, I, Activation::Silu); },
                      "missing expert tensors"),
          "no experts");
  }
  for (const std::string& p : {a, b, c, d}) fs::remove_all(p);
}

int main() {
  ThreadPool pool(2);
  Master m;
  m.gate_up = randn(size_t(E * 2 * I * H), 0.2f);
  m.down = randn(size_t(E * H * I), 0.3f);
  m.router = randn(size_t(E * H), 0.3f);
  const std::vector<float> x = randn(size_t(N * H), 1.0f);
  test_router(pool, m, x);
  test_experts(pool, m, x);
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}
