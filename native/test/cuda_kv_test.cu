// Op test of the CUDA KV cache's element types (f32, f16, bf16, int8) against the CPU pool (kv/kv_pool.h), the
// reference. Prints one PASS/FAIL line per case; exits 1 on any failure.
//   bytes      kv_write and rope_kv_write store exactly the bytes the CPU's write_kv (kv::store_slot) stores for the
//              same f32 rows: codes and int8 scales, ties, subnormals, overflow, all-zero rows and odd KV head counts
//              (an int8 scale in either half of its 32-bit word) included;
//   attention  paged_attention over a 16-bit or int8 pool (bytes written by the CPU) is bitwise paged_attention over
//              an f32 pool of the widened values (kv::load_row), under every split-K setting, and within 2e-5 of the
//              CPU's attention over the same pool; a token alone == in the launch (bitwise); a decode token whose own
//              row the launch just before rewrites (PDL, early key copies) reads the new row;
//   TIME       decode attention per dtype (printed only), as a ratio to f32 of the same shape.
// Build: node scripts/build-cuda.mjs --tests -> build/cuda/tests/cuda_kv_test.
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>
#include "cpu/threadpool.h"
#include "cuda/cuda_kernels.h"
#include "cuda_test_util.h"
#include "kv/kv_convert.h"
#include "kv/kv_pool.h"
#include "layers/attention.h"
#include "layers/rope.h"

using namespace rapid;
namespace cu = rapid::cuda;
using namespace rapid::cuda::test;

