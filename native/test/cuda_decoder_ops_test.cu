// The decoder ops of the CUDA op backend (ops::Backend::embed_rows, softcap, write_kv, paged_attention) against the
// CPU reference: paged causal attention over a two-step schedule (a prefill chunk, then more tokens on the same
// blocks) with sliding windows, GQA, bidirectional blocks, head_dim 64 / 256 (attention.cu's paged_attention) and
// 512 (wide_attention), every KV dtype, a KV-shared layer reading its source's cache, and the step metadata reused
// across layers and span sets (never across steps with other blocks); and the shared op suite
// (backend_ops_compare.h) on a CudaOps with decoder_matmuls (the fused decoder's matmul for every weight format). One PASS/FAIL line per
// check; exit status 1 on any failure; without a GPU one SKIP line and exit 0.
//   node scripts/build-cuda.mjs --tests && build/cuda/tests/cuda_decoder_ops_test
// Tolerance: max |cuda - cpu| / max |cpu|. Attention is f32 on both (the CUDA KV holds the CPU pool's bytes, widened
// the same way), so 2e-5 as the other f32 ops; embed_rows gathers on the host, so 0.
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>
#include "backend/ops.h"
#include "cpu/cpu_ops.h"
#include "cpu/threadpool.h"
#include "cuda/cuda_ops.h"
#include "kv/kv_pool.h"
#include "tensor/dtype.h"
#include "backend_ops_compare.h"
#include "cuda_test_util.h"

using namespace rapid;
using cuda::test::report;
using ops_compare::detail::rel_err;

