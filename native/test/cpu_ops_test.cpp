// The CPU backend's ops (cpu/cpu_ops.h) that are more than a wrapper of an existing kernel, each against a
// naive loop: weighted pooling and position-table taps, gather / scatter / transpose, per-head RMSNorm over
// strided heads (with and without weight), rotate-half RoPE with a head stride (whole head and Gemma 4's
// per-half 2-D variant), segment attention with GQA and separate strides; plus Buf ownership, the pointwise
// ops and the errors bad metadata gets. Strided outputs must leave the gaps between rows untouched. Also runs
// backend_ops_compare.h (the check a GPU backend must pass against the CPU) between 4 threads and 1, and the
// decoder ops (embed_rows, softcap, write_kv's KV-sharing guard; paged attention is layers/attention's own), and
// gated_mlp's fused pass bitwise against the ops it replaces.
// Build and run: test/native/cpu-ops.test.ts. Prints "N passed, M failed"; exits 1 on a failure.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>
#include "backend_ops_compare.h"
#include "check.h"
#include "cpu/cpu_ops.h"
#include "cpu/matmul.h"
#include "kv/kv_pool.h"
#include "tensor/dtype.h"

using namespace rapid;
using ops::Buf;

namespace {

std::mt19937 rng(7);

std::vector<float> randn(int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

std::vector<float> down(ops::Backend& be, const Buf& b) {
  std::vector<float> v(static_cast<size_t>(b.size()));
  be.download(b.data(), b.size(), v.data());
  return v;
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double md = 0, mb = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    md = std::max(md, std::fabs(double(a[i]) - double(b[i])));
    mb = std::max(mb, std::fabs(double(b[i])));
  }
  return a.size() == b.size() ? md / mb : 1e30;
}

void test_buffers(ops::Backend& be) {
  Buf a = be.alloc(1000);
  const std::vector<float> z = down(be, a);
  CHECK(std::all_of(z.begin(), z.end(), [](float x) { return x == 0.0f; }), "alloc is not zero-filled");
  const std::vector<float> h = randn(1000);
  Buf b = be.upload(h.data(), 1000);
  CHECK(down(be, b) == h, "upload/download round trip differs");
  float* p = b.data();
  Buf c = std::move(b);
  CHECK(c.data() == p && c.size() == 1000 && b.data() == nullptr && b.size() == 0, "move does not transfer");
  a = std::move(c);
  CHECK(a.data() == p && c.data() == nullptr, "move assignment does not transfer");
  CHECK(be.alloc(0).data() == nullptr, "alloc(0) gives memory");
}

void test_pointwise(ops::Backend& be) {
  const int64_t rows = 37, width = 53, ld = 61;
  const std::vector<float> hx = randn(rows * ld);
  Buf x = be.upload(hx.data(), rows * ld);
  Buf y = be.upload(hx.data(), rows * ld);
  be.clamp(x.data(), ld, y.data(), ld, rows, width, -0.5f, 0.25f);
  std::vector<float> want = hx;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) want[size_t(r * ld + c)] = std::clamp(hx[size_t(r * ld + c)], -0.5f, 0.25f);
  CHECK(down(be, y) == want, "clamp (strided) differs from the loop or touches the row gaps");

  be.scale_shift(x.data(), rows * ld, 0.5f, 2.0f);
  std::vector<float> w2 = hx;
  for (float& v : w2) v = 2.0f * (v - 0.5f);
  CHECK(down(be, x) == w2, "scale_shift differs from 2(x - 0.5)");

  const std::vector<float> sub = randn(width), mul = randn(width);
  Buf m = be.upload(hx.data(), rows * width);
  be.scale_shift_cols(m.data(), rows, sub, mul);
  std::vector<float> w3(hx.begin(), hx.begin() + rows * width);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) w3[size_t(r * width + c)] = (w3[size_t(r * width + c)] - sub[size_t(c)]) * mul[size_t(c)];
  CHECK(down(be, m) == w3, "scale_shift_cols differs from the loop");
}

