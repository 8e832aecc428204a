// Runs every op of backend/ops.h on a reference backend (the CPU) and a backend under test with the same
// random inputs, and compares what each leaves in its buffers: the op-by-op check a new backend (CUDA) must
// pass. Shapes are small but odd (strides past the row width, GQA, empty segments, one >64-query block), and
// every weight format the towers load is covered (dense f32 packed / unpacked, bf16, f16, MLX affine 4 and
// 8-bit). Header-only so a .cu test can include it: compare_backends(cpu, cuda, tolerances, report).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>
#include "backend/ops.h"
#include "cpu/gemm_packed.h"
#include "quant/quantize.h"
#include "tensor/dtype.h"

namespace rapid::ops_compare {

using ops::Backend;
using ops::Buf;
using ops::Taps;
using ops::VAct;

// Relative error bounds (max |a - b| / max |ref|) per kind of op.
struct Tolerances {
  double exact = 1e-5;  // f32 arithmetic in another order (elementwise ops, norms, Exact linear/attention)
  double fast = 3e-2;   // Precision::Fast linear/attention (bf16 tensor cores on CUDA, int8 activations on CPU)
};

// Called once per compared output: ok, a label naming op, shape and format, and the measured relative error.
using Report = std::function<void(bool ok, const std::string& what, double rel_err)>;

namespace detail {

// Host storage behind the Weight views the ops read (a backend may cache device copies by address, so these
// outlive both backends' use of them: the caller's Fixture lives for the whole comparison).
struct Fixture {
  std::vector<std::vector<float>> f32;
  std::vector<std::vector<uint16_t>> u16;
  std::vector<std::vector<uint32_t>> u32;
  std::vector<std::unique_ptr<Linear>> linears;
  std::vector<std::unique_ptr<Weight>> tables;
  std::mt19937 rng{12345};

  std::vector<float> randn(int64_t n, float scale = 1.0f) {
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = nd(rng);
    return v;
  }

  // A [out, in] linear in `fmt`: "f32", "f32-packed", "bf16", "bf16-packed", "f16", "q4", "q8".
  const Linear& linear(const std::string& fmt, int64_t out, int64_t in, bool bias) {
    auto l = std::make_unique<Linear>();
    Weight& w = l->w;
    w.out = out;
    w.in = in;
    w.name = "compare." + fmt;
    std::vector<float> v = randn(out * in, 1.0f / std::sqrt(float(in)));
    if (fmt == "q4" || fmt == "q8") {
      const int bits = fmt == "q4" ? 4 : 8, group = 64;
      std::vector<uint32_t> packed;
      std::vector<float> scales, biases;
      quantize_affine(v.data(), out, in, group, bits, packed, scales, biases);
      u32.push_back(std::move(packed));
      f32.push_back(std::move(scales));
      f32.push_back(std::move(biases));
      w.kind = WeightKind::Affine;
      w.bits = bits;
      w.group = group;
      w.data = u32.back().data();
      w.scales = f32[f32.size() - 2].data();
      w.biases = f32.back().data();
    } else if (fmt.rfind("bf16", 0) == 0 || fmt == "f16") {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = fmt == "f16" ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
      u16.push_back(std::move(h));
      w.dtype = fmt == "f16" ? DType::F16 : DType::BF16;
      w.data = u16.back().data();
    } else {
      f32.push_back(std::move(v));
      w.data = f32.back().data();
    }
    if (fmt.find("packed") != std::string::npos) w.packed = pack_dense(w);
    if (bias) l->bias = randn(out);
    linears.push_back(std::move(l));
    return *linears.back();
  }