namespace {

std::mt19937 g_rng(4321);

constexpr KvDtype kAllTypes[] = {KvDtype::F32, KvDtype::F16, KvDtype::BF16, KvDtype::I8};

// One layer's pool on the host (a CPU KvPool of `num_blocks` blocks) and its device mirror in the same layout.
struct Pools {
  int n_kv, hd, bs, num_blocks;
  KvDtype dtype;
  KvPool host;
  Dev<uint8_t> k, v;
  Dev<uint16_t> ks, vs;
  Pools(KvDtype t, int n_kv_, int hd_, int bs_, int blocks)
      : n_kv(n_kv_), hd(hd_), bs(bs_), num_blocks(blocks), dtype(t),
        host({KvLayerSpec{n_kv_, hd_, -1}}, bs_,
             size_t(bs_) * 2 * (size_t(n_kv_) * hd_ * kv_elem_bytes(t) + size_t(n_kv_) * kv_scale_bytes(t)) * size_t(blocks),
             true, t),
        k(code_bytes()), v(code_bytes()), ks(scale_count()), vs(scale_count()) {
    cu::check(cudaMemset(k.p, 0, k.n), "memset k");
    cu::check(cudaMemset(v.p, 0, v.n), "memset v");
    cu::check(cudaMemset(ks.p, 0, ks.n * 2), "memset ks");
    cu::check(cudaMemset(vs.p, 0, vs.n * 2), "memset vs");
  }
  size_t slots() const { return size_t(num_blocks) * size_t(bs); }
  size_t code_bytes() const { return slots() * size_t(n_kv) * size_t(hd) * kv_elem_bytes(dtype); }
  size_t scale_count() const { return kv_scale_bytes(dtype) ? slots() * size_t(n_kv) : 0; }
  cu::KvCache dev() {
    cu::KvCache c;
    c.dtype = dtype;
    c.k = k.p;
    c.v = v.p;
    if (scale_count()) {
      c.ks = ks.p;
      c.vs = vs.p;
    }
    return c;
  }
  // The host pool's bytes onto the device.
  void upload() {
    const KvPool::View w = host.view(0);
    cu::check(cudaMemcpy(k.p, w.k, code_bytes(), cudaMemcpyHostToDevice), "upload k");
    cu::check(cudaMemcpy(v.p, w.v, code_bytes(), cudaMemcpyHostToDevice), "upload v");
    if (scale_count()) {
      cu::check(cudaMemcpy(ks.p, w.ks, scale_count() * 2, cudaMemcpyHostToDevice), "upload ks");
      cu::check(cudaMemcpy(vs.p, w.vs, scale_count() * 2, cudaMemcpyHostToDevice), "upload vs");
    }
  }
  // Where the device's bytes differ from the host pool's ("" when equal).
  std::string diff() {
    const KvPool::View w = host.view(0);
    std::string where;
    if (std::memcmp(k.download().data(), w.k, code_bytes())) where += " K codes";
    if (std::memcmp(v.download().data(), w.v, code_bytes())) where += " V codes";
    if (scale_count() && std::memcmp(ks.download().data(), w.ks, scale_count() * 2)) where += " K scales";
    if (scale_count() && std::memcmp(vs.download().data(), w.vs, scale_count() * 2)) where += " V scales";
    return where;
  }
  // The host pool widened to f32 [slots, n_kv, hd] (kv::load_row: what attention reads), K then V.
  std::vector<float> widened(bool values) {
    const KvPool::View w = host.view(0);
    std::vector<float> out(slots() * size_t(n_kv) * size_t(hd));
    const uint8_t* codes = values ? w.v : w.k;
    const uint16_t* sc = values ? w.vs : w.ks;
    for (size_t r = 0; r < slots() * size_t(n_kv); ++r)
      kv::load_row(dtype, codes + r * size_t(hd) * w.elem_bytes, sc ? sc + r : nullptr, out.data() + r * size_t(hd), hd);
    return out;
  }
};

// Rows [n, n_kv, hd] with the values that stress a conversion: exact bf16 / f16 ties, f16 subnormals and overflow,
// all-zero and huge rows (int8 scale 0, a scale past f16's range clamped), mixed with random ones.
std::vector<float> hard_rows(int n, int n_kv, int hd) {
  std::vector<float> x = uniform_vec(g_rng, size_t(n) * n_kv * hd, -3.0f, 3.0f);
  const float specials[] = {1.0f + 0x1p-8f,  1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-8f), 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f,
                            3e-6f,           -6e-8f,             1e-8f,             65519.0f,        65520.0f,
                            70000.0f,        -1e30f,             0.0f,              -0.0f,           0x1p-133f};
  for (size_t i = 0; i < x.size(); i += 3) x[i] = specials[(i / 3) % std::size(specials)];
  if (n > 1) std::fill_n(x.begin() + hd, hd, 0.0f);  // token 0, head 1 (or token 1, head 0): all zero
  if (n > 2) std::fill_n(x.begin() + 2 * size_t(n_kv) * hd, hd, 1e7f);  // token 2, head 0: absmax / 127 > 65504
  return x;
}

// The slots n tokens write: a shuffled pick of the pool's slots (odd and even, so int8 scales sit in both halves).
std::vector<int32_t> pick_slots(int n, size_t slots) {
  std::vector<int32_t> all(slots);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), g_rng);
  all.resize(size_t(n));
  all[size_t(n) - 1] = -1;  // a padding token stores nothing
  return all;
}

// The CPU's write of rows [n, n_kv, hd] at those slots: one span of one token per slot (block table = its block).
void cpu_write(Pools& P, const float* k, const float* v, const std::vector<int32_t>& slot) {
  for (size_t t = 0; t < slot.size(); ++t) {
    if (slot[t] < 0) continue;
    const int32_t block = slot[t] / P.bs;
    SeqSpan sp;
    sp.start = int64_t(t);
    sp.n = 1;
    sp.context_len = slot[t] % P.bs;
    sp.block_table = &block;
    sp.n_blocks = 1;
    write_kv(P.host, 0, k, v, {sp});
  }
}

struct Shape {
  int n_kv, hd;
};
constexpr Shape kShapes[] = {{2, 64}, {3, 128}, {1, 256}, {5, 96}, {4, 32}};