void test_movement(ops::Backend& be) {
  const int64_t rows = 50, width = 24, ldx = 30, ldy = 27;
  const std::vector<float> hx = randn(rows * ldx);
  Buf x = be.upload(hx.data(), rows * ldx);
  std::vector<int32_t> perm(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) perm[size_t(i)] = int32_t(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  const std::vector<float> fill(size_t(rows * ldy), 9.0f);
  Buf g = be.upload(fill.data(), rows * ldy);
  be.gather_rows(x.data(), ldx, g.data(), ldy, width, perm);
  std::vector<float> want = fill;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < width; ++c) want[size_t(i * ldy + c)] = hx[size_t(perm[size_t(i)] * ldx + c)];
  CHECK(down(be, g) == want, "gather_rows differs from the loop or touches the row gaps");
  Buf s = be.upload(hx.data(), rows * ldx);
  be.scatter_rows(g.data(), ldy, s.data(), ldx, width, perm);  // undoes the gather
  CHECK(down(be, s) == hx, "scatter_rows does not undo gather_rows with the same indices");

  const int64_t batch = 5, r = 7, c = 11;
  const std::vector<float> ht = randn(batch * r * c);
  Buf t = be.upload(ht.data(), batch * r * c), tt = be.alloc(batch * r * c);
  be.transpose(t.data(), tt.data(), batch, r, c);
  std::vector<float> wt(ht.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) wt[size_t(b * r * c + j * r + i)] = ht[size_t(b * r * c + i * c + j)];
  CHECK(down(be, tt) == wt, "transpose differs from the loop");
}

void test_taps(ops::Backend& be) {
  // Average pooling (plain sum / div) and weighted pooling over a 6x6 grid in 2x2 groups, strided.
  const int64_t side = 6, k = 2, width = 40, ldx = 44, ldy = 41, out_side = side / k;
  const std::vector<float> hx = randn(side * side * ldx);
  Buf x = be.upload(hx.data(), side * side * ldx);
  for (bool weighted : {false, true}) {
    ops::Taps t;
    t.k = int(k * k);
    for (int64_t ty = 0; ty < out_side; ++ty)
      for (int64_t tx = 0; tx < out_side; ++tx)
        for (int64_t a = 0; a < k; ++a)
          for (int64_t b = 0; b < k; ++b) t.idx.push_back(int32_t((ty * k + a) * side + tx * k + b));
    if (weighted) t.w = randn(int64_t(t.idx.size()));
    else t.div = float(k * k);
    const int64_t n_out = out_side * out_side;
    std::vector<float> want(size_t(n_out * ldy), 5.0f);
    for (int64_t i = 0; i < n_out; ++i)
      for (int64_t d = 0; d < width; ++d) {
        float acc = 0.0f;
        for (int j = 0; j < t.k; ++j) {
          const float v = hx[size_t(t.idx[size_t(i * t.k + j)] * ldx + d)];
          acc += weighted ? v * t.w[size_t(i * t.k + j)] : v;
        }
        want[size_t(i * ldy + d)] = weighted ? acc : acc / t.div;
      }
    const std::vector<float> fill(want.size(), 5.0f);
    Buf y = be.upload(fill.data(), int64_t(fill.size()));
    be.pool_rows(x.data(), ldx, y.data(), ldy, width, t);
    // The compiler may contract w*x + acc into an FMA in one loop and not the other: compare to 1e-6.
    const std::vector<float> got = down(be, y);
    CHECK(max_rel(got, want) < 1e-6, "pool_rows (%s) rel err %.2e", weighted ? "weighted" : "average",
          max_rel(got, want));
    bool gaps = true;
    for (size_t i = 0; i < got.size(); ++i) gaps = gaps && (int64_t(i) % ldy < width || got[i] == 5.0f);
    CHECK(gaps, "pool_rows touched the gap after the rows");
  }

  // Position-table taps from an f32 and a bf16 table (bilinear-style 4 weighted taps, and plain 2 taps).
  const int64_t trows = 20, n = 9, ld = 45;
  const std::vector<float> tab = randn(trows * width);
  std::vector<uint16_t> tab16(tab.size());
  for (size_t i = 0; i < tab.size(); ++i) tab16[i] = f32_to_bf16(tab[i]);
  for (bool bf16 : {false, true}) {
    Weight w;
    w.out = trows;
    w.in = width;
    w.name = "table";
    if (bf16) w.dtype = DType::BF16, w.data = tab16.data();
    else w.data = tab.data();
    for (int taps : {2, 4}) {
      ops::Taps t;
      t.k = taps;
      std::uniform_int_distribution<int32_t> pick(0, int32_t(trows - 1));
      for (int64_t i = 0; i < n * taps; ++i) t.idx.push_back(pick(rng));
      if (taps == 4) t.w = randn(n * taps);
      const std::vector<float> hb = randn(n * ld);
      Buf xb = be.upload(hb.data(), n * ld);
      be.add_table_rows(w, t, xb.data(), ld);
      std::vector<float> want = hb;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t d = 0; d < width; ++d) {
          float acc = 0.0f;
          for (int j = 0; j < taps; ++j) {
            const size_t tap = size_t(i * taps + j);
            const size_t e = size_t(t.idx[tap] * width + d);
            const float v = bf16 ? bf16_to_f32(tab16[e]) : tab[e];
            acc += t.w.empty() ? v : v * t.w[tap];
          }
          want[size_t(i * ld + d)] += acc;
        }
      CHECK(max_rel(down(be, xb), want) < 1e-6, "add_table_rows (%s table, %d taps) rel err %.2e",
            bf16 ? "bf16" : "f32", taps, max_rel(down(be, xb), want));
    }
  }
  ops::Taps bad;
  bad.k = 3;
  bad.idx = {0, 1};
  CHECK(throws_with([&] { be.pool_rows(x.data(), ldx, x.data(), ldx, width, bad); }, "taps"),
        "pool_rows accepted idx not a multiple of k");
  Weight w;
  w.out = 4;
  w.in = width;
  w.data = tab.data();
  w.name = "pos";
  ops::Taps far;
  far.idx = {4};
  CHECK(throws_with([&] { be.add_table_rows(w, far, x.data(), ldx); }, "row 4 outside pos"),
        "add_table_rows accepted a row past the table");
}