  const Weight& table(int64_t rows, int64_t width, bool bf16) {
    auto w = std::make_unique<Weight>();
    w->out = rows;
    w->in = width;
    w->name = bf16 ? "compare.table.bf16" : "compare.table.f32";
    std::vector<float> v = randn(rows * width);
    if (bf16) {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
      u16.push_back(std::move(h));
      w->dtype = DType::BF16;
      w->data = u16.back().data();
    } else {
      f32.push_back(std::move(v));
      w->data = f32.back().data();
    }
    tables.push_back(std::move(w));
    return *tables.back();
  }
};

inline double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return INFINITY;
  double md = 0, mr = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(ref[i]));
    if (std::isnan(d)) return INFINITY;
    md = std::max(md, d);
    mr = std::max(mr, std::fabs(double(ref[i])));
  }
  return md / mr;
}

// One op on both backends: `init` gives the host contents of each buffer, `run` calls the op on a backend with
// its buffers; then every buffer is downloaded and compared (outputs, and inputs that must stay as they were).
struct Pair {
  Backend& ref;
  Backend& dut;
  const Report& report;

  void check(const std::string& what, const std::vector<std::vector<float>>& init, double tol,
             const std::function<void(Backend&, std::vector<Buf>&)>& run) {
    std::vector<float> out[2][8];
    Backend* bes[2] = {&ref, &dut};
    for (int b = 0; b < 2; ++b) {
      std::vector<Buf> bufs;
      for (const std::vector<float>& h : init) bufs.push_back(bes[b]->upload(h.data(), int64_t(h.size())));
      run(*bes[b], bufs);
      for (size_t i = 0; i < bufs.size() && i < 8; ++i) {
        out[b][i].resize(size_t(bufs[i].size()));
        bes[b]->download(bufs[i].data(), bufs[i].size(), out[b][i].data());
      }
    }
    double err = 0;
    for (size_t i = 0; i < init.size() && i < 8; ++i) err = std::max(err, rel_err(out[1][i], out[0][i]));
    report(err <= tol, what, err);
  }
};

}  // namespace detail