void test_kv_write_bytes() {
  for (const Shape& sh : kShapes)
    for (KvDtype t : kAllTypes) {
      const int n = 37;
      Pools P(t, sh.n_kv, sh.hd, 16, 5);
      const std::vector<float> k = hard_rows(n, sh.n_kv, sh.hd), v = hard_rows(n, sh.n_kv, sh.hd);
      const std::vector<int32_t> slot = pick_slots(n, P.slots());
      cpu_write(P, k.data(), v.data(), slot);
      Dev<float> dk(k), dv(v);
      Dev<int32_t> ds(slot);
      cu::kv_write(dk.p, dv.p, n, ds.p, P.dev(), sh.n_kv, sh.hd, nullptr);
      device_sync();
      const std::string where = P.diff();
      report_bool(std::string("kv_write bytes ") + kv_dtype_name(t) + " kv " + std::to_string(sh.n_kv) + " hd " +
                      std::to_string(sh.hd),
                  where.empty(), where.empty() ? "== CPU write_kv" : "differs in" + where);
    }
}

// rope_kv_write into a typed pool stores what the CPU stores for the rotated keys (the f32 pool's values, which
// cuda_layers_test checks against rope + kv_write) and the values; q is rotated as with an f32 pool.
void test_rope_kv_write_bytes() {
  struct RC {
    int heads, n_kv, hd, rot;
    bool qscale;
  };
  for (const RC& rc : {RC{8, 2, 64, 64, false}, RC{12, 3, 128, 128, true}, RC{4, 1, 256, 64, true}, RC{10, 5, 80, 40, false}})
    for (KvDtype t : kAllTypes) {
      const int n = 9;
      const RopeSpec spec = rope_default(rc.hd, rc.rot, 1e6, 1.0);
      std::vector<int32_t> pos(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) pos[size_t(i)] = i * 977 + 3;
      const RopeTable tab = rope_table(spec, pos.data(), n);
      const size_t width = size_t(rc.n_kv) * rc.hd;
      const std::vector<float> q = uniform_vec(g_rng, size_t(n) * rc.heads * rc.hd), k = hard_rows(n, rc.n_kv, rc.hd),
                               v = hard_rows(n, rc.n_kv, rc.hd), qs = uniform_vec(g_rng, size_t(n), 0.5f, 2.0f);
      Pools P(t, rc.n_kv, rc.hd, 16, 2);
      const std::vector<int32_t> slot = pick_slots(n, P.slots());
      Dev<float> dq1(q), dq2(q), dk(k), dv(v), dc(tab.cos), dsn(tab.sin), dqs(qs);
      Dev<float> f32k(P.slots() * width), f32v(P.slots() * width);
      Dev<int32_t> ds(slot);
      const float* qsp = rc.qscale ? dqs.p : nullptr;
      cu::rope_kv_write(dq1.p, dk.p, dv.p, n, rc.heads, rc.n_kv, rc.hd, tab.half, dc.p, dsn.p, qsp, ds.p,
                        f32_pool(f32k.p, f32v.p), nullptr);
      cu::rope_kv_write(dq2.p, dk.p, dv.p, n, rc.heads, rc.n_kv, rc.hd, tab.half, dc.p, dsn.p, qsp, ds.p, P.dev(), nullptr);
      device_sync();
      // The rotated keys as the f32 pool holds them, token by token, through the CPU's write.
      const std::vector<float> pk = f32k.download();
      std::vector<float> krot(size_t(n) * width);
      for (int i = 0; i < n; ++i)
        if (slot[size_t(i)] >= 0)
          std::copy_n(pk.data() + size_t(slot[size_t(i)]) * width, width, krot.data() + size_t(i) * width);
      cpu_write(P, krot.data(), v.data(), slot);
      std::string where = P.diff();
      const std::vector<float> a = dq1.download(), b = dq2.download();
      if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) where += " q";
      report_bool(std::string("rope_kv_write bytes ") + kv_dtype_name(t) + " heads " + std::to_string(rc.heads) + "/" +
                      std::to_string(rc.n_kv) + " hd " + std::to_string(rc.hd) + " rot " + std::to_string(rc.rot),
                  where.empty(), where.empty() ? "== CPU write_kv of the rotated keys" : "differs in" + where);
    }
}