void test_head_norm(ops::Backend& be) {
  const int64_t n = 13, heads = 3, hd = 16, ld = heads * hd + 5;
  const std::vector<float> hx = randn(n * ld, 3.0f);
  NormWeight w;
  w.w = randn(hd);
  w.eps = 1e-6f;
  NormWeight none;
  none.eps = 1e-5f;
  for (const NormWeight* nw : {&w, &none}) {
    Buf x = be.upload(hx.data(), n * ld);
    be.rms_norm_heads(x.data(), ld, n, int(heads), int(hd), *nw);
    std::vector<float> want = hx;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        float* u = want.data() + t * ld + h * hd;
        double ss = 0;
        for (int64_t i = 0; i < hd; ++i) ss += double(u[i]) * double(u[i]);
        const double inv = 1.0 / std::sqrt(ss / double(hd) + double(nw->eps));
        for (int64_t i = 0; i < hd; ++i) u[i] = float(double(u[i]) * inv * (nw->w.empty() ? 1.0 : nw->w[size_t(i)]));
      }
    const std::vector<float> got = down(be, x);
    CHECK(max_rel(got, want) < 1e-6, "rms_norm_heads (%s) rel err %.2e", nw->w.empty() ? "no weight" : "weight",
          max_rel(got, want));
    bool gaps = true;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = heads * hd; c < ld; ++c) gaps = gaps && got[size_t(t * ld + c)] == hx[size_t(t * ld + c)];
    CHECK(gaps, "rms_norm_heads touched the gap after the heads");
  }
  Buf x = be.upload(hx.data(), n * ld);
  CHECK(throws_with([&] { be.rms_norm_heads(x.data(), ld, n, int(heads), int(hd) + 1, w); }, "head_dim"),
        "rms_norm_heads accepted a weight of the wrong width");
}

// (u[j], u[j+half]) rotated by table row t for j < half, on every head of row t.
void naive_rope(std::vector<float>& x, int64_t ld, int64_t n, int heads, int64_t stride, int64_t off, int half,
                const std::vector<float>& c, const std::vector<float>& s) {
  for (int64_t t = 0; t < n; ++t)
    for (int h = 0; h < heads; ++h) {
      float* u = x.data() + t * ld + h * stride + off;
      for (int j = 0; j < half; ++j) {
        const float a = u[j], b = u[j + half], cs = c[size_t(t * half + j)], sn = s[size_t(t * half + j)];
        u[j] = a * cs - b * sn;
        u[j + half] = b * cs + a * sn;
      }
    }
}

