// Op test of the CUDA backend's non-matmul kernels against the CPU runtime (the reference): paged
// attention + kv_write, rms_norm, add_rms_norm, rope, embed_rows, scatter/gather_rows, softcap,
// argmax_rows. Prints one PASS/FAIL line per case with its max error; exits 1 on any failure. Also checks
// batch invariance bitwise (attention, argmax), attention under every split-K setting (off, several
// partition sizes, a max-context bound) and in a replayed CUDA graph, and times decode attention.
//
// Build (from the repo root; one line) and run on a machine with an sm_80/sm_90 GPU:
//   nvcc -std=c++20 -O3 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
//     -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-Werror -Werror all-warnings -Inative/src
//     native/test/cuda_layers_test.cu native/src/cuda/{attention,norm_rope,rows,argmax,check}.cu
//     native/src/layers/{attention,attention_tile,vec_math,norm,rope}.cpp native/src/kv/kv_pool.cpp
//     native/src/cpu/*.cpp native/src/quant/*.cpp native/src/format/*.cpp native/src/sampling/sampler.cpp
//     -o /tmp/cuda_layers_test && /tmp/cuda_layers_test
#include <cuda_fp16.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>
#include "cpu/matmul.h"
#include "cpu/threadpool.h"
#include "cuda/cuda_kernels.h"
#include "cuda/tiled_codes.h"
#include "cuda_test_util.h"
#include "kv/kv_pool.h"
#include "layers/attention.h"
#include "layers/norm.h"
#include "layers/rope.h"
#include "quant/quantize.h"
#include "sampling/sampler.h"
#include "tensor/weight.h"

using namespace rapid;
namespace cu = rapid::cuda;
using namespace rapid::cuda::test;

namespace {

std::mt19937 g_rng(1234);
std::vector<float> rand_vec(size_t n, float lo = -1.0f, float hi = 1.0f) { return uniform_vec(g_rng, n, lo, hi); }

// max |a - b| / max(|b|) (relative to the reference's scale); NaN when a value is non-finite.
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double mx = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isfinite(b[i]) && !std::isfinite(a[i])) return NAN;
    mx = std::max(mx, std::fabs(double(a[i]) - double(b[i])));
    ref = std::max(ref, std::fabs(double(b[i])));
  }
  return mx / std::max(ref, 1e-30);
}

bool bitwise_equal(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }


// ---------------------------------------------------------------- attention

struct SeqDesc {
  int ctx = 0;                 // tokens already in KV
  int n = 1;                   // new tokens
  std::vector<int32_t> bidir;  // [start, end) pairs of new-token offsets
};

struct AttnCase {
  std::string name;
  int n_heads, n_kv, hd, bs, window;
  std::vector<SeqDesc> seqs;
  int invariance_probes = 3;  // tokens re-run alone and compared bitwise
};

// Host mirror of the step's per-token attention metadata.
struct TokMeta {
  std::vector<int32_t> table_off, q_pos, kv_end, tables, slot;
};

// Split-K settings every attention case runs under: attention.cu's process-wide partition size, and the key
// bound its launches get.
struct SplitSetting {
  const char* name;
  int part_keys;     // set_attention_split: 0 = off, else keys per partition
  int64_t max_keys;  // AttnTokens.max_keys of every launch: 0 = unknown
};
const SplitSetting kSplitSettings[] = {
    {"split off", 0, 0},
    {"split 32", 32, 0},
    {"split 32 bound 100", 32, 100},  // bound below the long contexts: fewer partition blocks, each loops
    {"split 128", 128, 0},
    {"split 256", 256, 0},
};

void apply_split(const SplitSetting& st) { cu::set_attention_split(st.part_keys); }

void reset_split() { cu::set_attention_split(-1); }

// Visible keys of a token (the kernel's rule: window keeps keys k > q_pos - window).
int token_nkeys(int q_pos, int kv_end, int window) {
  const int lo = window > 0 ? std::max(0, q_pos - window + 1) : 0;
  return std::max(0, kv_end - lo);
}

// Whether attention.cu computes this token in a single pass under part_keys (then its result must equal
// the split-off result bit for bit).
bool single_pass(int nkeys, int part_keys, int window) {
  return part_keys <= 0 || (window > 0 && window <= part_keys) || nkeys <= part_keys;
}

// Fills a device buffer with NaN so that a row the kernels fail to write cannot pass as an old result.
void poison(float* p, size_t n) { cu::check(cudaMemset(p, 0xff, n * sizeof(float)), "memset NaN"); }