// ---------------------------------------------------------------- attention over each type

struct AttnCase {
  std::string name;
  int n_heads, n_kv, hd, window;
  std::vector<std::pair<int, int>> seqs;  // (context, new tokens)
};

// A launch's token metadata over device arrays [T] (block tables concatenated).
cu::AttnTokens attn_tokens(const Dev<int32_t>& table_off, const Dev<int32_t>& q_pos, const Dev<int32_t>& kv_end,
                           const Dev<int32_t>& tables, int block_size, int64_t max_keys = 0) {
  return cu::AttnTokens{table_off.p, q_pos.p, kv_end.p, tables.p, block_size, max_keys};
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double mx = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return NAN;
    mx = std::max(mx, std::fabs(double(a[i]) - double(b[i])));
    ref = std::max(ref, std::fabs(double(b[i])));
  }
  return mx / std::max(ref, 1e-30);
}

void run_attention(ThreadPool& pool, const AttnCase& c, KvDtype t) {
  const int bs = 16, width = c.n_kv * c.hd;
  int blocks = 0, T = 0, all = 0;
  for (const auto& [ctx, n] : c.seqs) {
    blocks += (ctx + n + bs - 1) / bs;
    T += n;
    all += ctx + n;
  }
  Pools P(t, c.n_kv, c.hd, bs, blocks + 3);
  std::vector<int32_t> perm(size_t(blocks + 3));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), g_rng);
  // Every key of every sequence written by the CPU (one span per sequence from position 0), then uploaded.
  std::vector<std::vector<int32_t>> tables;
  std::vector<SeqSpan> fill, spans;
  std::vector<int32_t> table_off, q_pos, kv_end, flat, slot;
  int next = 0, start = 0, fstart = 0;
  for (const auto& [ctx, n] : c.seqs) {
    const int nb = (ctx + n + bs - 1) / bs;
    tables.emplace_back(perm.begin() + next, perm.begin() + next + nb);
    next += nb;
  }
  for (size_t r = 0; r < c.seqs.size(); ++r) {
    const auto [ctx, n] = c.seqs[r];
    const int off = int(flat.size());
    flat.insert(flat.end(), tables[r].begin(), tables[r].end());
    SeqSpan f;
    f.start = fstart;
    f.n = ctx + n;
    f.block_table = tables[r].data();
    f.n_blocks = int64_t(tables[r].size());
    fill.push_back(f);
    SeqSpan sp = f;
    sp.start = start;
    sp.n = n;
    sp.context_len = ctx;
    spans.push_back(sp);
    for (int i = 0; i < n; ++i) {
      table_off.push_back(off);
      q_pos.push_back(ctx + i);
      kv_end.push_back(ctx + i + 1);
      slot.push_back(tables[r][size_t((ctx + i) / bs)] * bs + (ctx + i) % bs);
    }
    start += n;
    fstart += ctx + n;
  }
  const std::vector<float> k = uniform_vec(g_rng, size_t(all) * width, -2.0f, 2.0f),
                           v = uniform_vec(g_rng, size_t(all) * width, -2.0f, 2.0f);
  write_kv(P.host, 0, k.data(), v.data(), fill);
  P.upload();
  const std::vector<float> q = uniform_vec(g_rng, size_t(T) * c.n_heads * c.hd);
  const float scale = 1.0f / std::sqrt(float(c.hd));
  std::vector<float> ref(q.size());
  paged_attention(pool, P.host, 0, q.data(), ref.data(), spans, AttnShape{c.n_heads, c.n_kv, c.hd, scale, c.window});

  Dev<float> wk(P.widened(false)), wv(P.widened(true));  // the f32 pool of the widened values
  Dev<float> dq(q), out(q.size()), wide(q.size()), one(q.size());
  Dev<int32_t> d_off(table_off), d_pos(q_pos), d_end(kv_end), d_tab(flat), d_slot(slot);
  const cu::AttnTokens tok = attn_tokens(d_off, d_pos, d_end, d_tab, bs);
  const size_t row = size_t(c.n_heads) * c.hd;
  const std::string tag = c.name + " " + kv_dtype_name(t);
  for (int part_keys : {0, 32, 128}) {
    cu::set_attention_split(part_keys);
    const std::string st = tag + " [split " + std::to_string(part_keys) + "]";
    cu::paged_attention(dq.p, out.p, T, tok, P.dev(), c.n_heads, c.n_kv, c.hd, scale, c.window, nullptr);
    cu::paged_attention(dq.p, wide.p, T, tok, f32_pool(wk.p, wv.p), c.n_heads, c.n_kv, c.hd, scale, c.window, nullptr);
    device_sync();
    const std::vector<float> got = out.download(), w = wide.download();
    report("attention vs CPU " + st, rel_err(got, ref), 2e-5);
    report_bool("attention == f32 of widened " + st, std::memcmp(got.data(), w.data(), got.size() * 4) == 0);
    // The last token alone (T = 1: the early-copy path) == its row in the launch.
    cu::AttnTokens sub = tok;
    sub.table_off += T - 1;
    sub.q_pos += T - 1;
    sub.kv_end += T - 1;
    cu::paged_attention(dq.p + size_t(T - 1) * row, one.p, 1, sub, P.dev(), c.n_heads, c.n_kv, c.hd, scale, c.window,
                        nullptr);
    device_sync();
    report_bool("attention token alone " + st, std::memcmp(one.download().data(), got.data() + size_t(T - 1) * row, row * 4) == 0);
  }
  // Decode as the decoder runs it, on a created stream (PDL where the device has it): the token's own row is poisoned,
  // then rewritten by kv_write just before the attention, which must read the new bytes.
  cudaStream_t s = nullptr;
  cu::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  cu::set_attention_split(-1);
  cu::AttnTokens sub = tok;
  sub.table_off += T - 1;
  sub.q_pos += T - 1;
  sub.kv_end += T - 1;
  cu::paged_attention(dq.p + size_t(T - 1) * row, wide.p, 1, sub, P.dev(), c.n_heads, c.n_kv, c.hd, scale, c.window, s);
  const int32_t last = slot.back();
  const size_t eb = kv_elem_bytes(t);
  cu::check(cudaStreamSynchronize(s), "sync");
  cu::check(cudaMemset(P.k.p + size_t(last) * width * eb, 0x7b, width * eb), "poison k");
  cu::check(cudaMemset(P.v.p + size_t(last) * width * eb, 0x7b, width * eb), "poison v");
  if (P.scale_count()) {
    cu::check(cudaMemset(P.ks.p + size_t(last) * c.n_kv, 0x5b, size_t(c.n_kv) * 2), "poison ks");
    cu::check(cudaMemset(P.vs.p + size_t(last) * c.n_kv, 0x5b, size_t(c.n_kv) * 2), "poison vs");
  }
  // The last token's K/V rows as the fill wrote them: the last sequence's last key.
  const size_t src = (size_t(all) - 1) * width;
  Dev<float> lk(std::vector<float>(k.begin() + std::ptrdiff_t(src), k.begin() + std::ptrdiff_t(src + width)));
  Dev<float> lv(std::vector<float>(v.begin() + std::ptrdiff_t(src), v.begin() + std::ptrdiff_t(src + width)));
  Dev<int32_t> ls(std::vector<int32_t>{last});
  cu::kv_write(lk.p, lv.p, 1, ls.p, P.dev(), c.n_kv, c.hd, s);
  cu::paged_attention(dq.p + size_t(T - 1) * row, one.p, 1, sub, P.dev(), c.n_heads, c.n_kv, c.hd, scale, c.window, s);
  cu::check(cudaStreamSynchronize(s), "sync");
  report_bool("attention fresh key on a stream " + tag, std::memcmp(one.download().data(), wide.download().data(), row * 4) == 0,
              "(its row rewritten by the launch before)");
  cu::paged_attention_release(s);
  cu::check(cudaStreamDestroy(s), "stream destroy");
}