void test_rope(ops::Backend& be) {
  const int64_t n = 70, hd = 32;  // n >= 64: the pool splits the rows
  const int heads = 4;
  const int64_t ld = 3 * heads * hd;  // q of a fused [n, 3, heads, hd]
  const std::vector<float> hx = randn(n * ld);
  auto table = [&](int half, std::vector<float>& c, std::vector<float>& s) {
    c.resize(size_t(n * half));
    s.resize(size_t(n * half));
    for (size_t i = 0; i < c.size(); ++i) {
      const float a = float(i % 97) * 0.37f;
      c[i] = std::cos(a), s[i] = std::sin(a);
    }
  };
  // Whole head: pairs (j, j + hd/2).
  std::vector<float> c, s;
  table(int(hd / 2), c, s);
  Buf bc = be.upload(c.data(), int64_t(c.size())), bs = be.upload(s.data(), int64_t(s.size()));
  Buf x = be.upload(hx.data(), n * ld);
  be.rope(x.data(), ld, n, heads, hd, int(hd / 2), bc.data(), bs.data());
  std::vector<float> want = hx;
  naive_rope(want, ld, n, heads, hd, 0, int(hd / 2), c, s);
  CHECK(max_rel(down(be, x), want) < 1e-6, "rope (whole head) rel err %.2e", max_rel(down(be, x), want));
  const std::vector<float> gx = down(be, x);
  bool kv = true;  // k and v of the fused rows stay as they were
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = heads * hd; c < ld; ++c) kv = kv && gx[size_t(t * ld + c)] == hx[size_t(t * ld + c)];
  CHECK(kv, "rope touched k/v past the q heads");

  // Gemma 4 2-D: first half of each head by the x table, second by the y table, pairs (j, j + hd/4) in each.
  std::vector<float> cx, sx, cy, sy;
  table(int(hd / 4), cx, sx);
  table(int(hd / 4), cy, sy);
  for (float& v : cy) v = -v;
  Buf bcx = be.upload(cx.data(), int64_t(cx.size())), bsx = be.upload(sx.data(), int64_t(sx.size()));
  Buf bcy = be.upload(cy.data(), int64_t(cy.size())), bsy = be.upload(sy.data(), int64_t(sy.size()));
  Buf x2 = be.upload(hx.data(), n * ld);
  be.rope(x2.data(), ld, n, heads, hd, int(hd / 4), bcx.data(), bsx.data());
  be.rope(x2.data() + hd / 2, ld, n, heads, hd, int(hd / 4), bcy.data(), bsy.data());
  std::vector<float> want2 = hx;
  for (int64_t t = 0; t < n; ++t)  // HF Gemma 4: each half its own rotate_half over hd/2 channels
    for (int h = 0; h < heads; ++h)
      for (int half = 0; half < 2; ++half) {
        float* u = want2.data() + t * ld + h * hd + half * hd / 2;
        const std::vector<float>& tc = half == 0 ? cx : cy;
        const std::vector<float>& ts = half == 0 ? sx : sy;
        std::vector<float> r(static_cast<size_t>(hd / 2));  // rotate_half(u) over hd/2 channels
        for (int64_t j = 0; j < hd / 4; ++j) r[size_t(j)] = -u[j + hd / 4], r[size_t(j + hd / 4)] = u[j];
        for (int64_t j = 0; j < hd / 2; ++j) {
          const size_t e = size_t(t * (hd / 4) + j % (hd / 4));  // cos/sin repeated over both quarters
          u[j] = u[j] * tc[e] + r[size_t(j)] * ts[e];
        }
      }
  CHECK(max_rel(down(be, x2), want2) < 1e-6, "rope 2-D (Gemma 4) rel err %.2e", max_rel(down(be, x2), want2));
}

