// What the CUDA op tests share: PASS/FAIL lines with a failure count, and an owning device buffer.
#pragma once
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <vector>
#include "cuda/cuda_kernels.h"
#include "tensor/dtype.h"
#include "tensor/weight.h"

namespace rapid::cuda::test {

inline int g_failures = 0;

inline void report(const std::string& name, double err, double tol) {
  const bool ok = err <= tol;  // NaN fails
  if (!ok) ++g_failures;
  std::printf("%s %-58s max_err=%.3g (tol %.1g)\n", ok ? "PASS" : "FAIL", name.c_str(), err, tol);
}

inline void report_bool(const std::string& name, bool ok, const std::string& detail = "") {
  if (!ok) ++g_failures;
  std::printf("%s %-58s %s\n", ok ? "PASS" : "FAIL", name.c_str(), detail.c_str());
}

// Device buffer of `count` T; freed on scope exit.
template <class T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  Dev() = default;
  explicit Dev(size_t count) : n(count) { check(cudaMalloc(&p, std::max<size_t>(1, count) * sizeof(T)), "cudaMalloc"); }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) { upload(h); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() { cudaFree(p); }
  void upload(const std::vector<T>& h) { check(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "upload"); }
  std::vector<T> download() const {
    std::vector<T> h(n);
    check(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
  }
};

// n values uniform in [lo, hi) from rng.
inline std::vector<float> uniform_vec(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Microseconds per paged-attention launch: `launch(s)` called `reps` times into a CUDA graph on a created stream (its
// split-K scratch reserved first), replayed twice to warm up, then `replays` times under events.
inline double attention_graph_us(const std::function<void(cudaStream_t)>& launch, int reps, int replays) {
  cudaStream_t s = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  paged_attention_reserve(s);
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int i = 0; i < reps; ++i) launch(s);
  cudaGraph_t g = nullptr;
  check(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(g);
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  for (int i = 0; i < 2; ++i) check(cudaGraphLaunch(exec, s), "warm-up");
  check(cudaEventRecord(e0, s), "record");
  for (int i = 0; i < replays; ++i) check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
  check(cudaEventRecord(e1, s), "record");
  check(cudaStreamSynchronize(s), "sync");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(exec);
  paged_attention_release(s);
  cudaStreamDestroy(s);
  return double(ms) * 1000.0 / (double(reps) * replays);
}

inline void device_sync() { check(cudaDeviceSynchronize(), "sync"); }

// The E per-expert views [out / E, in] of a stacked [out, in] weight (dense, or MLX affine with scales and biases of
// all.dtype), pointing into all's bytes.
inline std::vector<Weight> expert_views(const Weight& all, int64_t E) {
  std::vector<Weight> v(static_cast<size_t>(E));
  const int64_t out = all.out / E;
  const size_t es = dtype_size(all.dtype);
  const auto at = [](const void* p, size_t bytes) { return static_cast<const uint8_t*>(p) + bytes; };
  for (int64_t e = 0; e < E; ++e) {
    Weight w = all;
    w.out = out;
    const size_t r = size_t(e * out);
    if (all.kind == WeightKind::Dense) {
      w.data = at(all.data, r * size_t(all.in) * es);
    } else {
      w.data = at(all.data, r * size_t(all.in * all.bits / 8));
      w.scales = at(all.scales, r * size_t(all.in / all.group) * es);
      w.biases = at(all.biases, r * size_t(all.in / all.group) * es);
    }
    v[size_t(e)] = w;
  }
  return v;
}

// An f32 KV cache over two plain device pools [slots, n_kv * head_dim].
inline KvCache f32_pool(float* k, float* v) {
  KvCache c;
  c.k = k;
  c.v = v;
  return c;
}

// Prints the current device's name and compute capability (the first line of every op test).
inline void print_device() {
  int dev = 0;
  cudaDeviceProp prop{};
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
}

// An op test's main: the device line, the cases (an exception is one failure that ends the run), then the
// summary line; the exit status is 1 on any failure.
inline int run_op_test(const std::function<void()>& cases) {
  try {
    print_device();
    cases();
  } catch (const std::exception& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
  std::printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "ALL PASSED", g_failures);
  return g_failures ? 1 : 0;
}

}  // namespace rapid::cuda::test
