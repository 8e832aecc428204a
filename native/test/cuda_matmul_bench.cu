// Decode-shape timing of cuda::matmul / cuda::matmul_glu with 4-bit g64 bf16-scale weights (the MLX
// checkpoints' format) on the Qwen2.5-0.5B and 3B projection shapes at n = 1, 8, 64. Each case is a
// CUDA graph of launches that rotate through weight copies totalling > 256 MB, so L2 (50 MB) holds
// none of them between uses; GB/s counts weight bytes (data + scales + biases) per launch.
//
// Build (from the repo root; the op test's line with this source):
//   mkdir -p /tmp/k1 && nvcc -std=c++20 -O3 -gencode arch=compute_90,code=sm_90
//     -Xcompiler -Wall,-Wextra -Werror all-warnings -Inative/src
//     native/test/cuda_matmul_bench.cu native/src/cuda/matmul.cu native/src/cuda/matmul_mma.cu native/src/cuda/check.cu native/src/cuda/tiled_codes.cpp
//     native/src/cpu/matmul.cpp native/src/cpu/kernels_scalar.cpp native/src/cpu/kernels_x86.cpp
//     native/src/cpu/threadpool.cpp native/src/quant/quantize.cpp native/src/format/json.cpp
//     native/src/format/safetensors.cpp -o /tmp/k1/cuda_matmul_bench -lpthread
// Run: /tmp/k1/cuda_matmul_bench [label [n,n,... [fast|fast-norm|exact|fast-tiled|fast-norm-tiled [SHAPE]]]]   (one
// BENCH line per shape and n; default n 1,8,64, fast arithmetic without a fused norm, row-major codes; SHAPE: only
// the shapes whose name contains it, e.g. "3B")
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/cuda_kernels.h"
#include "cuda/tiled_codes.h"
#include "tensor/dtype.h"

using namespace rapid;

namespace {

void ck(cudaError_t e, const char* what) { cuda::check(e, what); }

struct Shape {
  const char* name;
  int64_t out, in;
  bool glu;  // gate+up pair through matmul_glu (out = ffn)
};

// Deterministic filler (xorshift64*), enough for timing: weights need no structure.
struct Rng {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
  }
  float uniform() { return float(next() >> 40) / float(1 << 24); }
};

size_t align256(size_t b) { return (b + 255) & ~size_t(255); }

// The read ceiling of one launch: `bytes` of p streamed by 16-byte loads over the whole GPU (xor-folded so no load is
// dropped), in the same graph-of-rotating-copies setting as the matmul launches.
__global__ void read_kernel(const uint4* p, size_t n16, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n16; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) sink[0] = acc;  // practically never: keeps the loads
}

// One 4-bit g64 bf16 weight's host bytes: data [out, in/8] u32, scales/biases [out, in/64] bf16.
struct HostWeight {
  std::vector<uint8_t> data, scales, biases;
};

HostWeight make_host(int64_t out, int64_t in, Rng& rng) {
  HostWeight h;
  h.data.resize(size_t(out * in / 2));
  for (size_t i = 0; i < h.data.size(); i += 8) {
    const uint64_t v = rng.next();
    std::memcpy(h.data.data() + i, &v, 8);
  }
  const size_t ng = size_t(out * in / 64);
  h.scales.resize(ng * 2);
  h.biases.resize(ng * 2);
  for (size_t g = 0; g < ng; ++g) {
    const float s = 0.001f + 0.01f * rng.uniform();
    const uint16_t sb = f32_to_bf16(s), bb = f32_to_bf16(-8.f * s);
    std::memcpy(h.scales.data() + 2 * g, &sb, 2);
    std::memcpy(h.biases.data() + 2 * g, &bb, 2);
  }
  return h;
}

struct Mode {
  cuda::MathMode math = cuda::MathMode::Fast;
  bool norm = false;  // the input RMSNorm fused into the launch (decode's q/k/v and GLU launches)
  bool tiled = false; // codes and scales in the tensor-core path's tiled layout (what the decoder uploads for Fast)
};