// softmax(q·kᵀ * scale) · v per segment, in double.
std::vector<float> naive_attention(const std::vector<float>& q, int64_t ldq, const std::vector<float>& k,
                                   const std::vector<float>& v, int64_t ldkv, int64_t ldo, int64_t n, int heads,
                                   int kv_heads, int hd, float scale, const std::vector<int64_t>& cu) {
  std::vector<float> out(size_t(n * ldo), 0.0f);
  const int group = heads / kv_heads;
  for (size_t sg = 0; sg + 1 < cu.size(); ++sg)
    for (int64_t t = cu[sg]; t < cu[sg + 1]; ++t)
      for (int h = 0; h < heads; ++h) {
        const int g = h / group;
        std::vector<double> p;
        double mx = -1e300;
        for (int64_t u = cu[sg]; u < cu[sg + 1]; ++u) {
          double d = 0;
          for (int i = 0; i < hd; ++i) d += double(q[size_t(t * ldq + h * hd + i)]) * k[size_t(u * ldkv + g * hd + i)];
          p.push_back(d * scale);
          mx = std::max(mx, p.back());
        }
        double sum = 0;
        for (double& e : p) sum += (e = std::exp(e - mx));
        for (int i = 0; i < hd; ++i) {
          double o = 0;
          for (size_t j = 0; j < p.size(); ++j) o += p[j] / sum * v[size_t((cu[sg] + int64_t(j)) * ldkv + g * hd + i)];
          out[size_t(t * ldo + h * hd + i)] = float(o);
        }
      }
  return out;
}

void test_attention(ops::Backend& be, ops::Backend& one) {
  const int heads = 6, kv_heads = 2, hd = 20;
  const std::vector<int64_t> cu{0, 17, 17, 90, 101};  // an empty segment and one past a 64-query block
  const int64_t n = cu.back(), ldq = heads * hd + 3, ldkv = kv_heads * hd + 7, ldo = heads * hd + 1;
  const float scale = 1.0f / std::sqrt(float(hd));
  const std::vector<float> hq = randn(n * ldq), hk = randn(n * ldkv), hv = randn(n * ldkv);
  const std::vector<float> want = naive_attention(hq, ldq, hk, hv, ldkv, ldo, n, heads, kv_heads, hd, scale, cu);
  std::vector<float> got[2];
  ops::Backend* bes[2] = {&be, &one};
  for (int i = 0; i < 2; ++i) {
    Buf q = bes[i]->upload(hq.data(), n * ldq), k = bes[i]->upload(hk.data(), n * ldkv);
    Buf v = bes[i]->upload(hv.data(), n * ldkv), o = bes[i]->alloc(n * ldo);
    bes[i]->attention(q.data(), ldq, k.data(), v.data(), ldkv, o.data(), ldo, heads, kv_heads, hd, scale, cu,
                      Precision::Exact);
    got[i] = down(*bes[i], o);
  }
  CHECK(max_rel(got[0], want) < 2e-5, "attention (GQA 6/2, strided) rel err %.2e", max_rel(got[0], want));
  CHECK(got[0] == got[1], "attention differs between the 1-thread and the multi-thread pool");
  Buf q = be.alloc(n * ldq);
  CHECK(throws_with([&] { be.attention(q.data(), ldq, q.data(), q.data(), ldq, q.data(), ldq, 6, 4, hd, scale, cu,
                                       Precision::Exact); },
                    "kv heads"),
        "attention accepted 6 heads over 4 kv heads");
}