void test_attention(ThreadPool& pool) {
  // The last sequence's last token is the decode probe: its key is the fill's last row.
  const AttnCase cases[] = {
      {"14/2 hd64 prefill+decode", 14, 2, 64, 0, {{0, 40}, {300, 1}, {77, 5}, {1000, 1}}},
      {"15/3 hd128 decode", 15, 3, 128, 0, {{150, 1}, {2100, 1}, {33, 1}}},
      {"8/1 hd256 window 100", 8, 1, 256, 100, {{20, 9}, {500, 1}}},
      {"12/4 hd96 prefill", 12, 4, 96, 0, {{0, 70}, {65, 1}}},
  };
  for (const AttnCase& c : cases)
    for (KvDtype t : kAllTypes) run_attention(pool, c, t);
  cu::set_attention_split(-1);
}

// Decode attention's time per launch for each dtype, in a replayed graph (printed, not checked: speed is the bench's),
// with the ratio to f32 of the same shape: the bytes each key costs against the widening each one needs.
void time_decode_attention() {
  struct Shape {
    int n_heads, n_kv, hd;
  };
  constexpr int kReps = 20, kLaunches = 5;
  for (const Shape& sh : {Shape{14, 2, 64}, Shape{16, 2, 128}})
    for (const auto& [T, keys] : {std::pair{1, 8192}, std::pair{8, 8192}, std::pair{64, 1024}}) {
      const int bs = 16, nb = keys / bs, width = sh.n_kv * sh.hd;
      const size_t slots = size_t(T) * size_t(nb) * bs;
      std::vector<int32_t> tables(size_t(T) * nb), off(static_cast<size_t>(T)), pos(size_t(T), keys - 1), end(size_t(T), keys);
      std::iota(tables.begin(), tables.end(), 0);
      std::shuffle(tables.begin(), tables.end(), g_rng);
      for (int t = 0; t < T; ++t) off[size_t(t)] = t * nb;
      std::vector<int32_t> all(slots);
      std::iota(all.begin(), all.end(), 0);
      Dev<int32_t> d_tab(tables), d_off(off), d_pos(pos), d_end(end), d_all(all);
      Dev<float> rows(uniform_vec(g_rng, slots * size_t(width), -2.0f, 2.0f)), q(uniform_vec(g_rng, size_t(T) * sh.n_heads * sh.hd));
      Dev<float> out(q.n);
      const cu::AttnTokens tok = attn_tokens(d_off, d_pos, d_end, d_tab, bs, keys);
      std::string line = "TIME decode attention " + std::to_string(sh.n_heads) + "/" + std::to_string(sh.n_kv) + " hd" +
                         std::to_string(sh.hd) + " T=" + std::to_string(T) + " keys=" + std::to_string(keys) + ":";
      double f32_us = 0;
      for (KvDtype t : kAllTypes) {
        Pools P(t, sh.n_kv, sh.hd, bs, int(slots / bs));
        cu::kv_write(rows.p, rows.p, int64_t(slots), d_all.p, P.dev(), sh.n_kv, sh.hd, nullptr);
        device_sync();
        const cu::KvCache kv = P.dev();
        const double us = attention_graph_us(
            [&](cudaStream_t s) { cu::paged_attention(q.p, out.p, T, tok, kv, sh.n_heads, sh.n_kv, sh.hd, 0.1f, 0, s); },
            kReps, kLaunches);
        if (t == KvDtype::F32) f32_us = us;
        char buf[64];
        std::snprintf(buf, sizeof buf, " %s %.1f us (%.2fx) |", kv_dtype_name(t), us, f32_us / us);
        line += buf;
      }
      std::printf("%s\n", line.c_str());
    }
}

}  // namespace

int main() {
  return run_op_test([] {
    ThreadPool pool(4);
    test_kv_write_bytes();
    test_rope_kv_write_bytes();
    test_attention(pool);
    time_decode_attention();
  });
}