void run_attention_case(ThreadPool& pool, const AttnCase& c) {
  const int width = c.n_kv * c.hd;
  int blocks_needed = 0, T = 0;
  for (const SeqDesc& s : c.seqs) {
    blocks_needed += (s.ctx + s.n + c.bs - 1) / c.bs;
    T += s.n;
  }
  const int num_blocks = blocks_needed + 5;  // spare blocks that no sequence uses
  const size_t per_block = 2 * size_t(c.bs) * size_t(width) * sizeof(float);
  KvPool kv({KvLayerSpec{c.n_kv, c.hd, -1}}, c.bs, per_block * size_t(num_blocks));
  const KvPool::View kvv = kv.view(0);
  // An f32 pool: K and V rows are plain floats [num_blocks * bs, width].
  float* const kf = reinterpret_cast<float*>(kvv.k);
  float* const vf = reinterpret_cast<float*>(kvv.v);
  const size_t pool_floats = size_t(num_blocks) * size_t(c.bs) * size_t(width);  // [num_blocks * bs, width]
  {
    const std::vector<float> k0 = rand_vec(pool_floats), v0 = rand_vec(pool_floats);
    std::copy(k0.begin(), k0.end(), kf);
    std::copy(v0.begin(), v0.end(), vf);
  }
  Dev<float> dk(pool_floats), dv(pool_floats);
  cu::check(cudaMemcpy(dk.p, kf, pool_floats * sizeof(float), cudaMemcpyHostToDevice), "upload k pool");
  cu::check(cudaMemcpy(dv.p, vf, pool_floats * sizeof(float), cudaMemcpyHostToDevice), "upload v pool");

  // Shuffled block assignment: a sequence's blocks are scattered over the pool.
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), g_rng);
  TokMeta m;
  std::vector<SeqSpan> spans;
  std::vector<std::vector<int32_t>> tables(c.seqs.size());
  int next_block = 0, start = 0;
  for (size_t r = 0; r < c.seqs.size(); ++r) {
    const SeqDesc& s = c.seqs[r];
    const int nb = (s.ctx + s.n + c.bs - 1) / c.bs;
    tables[r].assign(perm.begin() + next_block, perm.begin() + next_block + nb);
    next_block += nb;
    const int off = int(m.tables.size());
    m.tables.insert(m.tables.end(), tables[r].begin(), tables[r].end());
    for (int i = 0; i < s.n; ++i) {
      const int qp = s.ctx + i;
      int end = qp + 1;
      for (size_t b = 0; b + 1 < s.bidir.size(); b += 2)
        if (i >= s.bidir[b] && i < s.bidir[b + 1]) end = std::max(end, s.ctx + s.bidir[b + 1]);
      m.table_off.push_back(off);
      m.q_pos.push_back(qp);
      m.kv_end.push_back(end);
      m.slot.push_back(tables[r][size_t(qp / c.bs)] * c.bs + qp % c.bs);
    }
    SeqSpan sp;
    sp.start = start;
    sp.n = s.n;
    sp.context_len = s.ctx;
    sp.block_table = tables[r].data();
    sp.n_blocks = nb;
    sp.bidir = s.bidir.empty() ? nullptr : s.bidir.data();
    sp.n_bidir = int64_t(s.bidir.size() / 2);
    spans.push_back(sp);
    start += s.n;
  }

  const std::vector<float> q = rand_vec(size_t(T) * c.n_heads * c.hd);  // [T, n_heads, hd]
  const std::vector<float> k = rand_vec(size_t(T) * width), v = rand_vec(size_t(T) * width);  // [T, width]
  const float scale = 1.0f / std::sqrt(float(c.hd));

  // CPU reference.
  write_kv(kv, 0, k.data(), v.data(), spans);
  std::vector<float> ref(q.size());
  AttnShape shape{c.n_heads, c.n_kv, c.hd, scale, c.window};
  paged_attention(pool, kv, 0, q.data(), ref.data(), spans, shape);

  // Device.
  Dev<float> dq(q), dkn(k), dvn(v), dout(q.size()), dsub(q.size());
  Dev<int32_t> d_off(m.table_off), d_qpos(m.q_pos), d_end(m.kv_end), d_tables(m.tables), d_slot(m.slot);
  cu::kv_write(dkn.p, dvn.p, T, d_slot.p, f32_pool(dk.p, dv.p), c.n_kv, c.hd, nullptr);
  cu::AttnTokens tok;
  tok.table_off = d_off.p;
  tok.q_pos = d_qpos.p;
  tok.kv_end = d_end.p;
  tok.block_tables = d_tables.p;
  tok.block_size = c.bs;
  device_sync();

  // kv_write: the device pools must equal the CPU pools after write_kv, bit for bit.
  const std::vector<float> pk = dk.download(), pv = dv.download();
  report_bool("kv_write " + c.name, bitwise_equal(pk.data(), kf, pool_floats) && bitwise_equal(pv.data(), vf, pool_floats));

  // Tokens [first, first + n) as their own launch (their own metadata rows), into dst rows [0, n).
  const size_t row = size_t(c.n_heads) * c.hd;
  auto launch = [&](int first, int n, float* dst, int64_t max_keys) {
    cu::AttnTokens sub = tok;
    sub.max_keys = max_keys;
    sub.table_off += first;
    sub.q_pos += first;
    sub.kv_end += first;
    poison(dst, size_t(n) * row);
    cu::paged_attention(dq.p + size_t(first) * row, dst, n, sub, f32_pool(dk.p, dv.p), c.n_heads, c.n_kv, c.hd, scale, c.window,
                        nullptr);
    device_sync();
  };
  // Probes: first, last, middle, and the token with the most keys.
  std::vector<int> probes;
  for (int pi = 0; pi < c.invariance_probes && pi < T; ++pi) probes.push_back(pi == 0 ? 0 : pi == 1 ? T - 1 : T / 2);
  std::vector<int> nkeys(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) nkeys[size_t(t)] = token_nkeys(m.q_pos[size_t(t)], m.kv_end[size_t(t)], c.window);
  probes.push_back(int(std::max_element(nkeys.begin(), nkeys.end()) - nkeys.begin()));

  std::vector<float> off_out;
  std::vector<std::pair<int, std::vector<float>>> by_part_keys;  // first result of each partition size
  for (const SplitSetting& st : kSplitSettings) {
    apply_split(st);
    const std::string tag = c.name + " [" + st.name + "]";
    launch(0, T, dout.p, st.max_keys);
    const std::vector<float> got = dout.download();
    report("attention " + tag, rel_err(got, ref), 2e-5);

    // Batch invariance: probe tokens alone (T = 1) and the second half of the batch as its own launch
    // (other tiles, other neighbours) == their rows in the full launch.
    bool inv_ok = true;
    for (int t : probes) {
      launch(t, 1, dsub.p, st.max_keys);
      inv_ok = inv_ok && bitwise_equal(dsub.download().data(), got.data() + size_t(t) * row, row);
    }
    const int half = T / 2;
    if (T - half > 0) {
      launch(half, T - half, dsub.p, st.max_keys);
      inv_ok = inv_ok && bitwise_equal(dsub.download().data(), got.data() + size_t(half) * row, size_t(T - half) * row);
    }
    report_bool("attention batch invariance " + tag, inv_ok,
                "(alone and second half == in launch of T=" + std::to_string(T) + ")");

    // A token alone may leave its partitions unmerged (for the o projection to merge while staging its input):
    // attention_merge of them gives its row bit for bit (a token in one partition is written by the launch itself).
    if (st.part_keys > 0) {
      bool def_ok = true;
      int deferred = 0;
      for (int t : probes) {
        cu::AttnTokens sub = tok;
        sub.max_keys = st.max_keys;
        sub.table_off += t;
        sub.q_pos += t;
        sub.kv_end += t;
        poison(dsub.p, row);
        cu::AttnPartials ap;
        cu::paged_attention(dq.p + size_t(t) * row, dsub.p, 1, sub, f32_pool(dk.p, dv.p), c.n_heads, c.n_kv, c.hd, scale, c.window,
                            nullptr, &ap);
        cu::attention_merge(ap, dsub.p, nullptr);
        device_sync();
        deferred += ap.o != nullptr && !single_pass(nkeys[size_t(t)], st.part_keys, c.window) ? 1 : 0;
        def_ok = def_ok && bitwise_equal(dsub.download().data(), got.data() + size_t(t) * row, row);
      }
      report_bool("attention deferred merge == merged " + tag, def_ok,
                  "(" + std::to_string(deferred) + " of " + std::to_string(probes.size()) + " probes split and deferred)");
    }

    // The launch's key bound only shapes it (partition blocks, pipeline stages): a bound below every token's keys
    // (one partition block each, they loop) and a huge one (every partition its block, two stages) change no bit.
    bool shape_ok = true;
    for (const int64_t max_keys : {int64_t(1), int64_t(1) << 20}) {
      launch(0, T, dsub.p, max_keys);
      shape_ok = shape_ok && bitwise_equal(dsub.download().data(), got.data(), got.size());
    }
    report_bool("attention launch-bound independent " + tag, shape_ok);

    if (st.part_keys == 0) {
      off_out = got;
    } else if (!off_out.empty()) {
      // A token in one partition runs the split-off arithmetic exactly.
      bool same = true;
      int n_single = 0;
      for (int t = 0; t < T; ++t) {
        if (!single_pass(nkeys[size_t(t)], st.part_keys, c.window)) continue;
        ++n_single;
        same = same && bitwise_equal(got.data() + size_t(t) * row, off_out.data() + size_t(t) * row, row);
      }
      report_bool("attention one-partition tokens == split off " + tag, same,
                  "(" + std::to_string(n_single) + " of " + std::to_string(T) + " tokens)");
    }
    // The max-context bound only shapes the launch: results equal the unbounded run's bit for bit.
    bool seen = false;
    for (const auto& [keys, out] : by_part_keys) {
      if (keys != st.part_keys) continue;
      seen = true;
      report_bool("attention bound-independent " + tag, bitwise_equal(got.data(), out.data(), got.size()));
    }
    if (!seen) by_part_keys.emplace_back(st.part_keys, got);
  }
  reset_split();
}