// The decoder ops: embed_rows (a bf16 table, strided rows, a scale) against embedding_rows times the scale, the
// row gaps untouched; softcap against its formula; write_kv refusing a layer that reads another's cache.
void test_decoder(ops::Backend& be) {
  const int64_t vocab = 50, width = 24, ldy = width + 5;
  const std::vector<float> f = randn(vocab * width);
  std::vector<uint16_t> bits(f.size());
  for (size_t i = 0; i < f.size(); ++i) bits[i] = f32_to_bf16(f[i]);
  Weight w;
  w.dtype = DType::BF16, w.out = vocab, w.in = width, w.data = bits.data(), w.name = "embed";
  const std::vector<int32_t> ids{7, 0, 49, 7};
  Buf y = be.alloc(int64_t(ids.size()) * ldy);
  be.embed_rows(w, ids, 2.5f, y.data(), ldy);
  std::vector<float> rows(ids.size() * size_t(width)), want(ids.size() * size_t(ldy), 0.0f);
  embedding_rows(w, ids.data(), int64_t(ids.size()), rows.data());
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t c = 0; c < width; ++c) want[i * size_t(ldy) + size_t(c)] = rows[i * size_t(width) + size_t(c)] * 2.5f;
  CHECK(down(be, y) == want, "embed_rows differs from embedding_rows * scale or touches the row gaps");

  std::vector<float> hx = randn(300, 40.0f), wc(hx);
  for (float& x : wc) x = 30.0f * std::tanh(x / 30.0f);
  Buf x = be.upload(hx.data(), int64_t(hx.size()));
  be.softcap(x.data(), int64_t(hx.size()), 30.0f);
  CHECK(down(be, x) == wc, "softcap differs from cap * tanh(x / cap)");

  KvPool kv({{1, 8, -1}, {1, 8, 0}}, 16, size_t(1) << 16);
  Buf k = be.alloc(8);
  const std::vector<SeqSpan> none;
  CHECK(throws_with([&] { be.write_kv(kv, 1, k.data(), k.data(), none); }, "another layer's cache"),
        "write_kv wrote into a KV-shared layer");
}

// gated_mlp's fused pass (gate and up in one dispatch over x, bias and GLU per thread) against the ops it replaces
// (Backend's default: linear, linear, act_mul, linear), bitwise: 4-bit gate/up under both precisions at decode and
// prefill row counts, an FFN width that leaves a SIMD tail, biases, in place.
void test_gated_mlp(ops::CpuBackend& be) {
  ops_compare::detail::Fixture fx;
  const int64_t hidden = 128, ffn = 100;  // 100: the GLU's 8-wide SIMD leaves a 4-wide tail
  for (const char* fmt : {"q4", "f32"}) {
    const bool bias = std::string(fmt) == "f32";
    const Linear& gate = fx.linear(fmt, ffn, hidden, bias);
    const Linear& up = fx.linear(fmt, ffn, hidden, bias);
    const Linear& dn = fx.linear("f32", hidden, ffn, bias);
    for (Precision p : {Precision::Fast, Precision::Exact})
      for (ops::VAct a : {ops::VAct::Silu, ops::VAct::GeluTanh, ops::VAct::GeluErf})
        for (int64_t n : {1, 3, 40})
          for (bool in_place : {false, true}) {
            const std::vector<float> hx = randn(n * hidden);
            std::vector<float> got[2];
            for (int k = 0; k < 2; ++k) {
              Buf x = be.upload(hx.data(), n * hidden), y = be.alloc(n * hidden);
              Buf g = be.alloc(n * ffn), u = be.alloc(n * ffn);
              float* out = in_place ? x.data() : y.data();
              if (k == 0) be.gated_mlp(gate, up, dn, x.data(), out, g.data(), u.data(), n, a, p);
              else be.ops::Backend::gated_mlp(gate, up, dn, x.data(), out, g.data(), u.data(), n, a, p);
              got[k] = down(be, in_place ? x : y);
            }
            CHECK(got[0] == got[1], "gated_mlp %s %s act %d n %lld%s differs from linear+linear+act_mul+linear", fmt,
                  p == Precision::Fast ? "Fast" : "Exact", int(a), static_cast<long long>(n), in_place ? " in place" : "");
          }
  }
}

}  // namespace

int main() {
  ThreadPool pool(4), single(1);
  ops::CpuBackend be(pool), one(single);
  CHECK(be.name() == "cpu", "name %s", be.name().c_str());
  try {
    test_buffers(be);
    test_pointwise(be);
    test_movement(be);
    test_taps(be);
    test_head_norm(be);
    test_rope(be);
    test_attention(be, one);
    test_decoder(be);
    test_gated_mlp(be);
    // The op-by-op comparison a GPU backend runs against the CPU, here between two thread counts: the CPU ops
    // are bitwise independent of the split, so every output must match exactly.
    ops_compare::compare_backends(be, one, {0.0, 0.0}, [](bool ok, const std::string& what, double err) {
      CHECK(ok, "compare_backends (4 threads vs 1): %s rel err %.2e", what.c_str(), err);
    });
  } catch (const std::exception& e) {
    CHECK(false, "unexpected exception: %s", e.what());
  }
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}