// Compares `dut` against `ref` op by op; report() is called for every output compared.
inline void compare_backends(Backend& ref, Backend& dut, const Tolerances& tol, const Report& report) {
  detail::Fixture fx;
  detail::Pair pr{ref, dut, report};
  using V = std::vector<float>;

  // linear: every format, with and without bias, input/output strides, both precisions.
  for (const char* fmt : {"f32", "f32-packed", "bf16", "bf16-packed", "f16", "q4", "q8"})
    for (Precision p : {Precision::Exact, Precision::Fast}) {
      const int64_t n = 37, in = 128, out = 72, ldx = in + 8, ldy = out + 5;
      const Linear& l = fx.linear(fmt, out, in, std::string(fmt) != "f16");
      // Dense weights under Fast may use bf16 tensor cores on a GPU: the loose bound applies to every Fast run.
      pr.check(std::string("linear ") + fmt + (p == Precision::Fast ? " Fast" : " Exact") + " [37x128 -> 72, strided]",
               {fx.randn(n * ldx), V(size_t(n * ldy), 0.0f)}, p == Precision::Fast ? tol.fast : tol.exact,
               [&](Backend& be, std::vector<Buf>& b) { be.linear(l, b[0].data(), ldx, b[1].data(), ldy, n, p); });
    }

  // linear_epilogue: a tower's dense linear with bias, then an activation or onto a residual.
  for (Precision p : {Precision::Exact, Precision::Fast})
    for (int e = 0; e < 3; ++e) {
      const int64_t n = 37, in = 128, out = 72;
      const Linear& l = fx.linear("bf16", out, in, true);
      Backend::LinearEpilogue ep;
      if (e == 0) ep.act = VAct::GeluTanh;
      if (e == 1) ep.act = VAct::QuickGelu;
      if (e == 2) ep.accumulate = true;
      pr.check(std::string("linear_epilogue bf16") + (p == Precision::Fast ? " Fast " : " Exact ") +
                   (e == 0 ? "gelu_tanh" : e == 1 ? "quick_gelu" : "residual") + " [37x128 -> 72]",
               {fx.randn(n * in), fx.randn(n * out)}, p == Precision::Fast ? tol.fast : tol.exact,
               [&](Backend& be, std::vector<Buf>& b) { be.linear_epilogue(l, b[0].data(), b[1].data(), n, p, ep); });
    }

  // gated_mlp: a bias-free decoder MLP (4-bit, as Gemma 4) and a tower's with biases (f32), in place and not; the
  // scratch is the backend's own (only the output is compared).
  for (const char* fmt : {"f32", "q4"})
    for (Precision p : {Precision::Exact, Precision::Fast})
      for (VAct a : {VAct::Silu, VAct::GeluTanh, VAct::GeluErf}) {
        const int64_t n = 37, hidden = 128, ffn = 192;
        const bool bias = std::string(fmt) == "f32";
        const Linear& gate = fx.linear(fmt, ffn, hidden, bias);
        const Linear& up = fx.linear(fmt, ffn, hidden, bias);
        const Linear& down = fx.linear(fmt, hidden, ffn, bias);
        const bool in_place = a == VAct::Silu;
        pr.check(std::string("gated_mlp ") + fmt + (p == Precision::Fast ? " Fast " : " Exact ") +
                     (a == VAct::Silu ? "silu, in place" : a == VAct::GeluTanh ? "gelu_tanh" : "gelu_erf") +
                     " [37x128 -> 192 -> 128]",
                 {fx.randn(n * hidden), V(size_t(n * hidden), 0.0f)}, p == Precision::Fast ? tol.fast : tol.exact,
                 [&](Backend& be, std::vector<Buf>& b) {
                   Buf g = be.alloc(n * ffn), u = be.alloc(n * ffn);
                   float* y = in_place ? b[0].data() : b[1].data();
                   be.gated_mlp(gate, up, down, b[0].data(), y, g.data(), u.data(), n, a, p);
                 });
      }

  // norms
  {
    const int64_t rows = 29, dim = 96;
    NormWeight nw;
    nw.w = fx.randn(dim);
    nw.eps = 1e-6f;
    pr.check("rms_norm [29x96]", {fx.randn(rows * dim, 3.0f), V(size_t(rows * dim))}, tol.exact,
             [&](Backend& be, std::vector<Buf>& b) { be.rms_norm(b[0].data(), b[1].data(), rows, nw); });
    pr.check("rms_norm in place [29x96]", {fx.randn(rows * dim, 3.0f)}, tol.exact,
             [&](Backend& be, std::vector<Buf>& b) { be.rms_norm(b[0].data(), b[0].data(), rows, nw); });
    NormWeight hw, none;
    hw.w = fx.randn(32);
    none.eps = 1e-5f;
    const int64_t ld = 3 * 32 + 7;
    for (const NormWeight* w : {&hw, &none})
      pr.check(std::string("rms_norm_heads 3x32 ld 103 ") + (w->w.empty() ? "no weight" : "weight"),
               {fx.randn(rows * ld, 2.0f)}, tol.exact,
               [&](Backend& be, std::vector<Buf>& b) { be.rms_norm_heads(b[0].data(), ld, rows, 3, 32, *w); });
    LayerNormW ln;
    ln.w = fx.randn(dim);
    ln.b = fx.randn(dim);
    pr.check("layer_norm [29x96]", {fx.randn(rows * dim, 3.0f), V(size_t(rows * dim))}, tol.exact,
             [&](Backend& be, std::vector<Buf>& b) { be.layer_norm(b[0].data(), b[1].data(), rows, ln); });
  }

  // pointwise
  {
    const int64_t rows = 33, width = 70;
    const char* names[] = {"silu", "gelu_tanh", "gelu_erf", "quick_gelu"};
    for (VAct a : {VAct::Silu, VAct::GeluTanh, VAct::GeluErf, VAct::QuickGelu}) {
      pr.check(std::string("act ") + names[int(a)], {fx.randn(rows * width, 3.0f)}, tol.exact,
               [&](Backend& be, std::vector<Buf>& b) { be.act(b[0].data(), rows, width, a); });
      pr.check(std::string("act_mul ") + names[int(a)], {fx.randn(rows * width, 3.0f), fx.randn(rows * width)},
               tol.exact, [&](Backend& be, std::vector<Buf>& b) { be.act_mul(b[0].data(), b[1].data(), rows, width, a); });
    }
    pr.check("add", {fx.randn(rows * width), fx.randn(rows * width)}, tol.exact,
             [&](Backend& be, std::vector<Buf>& b) { be.add(b[0].data(), b[1].data(), rows * width); });
    pr.check("scale_shift", {fx.randn(rows * width)}, tol.exact,
             [&](Backend& be, std::vector<Buf>& b) { be.scale_shift(b[0].data(), rows * width, 0.5f, 2.0f); });
    const V sub = fx.randn(width), mul = fx.randn(width);
    pr.check("scale_shift_cols", {fx.randn(rows * width)}, tol.exact,
             [&](Backend& be, std::vector<Buf>& b) { be.scale_shift_cols(b[0].data(), rows, sub, mul); });
    pr.check("clamp strided", {fx.randn(rows * 80), V(size_t(rows * 75), 7.0f)}, tol.exact,
             [&](Backend& be, std::vector<Buf>& b) { be.clamp(b[0].data(), 80, b[1].data(), 75, rows, width, -0.3f, 0.6f); });
    pr.check("clamp in place, one side", {fx.randn(rows * 80)}, tol.exact, [&](Backend& be, std::vector<Buf>& b) {
      be.clamp(b[0].data(), 80, b[0].data(), 80, rows, width, -INFINITY, 0.6f);
    });
  }

  // data movement
  {
    const int64_t rows = 40, width = 24;
    std::vector<int32_t> perm(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) perm[size_t(i)] = int32_t(i);
    std::shuffle(perm.begin(), perm.end(), fx.rng);
    pr.check("gather_rows strided", {fx.randn(rows * 30), V(size_t(rows * 27), 9.0f)}, 0.0,
             [&](Backend& be, std::vector<Buf>& b) { be.gather_rows(b[0].data(), 30, b[1].data(), 27, width, perm); });
    pr.check("scatter_rows strided", {fx.randn(rows * 30), V(size_t(rows * 27), 9.0f)}, 0.0,
             [&](Backend& be, std::vector<Buf>& b) { be.scatter_rows(b[0].data(), 30, b[1].data(), 27, width, perm); });
    pr.check("transpose [5, 7, 11]", {fx.randn(5 * 7 * 11), V(5 * 7 * 11)}, 0.0,
             [&](Backend& be, std::vector<Buf>& b) { be.transpose(b[0].data(), b[1].data(), 5, 7, 11); });
    Taps avg, wsum, bil;
    avg.k = wsum.k = 4;
    bil.k = 4;
    avg.div = 4.0f;
    for (int64_t i = 0; i < 10 * 4; ++i) avg.idx.push_back(int32_t(fx.rng() % uint32_t(rows)));
    wsum.idx = avg.idx;
    wsum.w.assign(wsum.idx.size(), 1.0f / 9.0f);
    pr.check("pool_rows average", {fx.randn(rows * 30), V(size_t(10 * 27), 5.0f)}, tol.exact,
             [&](Backend& be, std::vector<Buf>& b) { be.pool_rows(b[0].data(), 30, b[1].data(), 27, width, avg); });
    pr.check("pool_rows weighted", {fx.randn(rows * 30), V(size_t(10 * 27), 5.0f)}, tol.exact,
             [&](Backend& be, std::vector<Buf>& b) { be.pool_rows(b[0].data(), 30, b[1].data(), 27, width, wsum); });
    for (int64_t i = 0; i < 12 * 4; ++i) bil.idx.push_back(int32_t(fx.rng() % 50u));
    bil.w = fx.randn(int64_t(bil.idx.size()));
    for (bool bf16 : {false, true}) {
      const Weight& t = fx.table(50, width, bf16);
      pr.check(std::string("add_table_rows 4 taps ") + (bf16 ? "bf16" : "f32"), {fx.randn(12 * 31)}, tol.exact,
               [&](Backend& be, std::vector<Buf>& b) { be.add_table_rows(t, bil, b[0].data(), 31); });
    }
  }

  // RoPE: whole head over a fused qkv row, and Gemma 4's per-half 2-D form.
  {
    const int64_t n = 70, hd = 32, heads = 4, ld = 3 * heads * hd;
    auto angles = [&](int64_t half) {
      V c(size_t(n * half)), s(size_t(n * half));
      for (size_t i = 0; i < c.size(); ++i) c[i] = std::cos(float(i % 97) * 0.37f), s[i] = std::sin(float(i % 97) * 0.37f);
      return std::make_pair(c, s);
    };
    const auto [c2, s2] = angles(hd / 2);
    pr.check("rope whole head, 4 heads of 32, ld 384", {fx.randn(n * ld), c2, s2}, tol.exact,
             [&](Backend& be, std::vector<Buf>& b) {
               be.rope(b[0].data(), ld, n, int(heads), hd, int(hd / 2), b[1].data(), b[2].data());
             });
    const auto [c4, s4] = angles(hd / 4);
    V cy = c4;
    for (float& v : cy) v = -v;
    pr.check("rope 2-D halves (Gemma 4)", {fx.randn(n * heads * hd), c4, s4, cy, s4}, tol.exact,
             [&](Backend& be, std::vector<Buf>& b) {
               be.rope(b[0].data(), heads * hd, n, int(heads), hd, int(hd / 4), b[1].data(), b[2].data());
               be.rope(b[0].data() + hd / 2, heads * hd, n, int(heads), hd, int(hd / 4), b[3].data(), b[4].data());
             });
  }

  // attention: MHA over a fused qkv buffer, and GQA with separate strides, an empty segment and a long one.
  for (Precision p : {Precision::Exact, Precision::Fast}) {
    const char* pn = p == Precision::Fast ? " Fast" : " Exact";
    {
      const int heads = 4, hd = 16;
      const int64_t hidden = heads * hd, ld = 3 * hidden;
      const std::vector<int64_t> cu{0, 16, 32, 48, 64};  // four windows
      const int64_t n = cu.back();
      pr.check(std::string("attention MHA fused qkv, 4 windows of 16") + pn, {fx.randn(n * ld), V(size_t(n * hidden))},
               p == Precision::Fast ? tol.fast : tol.exact, [&](Backend& be, std::vector<Buf>& b) {
                 float* q = b[0].data();
                 be.attention(q, ld, q + hidden, q + 2 * hidden, ld, b[1].data(), hidden, heads, heads, hd,
                              1.0f / std::sqrt(float(hd)), cu, p);
               });
    }
    {
      const int heads = 6, kv = 2, hd = 20;
      const std::vector<int64_t> cu{0, 17, 17, 90, 101};
      const int64_t n = cu.back(), ldq = heads * hd + 3, ldkv = kv * hd + 7, ldo = heads * hd + 1;
      pr.check(std::string("attention GQA 6/2, strided, empty segment") + pn,
               {fx.randn(n * ldq), fx.randn(n * ldkv), fx.randn(n * ldkv), V(size_t(n * ldo), 3.0f)},
               p == Precision::Fast ? tol.fast : tol.exact, [&](Backend& be, std::vector<Buf>& b) {
                 be.attention(b[0].data(), ldq, b[1].data(), b[2].data(), ldkv, b[3].data(), ldo, heads, kv, hd, 1.0f,
                              cu, p);
               });
    }
  }
}

}  // namespace rapid::ops_compare