// Microseconds per launch: `iters` launches (enqueue(it) each) captured into one graph on s, warmed up once, then the
// fastest of three timed graph launches.
template <class Enqueue>
double graph_us(cudaStream_t s, int iters, const Enqueue& enqueue) {
  ck(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture");
  for (int it = 0; it < iters; ++it) enqueue(it);
  cudaGraph_t g;
  ck(cudaStreamEndCapture(s, &g), "end capture");
  cudaGraphExec_t ge;
  ck(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  ck(cudaGraphLaunch(ge, s), "warmup");
  cudaEvent_t a, b;
  ck(cudaEventCreate(&a), "event");
  ck(cudaEventCreate(&b), "event");
  float best = 1e30f;
  for (int rep = 0; rep < 3; ++rep) {
    ck(cudaEventRecord(a, s), "record");
    ck(cudaGraphLaunch(ge, s), "launch");
    ck(cudaEventRecord(b, s), "record");
    ck(cudaEventSynchronize(b), "sync");
    float ms = 0;
    ck(cudaEventElapsedTime(&ms, a, b), "elapsed");
    best = std::min(best, ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return 1e3 * double(best) / iters;
}

void run_case(const Shape& sh, const char* label, const std::vector<int>& ns, const Mode& mode, Rng& rng) {
  const int mats = sh.glu ? 2 : 1;
  HostWeight hw = make_host(sh.out, sh.in, rng);
  if (mode.tiled) {  // codes and scale/bias quadruples (scales then holds both: the bytes of scales + biases)
    std::vector<uint8_t> t(cuda::tiled_words(sh.out, sh.in, 4) * 4);
    cuda::tile_codes(reinterpret_cast<const uint32_t*>(hw.data.data()), sh.out, sh.in, 4, 64, reinterpret_cast<uint32_t*>(t.data()));
    hw.data = std::move(t);
    std::vector<uint8_t> q(cuda::tiled_scale_bytes(sh.out, sh.in / 64, 2));
    cuda::tile_scales(hw.scales.data(), hw.biases.data(), sh.out, sh.in / 64, 2, q.data());
    hw.scales = std::move(q);
    hw.biases.clear();
  }
  const size_t db = align256(hw.data.size()), sb = align256(hw.scales.size()), bb = align256(hw.biases.size());
  const size_t per_mat = db + sb + bb, per_copy = per_mat * size_t(mats);
  const size_t wbytes = (hw.data.size() + hw.scales.size() + hw.biases.size()) * size_t(mats);
  const int copies = int(std::max<size_t>(2, (size_t(256) << 20) / per_copy + 1));
  uint8_t* pool = nullptr;
  ck(cudaMalloc(&pool, per_copy * size_t(copies)), "cudaMalloc pool");
  std::vector<cuda::DevWeight> devs;  // [copies * mats]
  for (int c = 0; c < copies; ++c)
    for (int m = 0; m < mats; ++m) {
      uint8_t* base = pool + size_t(c) * per_copy + size_t(m) * per_mat;
      if (c == 0 && m == 0) {
        ck(cudaMemcpy(base, hw.data.data(), hw.data.size(), cudaMemcpyHostToDevice), "h2d");
        ck(cudaMemcpy(base + db, hw.scales.data(), hw.scales.size(), cudaMemcpyHostToDevice), "h2d");
        ck(cudaMemcpy(base + db + sb, hw.biases.data(), hw.biases.size(), cudaMemcpyHostToDevice), "h2d");
      } else {
        ck(cudaMemcpy(base, pool, per_mat, cudaMemcpyDeviceToDevice), "d2d");
      }
      const uint8_t* bi = mode.tiled ? base + db : base + db + sb;  // tiled: scales == biases
      devs.push_back({WeightKind::Affine, DType::BF16, sh.out, sh.in, 4, 64, base, base + db, bi, mode.tiled});
    }
  cudaStream_t s;
  ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  // Fast launches of n > 1 stage x in a per-stream buffer: reserved for the largest n, never in a capture.
  cuda::matmul_reserve(s, *std::max_element(ns.begin(), ns.end()), sh.in);
  const std::vector<float> ones(size_t(sh.in), 1.0f);  // the fused norm's weight
  float* nw = nullptr;
  ck(cudaMalloc(&nw, ones.size() * 4), "cudaMalloc norm");
  ck(cudaMemcpy(nw, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice), "h2d norm");
  const cuda::RowNorm rn{nw, 1e-6f};
  const cuda::RowNorm* norm = mode.norm ? &rn : nullptr;
  for (int n : ns) {
    std::vector<float> hx(size_t(n * sh.in));
    for (auto& v : hx) v = rng.uniform() * 2.f - 1.f;
    float *x = nullptr, *y = nullptr;
    ck(cudaMalloc(&x, hx.size() * 4), "cudaMalloc x");
    ck(cudaMalloc(&y, size_t(n * sh.out) * 4), "cudaMalloc y");
    ck(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice), "h2d x");
    const int iters = std::max(copies, 20);
    const double us = graph_us(s, iters, [&](int it) {
      const cuda::DevWeight* w = &devs[size_t(it % copies) * size_t(mats)];
      if (sh.glu) {
        cuda::matmul_glu(x, n, w[0], w[1], 0, y, s, mode.math, norm);
      } else {
        cuda::MatmulJob j;
        j.w = w[0];
        j.y = y;
        j.ldy = sh.out;
        cuda::matmul(x, sh.in, n, &j, 1, s, mode.math, norm);
      }
    });
    std::printf("BENCH %-8s %-24s n=%-3d %9.2f us %7.0f GB/s\n", label, sh.name, n, us, double(wbytes) / (us * 1e3));
    if (n == ns.front() && std::getenv("RAPID_BENCH_CEILING")) {  // the same bytes per launch, read by read_kernel
      int sms = 0;
      ck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "sms");
      uint32_t* sink = nullptr;
      ck(cudaMalloc(&sink, 4), "sink");
      const double us2 = graph_us(s, iters, [&](int it) {
        read_kernel<<<sms * 8, 256, 0, s>>>(reinterpret_cast<const uint4*>(pool + size_t(it % copies) * per_copy),
                                              per_copy / 16, sink);
      });
      std::printf("CEIL  %-8s %-24s read  %9.2f us %7.0f GB/s\n", label, sh.name, us2, double(per_copy) / (us2 * 1e3));
      cudaFree(sink);
    }
    std::fflush(stdout);
    cudaFree(x);
    cudaFree(y);
  }
  cudaFree(nw);
  cuda::matmul_release(s);
  cudaStreamDestroy(s);
  cudaFree(pool);
}

}  // namespace

int main(int argc, char** argv) {
  const char* label = argc > 1 ? argv[1] : "matmul";
  // Optional second argument: the token counts to time, comma-separated (default 1,8,64).
  // Optional third: fast (default), fast-norm (the input norm fused) or exact; "-tiled" after a fast mode stores the
  // codes tiled (what the decoder uploads for Fast).
  std::string ms = argc > 3 ? argv[3] : "fast";
  Mode mode;
  const std::string suffix = "-tiled";
  if (ms.size() > suffix.size() && ms.compare(ms.size() - suffix.size(), suffix.size(), suffix) == 0) {
    mode.tiled = true;
    ms.resize(ms.size() - suffix.size());
  }
  if (ms == "exact" && !mode.tiled) mode.math = cuda::MathMode::Exact;
  else if (ms == "fast-norm") mode.norm = true;
  else if (ms != "fast") {
    std::printf("FAIL mode: expected fast, fast-norm or exact (fast ones optionally -tiled), got %s\n", argv[3]);
    return 2;
  }
  std::vector<int> ns;
  for (const char* p = argc > 2 ? argv[2] : "1,8,64"; *p;) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p || v < 1) {
      std::printf("FAIL token counts: expected a list like 1,8,64, got %s\n", argv[2]);
      return 2;
    }
    ns.push_back(int(v));
    p = *end == ',' ? end + 1 : end;
  }
  try {
    cudaDeviceProp prop{};
    ck(cudaGetDeviceProperties(&prop, 0), "props");
    std::printf("device: %s (a4g64-bf16 weights, %s, us per launch, weight GB/s)\n", prop.name, argc > 3 ? argv[3] : "fast");
    const Shape shapes[] = {
        {"0.5B qo [896x896]", 896, 896, false},      {"0.5B kv [128x896]", 128, 896, false},
        {"0.5B glu 2x[4864x896]", 4864, 896, true},  {"0.5B down [896x4864]", 896, 4864, false},
        {"0.5B head [151936x896]", 151936, 896, false}, {"3B qo [2048x2048]", 2048, 2048, false},
        {"3B kv [256x2048]", 256, 2048, false},      {"3B glu 2x[11008x2048]", 11008, 2048, true},
        {"3B down [2048x11008]", 2048, 11008, false}, {"3B head [151936x2048]", 151936, 2048, false},
    };
    const char* only = argc > 4 ? argv[4] : "";
    Rng rng;
    for (const Shape& sh : shapes)
      if (std::strstr(sh.name, only)) run_case(sh, label, ns, mode, rng);
  } catch (const std::exception& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
  return 0;
}