// Device-side pseudo-random fill in [-1, 1) (large timing pools: no host RNG pass).
__global__ void fill_kernel(float* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed ^ uint32_t(i >> 32) * 0x9e3779b9u;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    p[i] = float(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
}

void fill_device(float* p, size_t n, uint32_t seed) {
  fill_kernel<<<1024, 256>>>(p, n, seed);
  cu::check(cudaGetLastError(), "fill launch");
}

// Decode batch for the graph test and the timings: token t is its own sequence over distinct pool blocks
// [t * nb, (t + 1) * nb) (shuffled), block size 16.
struct DecodeBatch {
  int T, n_heads, n_kv, hd, nb;
  static constexpr int bs = 16;
  Dev<float> k, v, q, out;
  Dev<int32_t> tables, off, qpos, end;
  cu::AttnTokens tok;
  std::vector<int32_t> h_tables;
  DecodeBatch(int T_, int n_heads_, int n_kv_, int hd_, int max_keys)
      : T(T_), n_heads(n_heads_), n_kv(n_kv_), hd(hd_), nb((max_keys + bs - 1) / bs),
        k(size_t(T_) * nb * bs * n_kv_ * hd_), v(k.n), q(size_t(T_) * n_heads_ * hd_), out(q.n),
        tables(size_t(T_) * nb), off(size_t(T_)), qpos(size_t(T_)), end(size_t(T_)) {
    fill_device(k.p, k.n, 11u);
    fill_device(v.p, v.n, 23u);
    fill_device(q.p, q.n, 37u);
    h_tables.resize(tables.n);
    std::iota(h_tables.begin(), h_tables.end(), 0);
    std::shuffle(h_tables.begin(), h_tables.end(), g_rng);
    tables.upload(h_tables);
    std::vector<int32_t> o(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) o[size_t(t)] = t * nb;
    off.upload(o);
    tok = cu::AttnTokens{off.p, qpos.p, end.p, tables.p, bs, 0};
    device_sync();
  }
  // Token t sees keys [0, keys[t]) (decode: q_pos = keys - 1).
  void set_keys(const std::vector<int32_t>& keys) {
    std::vector<int32_t> qp(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) qp[i] = keys[i] - 1;
    qpos.upload(qp);
    end.upload(keys);
    device_sync();  // launches on non-blocking streams follow
  }
  float scale() const { return 1.0f / std::sqrt(float(hd)); }
  void launch(cudaStream_t s) { cu::paged_attention(q.p, out.p, T, tok, f32_pool(k.p, v.p), n_heads, n_kv, hd, scale(), 0, s); }
  // f64 reference of token t over keys [0, nkeys).
  std::vector<double> reference(int t, int nkeys) const {
    const size_t width = size_t(n_kv) * hd, pool_rows = size_t(T) * nb * bs;
    std::vector<float> hk(pool_rows * width), hv(hk.size()), hq(q.n);
    cu::check(cudaMemcpy(hk.data(), k.p, hk.size() * sizeof(float), cudaMemcpyDeviceToHost), "download k");
    cu::check(cudaMemcpy(hv.data(), v.p, hv.size() * sizeof(float), cudaMemcpyDeviceToHost), "download v");
    cu::check(cudaMemcpy(hq.data(), q.p, hq.size() * sizeof(float), cudaMemcpyDeviceToHost), "download q");
    const int group = n_heads / n_kv;
    std::vector<double> ref(size_t(n_heads) * hd);
    for (int h = 0; h < n_heads; ++h) {
      const float* qh = hq.data() + (size_t(t) * n_heads + h) * hd;
      const size_t col = size_t(h / group) * hd;
      std::vector<double> sc(static_cast<size_t>(nkeys));
      double mx = -INFINITY;
      for (int j = 0; j < nkeys; ++j) {
        const size_t r = size_t(h_tables[size_t(t) * nb + size_t(j / bs)]) * bs + size_t(j % bs);
        double d = 0;
        for (int e = 0; e < hd; ++e) d += double(qh[e]) * double(hk[r * width + col + size_t(e)]);
        sc[size_t(j)] = d * scale();
        mx = std::max(mx, sc[size_t(j)]);
      }
      double l = 0;
      for (int j = 0; j < nkeys; ++j) {
        sc[size_t(j)] = std::exp(sc[size_t(j)] - mx);
        l += sc[size_t(j)];
      }
      for (int j = 0; j < nkeys; ++j) {
        const size_t r = size_t(h_tables[size_t(t) * nb + size_t(j / bs)]) * bs + size_t(j % bs);
        for (int e = 0; e < hd; ++e) ref[size_t(h) * hd + size_t(e)] += sc[size_t(j)] / l * double(hv[r * width + col + size_t(e)]);
      }
    }
    return ref;
  }
};

// The decoder's use: one launch captured into a graph keyed by T only, replayed while the per-token key
// counts change. Graph replay == eager launch bit for bit, and both match an f64 reference. Covers the split
// scratch allocated inside the capture (first use on a fresh stream) and one reserved before it.
void test_attention_graph() {
  const int T = 4, max_keys = 9000;
  DecodeBatch b(T, 14, 2, 64, max_keys);
  const std::vector<std::vector<int32_t>> key_sets{{300, 40, 5000, 1}, {9000, 260, 33, 2000}};
  std::vector<std::vector<std::vector<double>>> refs(key_sets.size());
  for (size_t i = 0; i < key_sets.size(); ++i)
    for (int t = 0; t < T; ++t) refs[i].push_back(b.reference(t, key_sets[i][size_t(t)]));
  const size_t row = size_t(b.n_heads) * b.hd;
  struct GraphSetting {
    SplitSetting split;
    bool reserve;  // paged_attention_reserve before the capture
  };
  const GraphSetting settings[] = {{{"split off", 0, 0}, false},
                                   {{"split 128", 128, 0}, false},
                                   {{"split 128", 128, 0}, true},
                                   {{"split 32 bound 64", 32, 64}, false}};
  for (const GraphSetting& gs : settings) {
    const char* scratch = gs.split.part_keys == 0 ? "" : gs.reserve ? ", scratch reserved" : ", scratch allocated in capture";
    const std::string tag = std::string(" [") + gs.split.name + scratch + "]";
    cudaStream_t s = nullptr;
    cudaGraphExec_t exec = nullptr;
    try {
      apply_split(gs.split);
      b.tok.max_keys = gs.split.max_keys;
      cu::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
      if (gs.reserve) cu::paged_attention_reserve(s);
      b.set_keys(key_sets[0]);
      device_sync();
      cu::check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
      try {
        b.launch(s);
      } catch (...) {
        cudaGraph_t g = nullptr;
        cudaStreamEndCapture(s, &g);
        if (g) cudaGraphDestroy(g);
        throw;
      }
      cudaGraph_t g = nullptr;
      cu::check(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
      const cudaError_t ie = cudaGraphInstantiate(&exec, g, 0);
      cudaGraphDestroy(g);
      cu::check(ie, "cudaGraphInstantiate");
      for (size_t i = 0; i < key_sets.size(); ++i) {
        b.set_keys(key_sets[i]);
        poison(b.out.p, b.out.n);
        b.launch(nullptr);
        device_sync();
        const std::vector<float> eager = b.out.download();
        poison(b.out.p, b.out.n);
        device_sync();
        cu::check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
        cu::check(cudaStreamSynchronize(s), "graph sync");
        const std::vector<float> replay = b.out.download();
        double err = 0, mx = 0;
        for (int t = 0; t < T; ++t)
          for (size_t e = 0; e < row; ++e) {
            const double r = refs[i][size_t(t)][e], got = eager[size_t(t) * row + e];
            err = std::isfinite(got) ? std::max(err, std::fabs(got - r)) : NAN;
            mx = std::max(mx, std::fabs(r));
            if (std::isnan(err)) break;
          }
        const std::string keys = "keys " + std::to_string(key_sets[i][0]) + "," + std::to_string(key_sets[i][1]) + "," +
                                 std::to_string(key_sets[i][2]) + "," + std::to_string(key_sets[i][3]);
        report("attention vs f64 reference " + keys + tag, err / std::max(mx, 1e-30), 1e-4);
        report_bool("attention graph replay == eager " + keys + tag, bitwise_equal(replay.data(), eager.data(), eager.size()));
      }
    } catch (const std::exception& e) {
      report_bool("attention graph" + tag, false, e.what());
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (s) {
      cudaStreamSynchronize(s);
      try {
        cu::paged_attention_release(s);
      } catch (const std::exception& e) {
        report_bool("attention scratch release" + tag, false, e.what());
      }
      cudaStreamDestroy(s);
    }
  }
  reset_split();
}

// Decode at batch 1 as the decoder runs it: on a created stream (PDL where the device has it) the token's own K/V row is
// written by the launch just before attention, which copies its older keys before waiting on that launch. Each round
// writes a new row (far from the old one) and checks the output against an f64 reference over the pools as written.
void test_attention_fresh_key() {
  const int keys = 150, n_heads = 16, n_kv = 2, hd = 128;
  DecodeBatch b(1, n_heads, n_kv, hd, 200);
  b.set_keys({keys});
  const int64_t width = int64_t(n_kv) * hd;
  const int pos = keys - 1;
  Dev<int32_t> slot(std::vector<int32_t>{b.h_tables[size_t(pos / DecodeBatch::bs)] * DecodeBatch::bs + pos % DecodeBatch::bs});
  Dev<float> knew{size_t(width)}, vnew{size_t(width)};
  cudaStream_t s = nullptr;
  cu::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  const SplitSetting settings[] = {{"split off", 0, 0}, {"split 64", 64, 0}, {"split 32 bound 200", 32, 200}};
  for (const SplitSetting& st : settings) {
    apply_split(st);
    b.tok.max_keys = st.max_keys;
    double worst = 0;
    for (int round = 0; round < 3; ++round) {
      knew.upload(rand_vec(size_t(width), 4.0f + float(round), 8.0f + float(round)));
      vnew.upload(rand_vec(size_t(width), -8.0f, -4.0f));
      poison(b.out.p, b.out.n);
      device_sync();
      cu::kv_write(knew.p, vnew.p, 1, slot.p, f32_pool(b.k.p, b.v.p), b.n_kv, b.hd, s);
      b.launch(s);
      cu::check(cudaStreamSynchronize(s), "fresh key sync");
      const std::vector<float> got = b.out.download();
      const std::vector<double> ref = b.reference(0, keys);
      double err = 0, mx = 0;
      for (size_t e = 0; e < ref.size(); ++e) {
        err = std::isfinite(got[e]) ? std::max(err, std::fabs(double(got[e]) - ref[e])) : INFINITY;
        mx = std::max(mx, std::fabs(ref[e]));
      }
      worst = std::max(worst, err / std::max(mx, 1e-30));
    }
    report("attention T=1 after its key write, PDL stream [" + std::string(st.name) + "]", worst, 1e-4);
  }
  reset_split();
  cu::check(cudaStreamDestroy(s), "cudaStreamDestroy");
}

// Decode attention timings, one graph of kReps launches per setting (as the decoder replays a step):
// split off vs partition sizes 64/128/256, and 128 with the launch's key bound = the keys (fewest idle blocks).
// The other settings launch with the bound unknown.
void time_decode_attention() {
  struct Shape {
    int n_heads, n_kv, hd;
  };
  const SplitSetting settings[] = {{"off", 0, 0}, {"p64", 64, 0}, {"p128", 128, 0}, {"p256", 256, 0}, {"p128+bound", 128, -1}};
  constexpr int kReps = 20, kLaunches = 5;
  for (const Shape& sh : {Shape{14, 2, 64}, Shape{16, 2, 128}})
    for (int T : {1, 64})
      for (int keys : {256, 512, 2048, 8192}) {
        DecodeBatch b(T, sh.n_heads, sh.n_kv, sh.hd, keys);
        b.set_keys(std::vector<int32_t>(size_t(T), keys));
        const double bytes = 2.0 * T * keys * sh.n_kv * sh.hd * sizeof(float);  // K and V of every visible key
        std::string line = "TIME paged_attention decode " + std::to_string(sh.n_heads) + "/" + std::to_string(sh.n_kv) +
                           " hd" + std::to_string(sh.hd) + " T=" + std::to_string(T) + " keys=" + std::to_string(keys) + ":";
        for (const SplitSetting& st : settings) {
          cu::set_attention_split(st.part_keys);
          b.tok.max_keys = st.max_keys < 0 ? keys : st.max_keys;
          const double us = attention_graph_us([&](cudaStream_t s) { b.launch(s); }, kReps, kLaunches);
          char buf[96];
          std::snprintf(buf, sizeof buf, " %s %.1f us %.0f GB/s |", st.name, us, bytes / (us * 1e-6) / 1e9);
          line += buf;
        }
        std::printf("%s\n", line.c_str());
      }
  reset_split();
}

void test_attention(ThreadPool& pool) {
  std::vector<AttnCase> cases;
  // Decode, T = 1 and T = 5 (partial blocks, a context of exactly one block, an empty context).
  cases.push_back({"14/2 hd64 bs16 T=1 ctx 37", 14, 2, 64, 16, 0, {{37, 1, {}}}});
  cases.push_back({"14/2 hd64 bs16 T=5 decode mixed ctx", 14, 2, 64, 16, 0,
                   {{37, 1, {}}, {15, 1, {}}, {0, 1, {}}, {250, 1, {}}, {1000, 1, {}}}});
  // Mixed prefill chunks + decode, T = 64.
  cases.push_back({"16/8 hd128 bs16 T=64 prefill+decode", 16, 8, 128, 16, 0,
                   {{0, 30, {}}, {45, 1, {}}, {300, 20, {}}, {7, 9, {}}, {130, 1, {}}, {2, 3, {}}}});
  cases.push_back({"8/1 hd256 bs32 T=64 prefill+decode", 8, 1, 256, 32, 0,
                   {{100, 40, {}}, {3, 1, {}}, {64, 23, {}}}});
  // Sliding window (window smaller and larger than a chunk of 32 keys).
  cases.push_back({"8/1 hd256 bs16 window 20", 8, 1, 256, 16, 20, {{100, 5, {}}, {10, 7, {}}, {600, 1, {}}}});
  cases.push_back({"14/2 hd64 bs16 window 100", 14, 2, 64, 16, 100, {{400, 12, {}}, {50, 1, {}}, {1300, 1, {}}}});
  // Window larger than a partition, with a bidirectional span that sees keys past the window.
  cases.push_back({"8/2 hd64 bs16 window 300 + bidir [5,30)", 8, 2, 64, 16, 300, {{600, 40, {5, 30}}, {2000, 1, {}}}});
  // Bidirectional spans (image tokens): tokens inside see the span's later keys.
  cases.push_back({"8/4 hd80 bs16 bidir [3,9) + [12,20)", 8, 4, 80, 16, 0,
                   {{10, 24, {3, 9, 12, 20}}, {33, 1, {}}, {0, 6, {0, 6}}}});
  cases.push_back({"4/1 hd96 bs16 bidir + window 8", 4, 1, 96, 16, 8, {{5, 20, {2, 15}}}});
  // Large groups: G = 16 (hd 96) and G = 32 at hd 256 (split over two head groups per KV head).
  cases.push_back({"32/2 hd96 bs16 G=16", 32, 2, 96, 16, 0, {{77, 3, {}}, {0, 2, {}}}});
  cases.push_back({"32/1 hd256 bs16 G=32 (head groups)", 32, 1, 256, 16, 0, {{90, 3, {}}, {3000, 1, {}}}});
  // Long context: many chunks (online softmax rescaling); past 32 partitions of 32/128 keys (they grow).
  cases.push_back({"8/2 hd64 bs16 ctx 20000", 8, 2, 64, 16, 0, {{20000, 2, {}}, {4099, 1, {}}}});
  // More tokens than one split scratch tile (64 MiB: 567 tokens at 14 heads hd 64, 126 at 32 heads hd 128).
  cases.push_back({"14/2 hd64 bs16 T=1200 prefill+decode (tiles)", 14, 2, 64, 16, 0,
                   {{0, 1100, {}}, {3000, 1, {}}, {500, 99, {}}}, 4});
  cases.push_back({"32/4 hd128 bs16 T=200 prefill+decode (tiles)", 32, 4, 128, 16, 0,
                   {{0, 150, {}}, {2000, 1, {}}, {700, 49, {}}}, 4});
  for (const AttnCase& c : cases) run_attention_case(pool, c);
  test_attention_graph();
  test_attention_fresh_key();
}

// ---------------------------------------------------------------- norms, rope

void test_norms() {
  for (int64_t dim : {64, 896, 1000, 4096}) {
    const int64_t rows = 7;
    NormWeight nw;
    nw.w = rand_vec(size_t(dim), 0.5f, 1.5f);
    nw.eps = 1e-6f;
    std::vector<float> x = rand_vec(size_t(rows * dim), -3.0f, 3.0f);
    std::vector<float> ref(x.size());
    rms_norm(x.data(), ref.data(), rows, nw);
    Dev<float> dx(x), dy(x.size()), dw(nw.w);
    cu::rms_norm(dx.p, dy.p, rows, dim, dw.p, nw.eps, nullptr);
    cu::rms_norm(dx.p, dx.p, rows, dim, dw.p, nw.eps, nullptr);  // in place
    device_sync();
    report("rms_norm dim " + std::to_string(dim), rel_err(dy.download(), ref), 1e-6);
    report("rms_norm in place dim " + std::to_string(dim), rel_err(dx.download(), ref), 1e-6);

    // add_rms_norm: h += o, xn = rms_norm(h).
    std::vector<float> h = rand_vec(size_t(rows * dim)), o = rand_vec(size_t(rows * dim));
    std::vector<float> href(h.size()), xnref(h.size());
    for (size_t i = 0; i < h.size(); ++i) href[i] = h[i] + o[i];
    rms_norm(href.data(), xnref.data(), rows, nw);
    Dev<float> dh(h), dob(o), dxn(h.size());
    cu::add_rms_norm(dh.p, dob.p, dxn.p, rows, dim, dw.p, nw.eps, nullptr);
    device_sync();
    report("add_rms_norm residual dim " + std::to_string(dim), rel_err(dh.download(), href), 0.0);
    report("add_rms_norm norm dim " + std::to_string(dim), rel_err(dxn.download(), xnref), 1e-6);
  }
}

void test_rope() {
  struct RC {
    int heads, hd, rot;
    bool qscale;
  };
  for (const RC& rc : {RC{14, 64, 64, false}, RC{8, 128, 128, true}, RC{4, 256, 64, true}, RC{2, 80, 40, false}}) {
    const int64_t n = 9;
    const RopeSpec spec = rope_default(rc.hd, rc.rot, 1e6, 1.0);
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = int32_t(i * 977 + 3);
    const RopeTable tab = rope_table(spec, pos.data(), n);
    std::vector<float> x = rand_vec(size_t(n) * rc.heads * rc.hd, -2.0f, 2.0f), ref = x;
    apply_rope(ref.data(), n, rc.heads, tab);
    std::vector<float> qs;
    if (rc.qscale) {
      qs = rand_vec(size_t(n), 0.5f, 2.0f);
      const size_t qd = size_t(rc.heads) * rc.hd;
      for (int64_t t = 0; t < n; ++t)
        for (size_t i = 0; i < qd; ++i) ref[size_t(t) * qd + i] *= qs[size_t(t)];
    }
    Dev<float> dx(x), dc(tab.cos), ds(tab.sin), dq(qs);
    cu::rope(dx.p, n, rc.heads, rc.hd, tab.half, dc.p, ds.p, rc.qscale ? dq.p : nullptr, nullptr);
    device_sync();
    report("rope heads " + std::to_string(rc.heads) + " hd " + std::to_string(rc.hd) + " rot " + std::to_string(rc.rot) +
               (rc.qscale ? " q_scale" : ""),
           rel_err(dx.download(), ref), 0.0);
  }
}

// The fused rope(q) + rope(k) + kv_write against the three separate launches: bitwise equal q and pools, a
// padding token (slot -1) writes nothing, k is left unrotated.
void test_rope_kv_write() {
  struct RC {
    int heads, kv, hd, rot;
    bool qscale;
  };
  for (const RC& rc : {RC{14, 2, 64, 64, false}, RC{16, 8, 128, 128, true}, RC{4, 1, 80, 40, true}}) {
    const int64_t n = 9, slots = 64, width = int64_t(rc.kv) * rc.hd;
    const RopeSpec spec = rope_default(rc.hd, rc.rot, 1e6, 1.0);
    std::vector<int32_t> pos(static_cast<size_t>(n)), slot(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      pos[size_t(i)] = int32_t(i * 501 + 7);
      slot[size_t(i)] = i == 4 ? -1 : int32_t((i * 37 + 5) % slots);
    }
    const RopeTable tab = rope_table(spec, pos.data(), n);
    const std::vector<float> q = rand_vec(size_t(n) * rc.heads * rc.hd, -2.0f, 2.0f);
    const std::vector<float> k = rand_vec(size_t(n * width), -2.0f, 2.0f), v = rand_vec(size_t(n * width));
    const std::vector<float> pool0 = rand_vec(size_t(slots * width));
    const std::vector<float> qs = rand_vec(size_t(n), 0.5f, 2.0f);
    Dev<float> dc(tab.cos), ds(tab.sin), dqs(qs);
    Dev<int32_t> dslot(slot);
    Dev<float> q1(q), k1(k), v1(v), kp1(pool0), vp1(pool0);  // separate launches
    Dev<float> q2(q), k2(k), v2(v), kp2(pool0), vp2(pool0);  // fused
    const float* qsp = rc.qscale ? dqs.p : nullptr;
    cu::rope(q1.p, n, rc.heads, rc.hd, tab.half, dc.p, ds.p, qsp, nullptr);
    cu::rope(k1.p, n, rc.kv, rc.hd, tab.half, dc.p, ds.p, nullptr, nullptr);
    cu::kv_write(k1.p, v1.p, n, dslot.p, f32_pool(kp1.p, vp1.p), rc.kv, rc.hd, nullptr);
    cu::rope_kv_write(q2.p, k2.p, v2.p, n, rc.heads, rc.kv, rc.hd, tab.half, dc.p, ds.p, qsp, dslot.p,
                      f32_pool(kp2.p, vp2.p), nullptr);
    device_sync();
    const auto a = q1.download(), b = q2.download(), ka = kp1.download(), kb = kp2.download();
    const auto va = vp1.download(), vb = vp2.download(), kk = k2.download();
    const bool ok = bitwise_equal(a.data(), b.data(), a.size()) && bitwise_equal(ka.data(), kb.data(), ka.size()) &&
                    bitwise_equal(va.data(), vb.data(), va.size()) && bitwise_equal(kk.data(), k.data(), k.size());
    report_bool("rope_kv_write heads " + std::to_string(rc.heads) + "/" + std::to_string(rc.kv) + " hd " +
                    std::to_string(rc.hd) + " rot " + std::to_string(rc.rot) + (rc.qscale ? " q_scale" : ""),
                ok, ok ? "bitwise equal to rope + rope + kv_write" : "differs from rope + rope + kv_write");
  }
}

// ---------------------------------------------------------------- rows

// Raw dtype bytes of f32 values (the store a checkpoint would hold).
std::vector<uint8_t> to_dtype(const std::vector<float>& v, DType dt) {
  std::vector<uint8_t> out(v.size() * dtype_size(dt));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::F32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      uint32_t b;
      std::memcpy(&b, &v[i], 4);
      uint16_t h;
      if (dt == DType::BF16) {
        h = uint16_t((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
      } else {
        // f32 -> f16 through the CUDA host conversion (round to nearest even).
        const __half hv = __float2half_rn(v[i]);
        std::memcpy(&h, &hv, 2);
      }
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

void test_embed() {
  const int64_t vocab = 50, in = 256, n = 11;
  const float escale = 1.7f;
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t((i * 37 + 5) % vocab);
  ids[3] = ids[4];  // a repeated id
  Dev<int32_t> dids(ids);
  const std::vector<float> table = rand_vec(size_t(vocab * in));

  auto check_weight = [&](const Weight& hw, const cu::DevWeight& dw, const std::string& name) {
    std::vector<float> ref(size_t(n * in));
    embedding_rows(hw, ids.data(), n, ref.data());
    for (float& x : ref) x *= escale;
    Dev<float> dout(ref.size());
    cu::embed_rows(dw, dids.p, n, escale, dout.p, nullptr);
    device_sync();
    report("embed_rows " + name, rel_err(dout.download(), ref), 0.0);
  };

  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const std::vector<uint8_t> bytes = to_dtype(table, dt);
    Dev<uint8_t> db(bytes);
    Weight hw;
    hw.kind = WeightKind::Dense;
    hw.dtype = dt;
    hw.out = vocab;
    hw.in = in;
    hw.data = bytes.data();
    hw.name = "embed";
    check_weight(hw, cu::device_view(hw, db.p, nullptr, nullptr), std::string("dense ") + dtype_name(dt));
  }
  struct QC {
    int bits, group;
    DType dt;
  };
  for (const QC& qc : {QC{4, 64, DType::BF16}, QC{8, 32, DType::F16}, QC{4, 128, DType::F32}, QC{8, 64, DType::BF16}}) {
    std::vector<uint32_t> packed;
    std::vector<uint8_t> sc, bi;
    quantize_affine_typed(table.data(), vocab, in, qc.group, qc.bits, qc.dt, packed, sc, bi);
    Dev<uint32_t> dp(packed);
    Dev<uint8_t> ds(sc), dbias(bi);
    Weight hw;
    hw.kind = WeightKind::Affine;
    hw.dtype = qc.dt;
    hw.out = vocab;
    hw.in = in;
    hw.data = packed.data();
    hw.scales = sc.data();
    hw.biases = bi.data();
    hw.bits = qc.bits;
    hw.group = qc.group;
    hw.name = "embed";
    const std::string name = "affine " + std::to_string(qc.bits) + "-bit g" + std::to_string(qc.group) + " " + dtype_name(qc.dt);
    check_weight(hw, cu::device_view(hw, dp.p, ds.p, dbias.p), name);
    // The tiled copy a tied head gets under Fast (vocab 50: the last tile is padded), gathered to the same values.
    std::vector<uint32_t> tc(cu::tiled_words(vocab, in, qc.bits));
    cu::tile_codes(packed.data(), vocab, in, qc.bits, qc.group, tc.data());
    const int esz = int(dtype_size(qc.dt));
    std::vector<uint8_t> ts(cu::tiled_scale_bytes(vocab, in / qc.group, esz));
    cu::tile_scales(sc.data(), bi.data(), vocab, in / qc.group, esz, ts.data());
    Dev<uint32_t> dtc(tc);
    Dev<uint8_t> dts(ts);
    cu::DevWeight tw = cu::device_view(hw, dtc.p, dts.p, dts.p);
    tw.tiled = true;
    check_weight(hw, tw, name + " tiled");
  }
}

// copy_bytes between device buffers and page-locked host memory, aligned (16-byte words, then a tail) and not.
void test_copy_bytes() {
  const size_t cap = (size_t(1) << 20) + 64;
  std::vector<uint8_t> pattern(cap);
  for (size_t i = 0; i < cap; ++i) pattern[i] = uint8_t((i * 131 + 7) >> 3);
  uint8_t* host = nullptr;
  cu::check(cudaHostAlloc(reinterpret_cast<void**>(&host), cap, cudaHostAllocDefault), "cudaHostAlloc");
  Dev<uint8_t> a(pattern), b(cap);
  for (size_t bytes : {size_t(4), size_t(16), size_t(100), size_t(4096 + 12), size_t(1) << 20})
    for (size_t off : {size_t(0), size_t(3)}) {
      const std::string what = std::to_string(bytes) + " bytes" + (off ? " unaligned" : "");
      cu::check(cudaMemset(b.p, 0, cap), "cudaMemset");
      cu::copy_bytes(b.p + off, a.p + 2 * off, bytes, false, nullptr);  // device -> device
      device_sync();
      std::vector<uint8_t> got = b.download();
      bool ok = std::memcmp(got.data() + off, pattern.data() + 2 * off, bytes) == 0 && got[off + bytes] == 0;
      std::memset(host, 0, cap);
      cu::copy_bytes(host + off, a.p + off, bytes, false, nullptr);  // device -> host
      device_sync();
      ok = ok && std::memcmp(host + off, pattern.data() + off, bytes) == 0 && host[off + bytes] == 0;
      for (size_t i = 0; i < cap; ++i) host[i] = uint8_t(~pattern[i]);
      cu::check(cudaMemset(b.p, 0, cap), "cudaMemset");
      cu::copy_bytes(b.p + off, host + off, bytes, true, nullptr);  // host -> device, read before the wait
      device_sync();
      got = b.download();
      ok = ok && std::memcmp(got.data() + off, host + off, bytes) == 0 && got[off + bytes] == 0;
      report_bool("copy_bytes " + what, ok, ok ? "device/host copies exact, nothing past the end" : "bytes differ");
    }
  cudaFreeHost(host);
}

void test_rows() {
  const int64_t dim = 300, rows_total = 20, n = 4;
  const std::vector<float> base = rand_vec(size_t(rows_total * dim)), src = rand_vec(size_t(n * dim));
  const std::vector<int32_t> rows{17, 2, 9, 0};
  Dev<int32_t> drows(rows);
  for (bool add : {false, true}) {
    std::vector<float> ref = base;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t d = 0; d < dim; ++d) {
        float& y = ref[size_t(rows[size_t(i)] * dim + d)];
        y = add ? y + src[size_t(i * dim + d)] : src[size_t(i * dim + d)];
      }
    Dev<float> dst(base), dsrc(src);
    cu::scatter_rows(dsrc.p, drows.p, n, dim, dst.p, add, nullptr);
    device_sync();
    report(std::string("scatter_rows ") + (add ? "add" : "copy"), rel_err(dst.download(), ref), 0.0);
  }
  std::vector<float> ref(size_t(n * dim));
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(base.begin() + rows[size_t(i)] * dim, dim, ref.begin() + i * dim);
  Dev<float> dsrc(base), dst(ref.size());
  cu::gather_rows(dsrc.p, drows.p, n, dim, dst.p, nullptr);
  device_sync();
  report("gather_rows", rel_err(dst.download(), ref), 0.0);

  const std::vector<float> x = rand_vec(100003, -80.0f, 80.0f);
  std::vector<float> sref(x.size());
  const float cap = 30.0f;
  for (size_t i = 0; i < x.size(); ++i) sref[i] = cap * std::tanh(x[i] / cap);
  Dev<float> dx(x);
  cu::softcap(dx.p, int64_t(x.size()), cap, nullptr);
  device_sync();
  report("softcap", rel_err(dx.download(), sref), 1e-6);
}

// ---------------------------------------------------------------- argmax

// Lowest id among the max over allowed finite values; -1 when none.
int32_t argmax_ref(const float* x, int64_t vocab, const uint32_t* mask) {
  int32_t best = -1;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!std::isfinite(x[i])) continue;
    if (mask && !((mask[i >> 5] >> (i & 31)) & 1u)) continue;
    if (best < 0 || x[i] > x[best]) best = int32_t(i);
  }
  return best;
}

void test_argmax() {
  for (int64_t vocab : {int64_t(151936), int64_t(262149), int64_t(1000)}) {
    const int64_t m = 8, words = (vocab + 31) / 32;
    std::vector<float> x = rand_vec(size_t(m * vocab), -10.0f, 10.0f);
    auto row = [&](int64_t r) { return x.data() + r * vocab; };
    // Row 1: ties at the max (ids 777 and 5 and vocab-1) -> 5. Row 2: NaNs, including at the top.
    for (int64_t id : {int64_t(777), int64_t(5), vocab - 1}) row(1)[id] = 50.0f;
    for (int64_t id = 0; id < vocab; id += 97) row(2)[id] = NAN;
    row(2)[0] = NAN;
    row(2)[vocab / 2] = 60.0f;
    // Row 3: +inf and -inf never win.
    row(3)[11] = INFINITY;
    row(3)[12] = -INFINITY;
    // Row 5: all NaN/-inf -> -1 (no mask). Row 6: masked to a set holding only NaN -> -1.
    for (int64_t i = 0; i < vocab; ++i) row(5)[i] = (i & 1) ? NAN : -INFINITY;
    // Masks: mask 0 allows ids % 3 == 1 plus a tie pair; mask 1 allows only NaN ids of row 6.
    std::vector<uint32_t> masks(size_t(2 * words), 0u);
    auto allow = [&](int mrow, int64_t id) { masks[size_t(mrow * words + (id >> 5))] |= 1u << (id & 31); };
    for (int64_t i = 1; i < vocab; i += 3) allow(0, i);
    row(4)[vocab - 2] = 99.0f;  // the global max of row 4, but masked out by mask 0 unless allowed
    if ((vocab - 2) % 3 == 1) row(4)[vocab - 2] = -99.0f;
    row(4)[4] = 40.0f;  // allowed (4 % 3 == 1)
    row(4)[10] = 40.0f;  // allowed tie, higher id
    for (int64_t i = 0; i < vocab; i += 7) {
      row(6)[i] = NAN;
      allow(1, i);
    }
    // Row 7 uses mask 0 with ties and NaN; row 0 is plain.
    row(7)[1] = NAN;
    row(7)[7] = 45.0f;
    row(7)[13] = 45.0f;
    const std::vector<int32_t> mask_of{-1, -1, -1, -1, 0, -1, 1, 0};

    std::vector<int32_t> ref(static_cast<size_t>(m)), ref_nomask(static_cast<size_t>(m));
    for (int64_t r = 0; r < m; ++r) {
      ref[size_t(r)] = argmax_ref(row(r), vocab, mask_of[size_t(r)] >= 0 ? masks.data() + mask_of[size_t(r)] * words : nullptr);
      ref_nomask[size_t(r)] = argmax_ref(row(r), vocab, nullptr);
    }
    Dev<float> dx(x);
    Dev<uint32_t> dm(masks);
    Dev<int32_t> dof(mask_of), dtok(static_cast<size_t>(m)), dtok1(1);
    cu::argmax_rows(dx.p, m, vocab, dm.p, dof.p, dtok.p, nullptr);
    device_sync();
    const std::vector<int32_t> got = dtok.download();
    cu::argmax_rows(dx.p, m, vocab, nullptr, nullptr, dtok.p, nullptr);
    device_sync();
    const std::vector<int32_t> got_nomask = dtok.download();
    const std::string vs = " vocab " + std::to_string(vocab);
    std::string detail;
    for (int64_t r = 0; r < m; ++r)
      detail += std::to_string(got[size_t(r)]) + "/" + std::to_string(ref[size_t(r)]) + " ";
    report_bool("argmax masked (ties, NaN, inf, none)" + vs, got == ref, "got/ref " + detail);
    report_bool("argmax no mask" + vs, got_nomask == ref_nomask);
    report_bool("argmax expected ids" + vs,
                ref[1] == 5 && ref[2] == int32_t(vocab / 2) && ref[4] == 4 && ref[5] == -1 && ref[6] == -1 && ref[7] == 7 &&
                    ref[3] != 11 && ref[3] != 12);

    // The CPU sampler (greedy) agrees on the rows it accepts (finite max, no NaN before the max).
    bool sampler_ok = true;
    for (int64_t r : {int64_t(0), int64_t(1), int64_t(4)}) {
      SampleParams sp;
      if (mask_of[size_t(r)] >= 0)
        sp.bitmask.assign(masks.begin() + mask_of[size_t(r)] * words, masks.begin() + (mask_of[size_t(r)] + 1) * words);
      std::vector<float> lr(row(r), row(r) + vocab);
      sampler_ok = sampler_ok && sample_token(lr.data(), vocab, sp).token == got[size_t(r)];
    }
    report_bool("argmax == CPU greedy sampler" + vs, sampler_ok);

    // Batch invariance: each row alone (m = 1, its own mask index) == its result in the m-row launch.
    bool inv_ok = true;
    for (int64_t r = 0; r < m; ++r) {
      cu::argmax_rows(dx.p + r * vocab, 1, vocab, dm.p, dof.p + r, dtok1.p, nullptr);
      device_sync();
      inv_ok = inv_ok && dtok1.download()[0] == got[size_t(r)];
    }
    report_bool("argmax batch invariance" + vs, inv_ok);
  }
}

}  // namespace

int main() {
  return run_op_test([] {
    ThreadPool pool(4);
    test_attention(pool);
    test_norms();
    test_rope();
    test_rope_kv_write();
    test_embed();
    test_rows();
    test_copy_bytes();
    test_argmax();
    time_decode_attention();
  });
}