namespace {

constexpr double kExactOp = 2e-5;

std::mt19937 g_rng(11);

// n values uniform in [-a, a).
std::vector<float> randv(int64_t n, float a = 1.f) { return cuda::test::uniform_vec(g_rng, size_t(n), -a, a); }

std::vector<float> run(ops::Backend& be, int64_t n, const std::function<void(float*)>& op) {
  ops::Buf y = be.alloc(n);
  op(y.data());
  std::vector<float> h(static_cast<size_t>(n));
  be.download(y.data(), n, h.data());
  return h;
}

void embed_cases(ops::Backend& cpu, ops::Backend& gpu) {
  const int64_t vocab = 97, width = 40;
  const std::vector<float> f32 = randv(vocab * width);
  std::vector<uint16_t> bf(f32.size());
  for (size_t i = 0; i < f32.size(); ++i) bf[i] = f32_to_bf16(f32[i]);
  for (int fmt = 0; fmt < 2; ++fmt) {
    Weight w;
    w.dtype = fmt ? DType::BF16 : DType::F32;
    w.out = vocab, w.in = width;
    w.data = fmt ? static_cast<const void*>(bf.data()) : static_cast<const void*>(f32.data());
    w.name = "table";
    const std::vector<int32_t> ids{3, 0, 96, 3, 50};
    const int64_t ldy = width + 8;
    auto op = [&](ops::Backend& be) {
      return run(be, int64_t(ids.size()) * ldy, [&](float* y) { be.embed_rows(w, ids, 1.5f, y, ldy); });
    };
    report(std::string("embed_rows ") + (fmt ? "bf16" : "f32") + " scale 1.5, ld > width", rel_err(op(gpu), op(cpu)), 0.0);
  }
  const std::vector<float> x = randv(1000, 20.f);
  auto op = [&](ops::Backend& be) {
    ops::Buf b = be.upload(x.data(), int64_t(x.size()));
    be.softcap(b.data(), int64_t(x.size()), 30.f);
    std::vector<float> h(x.size());
    be.download(b.data(), int64_t(x.size()), h.data());
    return h;
  };
  report("softcap 30 over 1000 values", rel_err(op(gpu), op(cpu)), kExactOp);
}

struct AttnCase {
  int hd, heads, kv_heads, window;
  KvDtype dtype;
  bool bidir, shared;
};

// Two sequences on interleaved blocks: step 1 prefills 37 and 5 tokens, step 2 adds 1 and 9 (a decode token and a
// chunk); each step writes K/V then attends, on layer 0 (or, shared, on layer 1 reading layer 0's cache).
void attention_case(ThreadPool& pool, const AttnCase& c) {
  const int bs = 16;
  std::vector<KvLayerSpec> layers{{c.kv_heads, c.hd, -1}, {c.kv_heads, c.hd, c.shared ? 0 : -1}};
  const size_t budget = size_t(24) * bs * size_t(c.kv_heads) * size_t(c.hd) * 4 * 2 * 2 + (size_t(1) << 16);
  KvPool host(layers, bs, budget, true, c.dtype);
  KvPool geom(layers, bs, budget, false, c.dtype);
  ops::CpuBackend cpu(pool);
  const std::unique_ptr<ops::Backend> gpu = cuda::make_cuda_ops();
  const std::vector<int32_t> table_a{4, 0, 7, 2}, table_b{1, 5, 3};
  const std::vector<int32_t> bidir{1, 4};  // span offsets [1, 4) of the first step's second sequence
  const int attn_layer = c.shared ? 1 : 0;
  int64_t ctx_a = 0, ctx_b = 0;
  double worst = 0;
  for (const auto& [na, nb] : {std::pair<int64_t, int64_t>{37, 5}, {1, 9}}) {
    std::vector<SeqSpan> spans(2);
    spans[0] = SeqSpan{0, na, ctx_a, table_a.data(), int64_t(table_a.size()), nullptr, 0};
    spans[1] = SeqSpan{na, nb, ctx_b, table_b.data(), int64_t(table_b.size()), nullptr, 0};
    if (c.bidir && ctx_b == 0) spans[1].bidir = bidir.data(), spans[1].n_bidir = 1;
    const int64_t T = na + nb, kd = int64_t(c.kv_heads) * c.hd, qd = int64_t(c.heads) * c.hd;
    const std::vector<float> k = randv(T * kd), v = randv(T * kd), q = randv(T * qd, 0.3f);
    const AttnShape shape{c.heads, c.kv_heads, c.hd, 1.0f / std::sqrt(float(c.hd)), c.window};
    auto op = [&](ops::Backend& be, KvPool& kv) {
      ops::Buf kb = be.upload(k.data(), T * kd), vb = be.upload(v.data(), T * kd), qb = be.upload(q.data(), T * qd);
      be.write_kv(kv, 0, kb.data(), vb.data(), spans);
      return run(be, T * qd, [&](float* out) { be.paged_attention(kv, attn_layer, qb.data(), out, spans, shape); });
    };
    worst = std::max(worst, rel_err(op(*gpu, geom), op(cpu, host)));
    ctx_a += na, ctx_b += nb;
  }
  char name[160];
  std::snprintf(name, sizeof name, "paged_attention hd %d heads %d/%d window %d %s%s%s", c.hd, c.heads, c.kv_heads,
                c.window, kv_dtype_name(c.dtype), c.bidir ? " bidir" : "", c.shared ? " kv-shared" : "");
  report(name, worst, kExactOp);
}

// The step metadata DeviceKv builds once per span set and reuses across layers: one step over three layers (two owners,
// one KV-shared) attending with two span sets (bidirectional and causal, as Gemma 4's sliding and full layers) and
// per-layer windows and head counts; then a step whose spans have the same sizes and positions in the same vectors
// but other block ids (new sequences on other blocks), which must not reuse the first step's metadata.
void span_set_case(ThreadPool& pool) {
  const int bs = 16, hd = 64, kvh = 2;
  std::vector<KvLayerSpec> layers{{kvh, hd, -1}, {kvh, hd, -1}, {kvh, hd, 0}};
  const size_t budget = size_t(24) * bs * size_t(kvh) * size_t(hd) * 4 * 2 * 3 + (size_t(1) << 16);
  KvPool host(layers, bs, budget, true, KvDtype::F32);
  KvPool geom(layers, bs, budget, false, KvDtype::F32);
  ops::CpuBackend cpu(pool);
  const std::unique_ptr<ops::Backend> gpu = cuda::make_cuda_ops();
  std::vector<int32_t> table_a{4, 0, 7}, table_b{1, 5};
  const std::vector<int32_t> bidir{2, 9};
  const int64_t na = 33, nb = 12, T = na + nb, kd = int64_t(kvh) * hd;
  double worst = 0;
  for (int step = 0; step < 2; ++step) {
    if (step == 1) table_a = {9, 3, 11}, table_b = {8, 6};  // same vectors and sizes, other blocks
    std::vector<SeqSpan> spans(2), causal;
    spans[0] = SeqSpan{0, na, 0, table_a.data(), int64_t(table_a.size()), nullptr, 0};
    spans[1] = SeqSpan{na, nb, 0, table_b.data(), int64_t(table_b.size()), bidir.data(), 1};
    causal = spans;
    causal[1].bidir = nullptr, causal[1].n_bidir = 0;
    struct Layer {
      int layer, heads, window;
      bool bidir;
    };
    const Layer ls[] = {{0, 4, 8, true}, {1, 2, 0, false}, {2, 4, 16, true}, {1, 4, 0, false}, {0, 2, 0, true}};
    const std::vector<float> k0 = randv(T * kd), v0 = randv(T * kd), k1 = randv(T * kd), v1 = randv(T * kd);
    std::vector<std::vector<float>> qs;
    for (const Layer& l : ls) qs.push_back(randv(T * int64_t(l.heads) * hd, 0.3f));
    auto op = [&](ops::Backend& be, KvPool& kv) {
      ops::Buf a = be.upload(k0.data(), T * kd), b = be.upload(v0.data(), T * kd);
      ops::Buf c = be.upload(k1.data(), T * kd), d = be.upload(v1.data(), T * kd);
      be.write_kv(kv, 0, a.data(), b.data(), spans);
      be.write_kv(kv, 1, c.data(), d.data(), spans);
      std::vector<float> all;
      for (size_t i = 0; i < std::size(ls); ++i) {
        const Layer& l = ls[i];
        const int64_t qd = int64_t(l.heads) * hd;
        ops::Buf qb = be.upload(qs[i].data(), T * qd);
        const AttnShape shape{l.heads, kvh, hd, 1.0f / std::sqrt(float(hd)), l.window};
        const std::vector<float> o = run(be, T * qd, [&](float* out) {
          be.paged_attention(kv, l.layer, qb.data(), out, l.bidir ? spans : causal, shape);
        });
        all.insert(all.end(), o.begin(), o.end());
      }
      return all;
    };
    worst = std::max(worst, rel_err(op(*gpu, geom), op(cpu, host)));
  }
  report("paged_attention step metadata: 2 span sets over 5 layer calls, then other blocks in the same vectors", worst,
         kExactOp);
}

}  // namespace

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIP cuda_decoder_ops_test: no CUDA device (%s)\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
  }
  return cuda::test::run_op_test([&] {
    ThreadPool pool(0);
    {
      ops::CpuBackend cpu(pool);
      const std::unique_ptr<ops::Backend> gpu = cuda::make_cuda_ops();
      embed_cases(cpu, *gpu);
      // The decoder's matmuls (CudaOps with decoder_matmuls, as cuda_ops_model makes it) through the shared op suite:
      // every weight format, Exact and Fast (against the CPU's int8 Fast, as cuda_ops_test's suite: 3e-2).
      const std::unique_ptr<ops::Backend> dec = cuda::make_cuda_ops(/*decoder_matmuls=*/true);
      ops_compare::compare_backends(cpu, *dec, {kExactOp, 3e-2}, [](bool ok, const std::string& what, double err) {
        cuda::test::report_bool("decoder_matmuls " + what, ok, "rel_err=" + std::to_string(err));
      });
    }
    const AttnCase cases[] = {
        {64, 4, 2, 0, KvDtype::F32, false, false},   {64, 4, 1, 8, KvDtype::F32, true, false},
        {256, 8, 1, 0, KvDtype::BF16, false, false}, {256, 8, 1, 16, KvDtype::BF16, true, true},
        {256, 4, 2, 0, KvDtype::I8, false, false},   {256, 4, 4, 12, KvDtype::F16, false, false},
        {512, 8, 1, 0, KvDtype::BF16, false, false}, {512, 8, 2, 0, KvDtype::F32, false, true},
        {512, 4, 1, 0, KvDtype::I8, false, false},   {512, 4, 2, 20, KvDtype::F16, true, false},
    };
    for (const AttnCase& c : cases) attention_case(pool, c);
    span_set_case(pool);
  });
}
