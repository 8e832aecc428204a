// Times the CUDA MoE block (cuda/moe.*) alone on a Qwen3-30B-A3B-shaped layer (128 experts, top-8, hidden 2048,
// expert width 768; MLX 4-bit g64 experts, 8-bit router), the issue-34 decode shape: `reps` blocks captured into
// one graph, replayed, microseconds per block at T tokens. Routing "spread": every token its own random row (the
// experts a batch touches grow with T); "same": one row repeated (8 experts, every slot on them). The effective
// bandwidth counts the router and each touched expert's bytes once. Random codes and scales: speed only (the
// arithmetic is cuda_moe_test's; each line ends with the output's bits, to compare builds).
//   build/cuda/tests/cuda_moe_bench [--tokens 1,8,64] [--rounds 5] [--reps 48] [--bits 4|8] [--mode spread|same]
//                                   [--precision exact|fast|exact,fast]   (fast: 4-bit experts on tensor cores)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>
#include "cuda/moe.h"
#include "cuda_test_util.h"
#include "layers/moe.h"
#include "tensor/weight.h"

using namespace rapid;
namespace cu = rapid::cuda;
using namespace rapid::cuda::test;

namespace {

std::mt19937 g_rng(77);

// Stacked [rows, in] affine weight of random codes, bf16 scales in [0.004, 0.012) and biases of -2^(bits-1)
// scales.
struct Stacked {
  std::vector<uint32_t> codes;
  std::vector<uint16_t> scales, biases;
  Weight all;
  Stacked(int64_t rows, int64_t in, int bits, int group, const std::string& name) {
    codes.resize(size_t(rows * in * bits / 32));
    for (uint32_t& c : codes) c = g_rng();
    const size_t ng = size_t(rows * (in / group));
    scales.resize(ng);
    biases.resize(ng);
    std::uniform_real_distribution<float> d(0.004f, 0.012f);
    for (size_t i = 0; i < ng; ++i) {
      const float s = d(g_rng);
      scales[i] = f32_to_bf16(s);
      biases[i] = f32_to_bf16(-float(1 << (bits - 1)) * s);
    }
    all.name = name;
    all.kind = WeightKind::Affine;
    all.dtype = DType::BF16;
    all.bits = bits;
    all.group = group;
    all.out = rows;
    all.in = in;
    all.data = codes.data();
    all.scales = scales.data();
    all.biases = biases.data();
  }
  size_t bytes_per_expert(int64_t E) const {
    return (codes.size() * 4 + scales.size() * 4) / size_t(E);
  }
};

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  for (const char* p = s; *p;) {
    v.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> Ts = {1, 8, 64};
  int rounds = 5, reps = 48, bits = 4;
  std::string modes = "spread,same", precision = "exact";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--tokens") Ts = parse_list(argv[i + 1]);
    else if (k == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (k == "--reps") reps = std::atoi(argv[i + 1]);
    else if (k == "--bits") bits = std::atoi(argv[i + 1]);
    else if (k == "--mode") modes = argv[i + 1];
    else if (k == "--precision") precision = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: cuda_moe_bench [--tokens 1,8,64] [--rounds N] [--reps N] [--bits 4|8] [--mode spread|same] [--precision exact|fast|exact,fast]\n");
      return 2;
    }
  }
  if (rounds < 1 || reps < 1 || (bits != 4 && bits != 8) || Ts.empty() || (precision != "exact" && precision != "fast" && precision != "exact,fast")) {
    std::fprintf(stderr, "cuda_moe_bench: bad option value\n");
    return 2;
  }
  print_device();
  // "exact,fast": both at each T, one after the other (the f32 chains against the tensor-core tiles, same run).
  std::vector<cu::MathMode> maths;
  if (precision != "fast") maths.push_back(cu::MathMode::Exact);
  if (precision != "exact") maths.push_back(cu::MathMode::Fast);
  const int64_t E = 128, H = 2048, I = 768;
  const int k = 8;
  const Stacked router(E, H, 8, 64, "router"), gate(E * I, H, bits, 64, "gate"), up(E * I, H, bits, 64, "up"),
      down(E * H, I, bits, 64, "down");
  MoeBlock block;
  block.router.gate.w = router.all;
  block.router.opt.top_k = k;
  block.experts.n_experts = E;
  block.experts.hidden = H;
  block.experts.ffn = I;
  block.experts.gate = expert_views(gate.all, E);
  block.experts.up = expert_views(up.all, E);
  block.experts.down = expert_views(down.all, E);
  const std::string why = cu::moe_unsupported(block);
  if (!why.empty()) {
    std::fprintf(stderr, "moe_unsupported: %s\n", why.c_str());
    return 1;
  }
  std::vector<void*> allocations;
  const cu::DevMoe dev_exact = cu::upload_moe(block, allocations, false);
  const cu::DevMoe dev_fast = cu::upload_moe(block, allocations, true);  // 4-bit: tensor-core tiles
  const size_t expert_bytes = gate.bytes_per_expert(E) + up.bytes_per_expert(E) + down.bytes_per_expert(E);
  const size_t router_bytes = router.codes.size() * 4 + router.scales.size() * 4;
  std::printf("shape: E=%lld top-%d hidden %lld ffn %lld, %d-bit g64 experts (%.2f MB each), 8-bit router, %s\n",
              (long long)E, k, (long long)H, (long long)I, bits, double(expert_bytes) / 1e6, precision.c_str());
  for (const char* mode : {"spread", "same"}) {
    if (modes.find(mode) == std::string::npos) continue;
    for (int64_t T : Ts) for (const cu::MathMode math : maths) {
      const cu::DevMoe& dev = math == cu::MathMode::Fast ? dev_fast : dev_exact;
      std::mt19937 rng_t{uint32_t(T)};  // the same rows for each precision
      std::vector<float> x = uniform_vec(rng_t, size_t(T * H), -2.0f, 2.0f);
      if (std::string(mode) == "same")
        for (int64_t t = 1; t < T; ++t) std::copy(x.begin(), x.begin() + H, x.begin() + t * H);
      Dev<float> dx(x), dh(std::vector<float>(size_t(T * H), 0.0f));
      Dev<int32_t> didx(size_t(T * k));
      Dev<float> dw(size_t(T * k));
      cu::moe_route_dev(dev, dx.p, T, didx.p, dw.p, nullptr);
      device_sync();
      const std::vector<int32_t> idx = didx.download();
      const size_t active = std::set<int32_t>(idx.begin(), idx.end()).size();
      Dev<char> scratch(cu::moe_scratch_bytes(dev, T));
      std::vector<double> us;
      for (int r = 0; r < rounds; ++r)
        us.push_back(attention_graph_us([&](cudaStream_t s) { cu::moe_forward(dev, dx.p, T, dh.p, math, scratch.p, s); },
                                        reps, 10));
      // The output's bits (FNV-1a) after one block from h = 0: equal across builds when the arithmetic is.
      dh.upload(std::vector<float>(size_t(T * H), 0.0f));
      cu::moe_forward(dev, dx.p, T, dh.p, math, scratch.p, nullptr);
      device_sync();
      const std::vector<float> out = dh.download();
      uint64_t bits = 1469598103934665603ull;
      for (float f : out) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        bits = (bits ^ u) * 1099511628211ull;
      }
      std::sort(us.begin(), us.end());
      const double med = us[us.size() / 2];
      const double gbs = double(router_bytes + active * expert_bytes) / (med * 1e-6) / 1e9;
      std::printf("moe %-6s %-5s T=%-4lld experts %3zu  %8.1f us/block [%.1f-%.1f]  %7.0f GB/s  %8.0f tok/s per 48 layers"
                  "  bits %016llx\n", mode, math == cu::MathMode::Fast ? "fast" : "exact", (long long)T, active, med, us.front(), us.back(), gbs,
                  double(T) * 1e6 / (med * 48), (unsigned long long)bits);
    }
  }
  for (void* p : allocations) cudaFree(p);
  return 0;
}
