#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
#include "cuda/cuda_kernels.h"
#include "cuda/launch.cuh"

namespace rapid::cuda {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

namespace {

// An attribute of the current device, read once per device (slots of a 64-device table; 0 = not read yet).
int cached_attr(std::atomic<int> (&cache)[64], cudaDeviceAttr attr, const char* what) {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  if (dev < 0 || dev >= 64) return -1;
  if (cache[dev].load() == 0) {
    int v = 0;
    check(cudaDeviceGetAttribute(&v, attr, dev), what);
    cache[dev].store(v > 0 ? v : -1);
  }
  return cache[dev].load();
}

std::atomic<int> g_major[64] = {};
std::atomic<int> g_sms[64] = {};
std::atomic<int> g_smem_sm[64] = {};
std::atomic<int> g_minor[64] = {};

}  // namespace

long env_long(const char* name, long fallback) {
  const char* e = std::getenv(name);
  return e && *e ? std::strtol(e, nullptr, 10) : fallback;
}

#ifdef RAPID_CUDA_TIMELINE
namespace {
std::vector<void (*)()>& timeline_dumps() {
  static std::vector<void (*)()> v;  // filled during static initialization, so a function-local static
  return v;
}
void timeline_dump_all() {
  for (auto dump : timeline_dumps()) dump();
}
}  // namespace
void timeline_register(void (*dump)()) { timeline_dumps().push_back(dump); }
void timeline_arm() { std::atexit(timeline_dump_all); }
#endif

bool pdl_enabled() {
  static const bool env_on = [] {
#ifdef RAPID_CUDA_TIMELINE
    timeline_arm();  // the first launch: CUDA is initialized, so this exit handler runs before its teardown
#endif
    const char* e = std::getenv("RAPID_CUDA_PDL");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  // The PDL launch attribute is an error on devices before sm_90.
  return env_on && cached_attr(g_major, cudaDevAttrComputeCapabilityMajor, "compute capability") >= 9;
}

bool bulk_copy_supported() {
  return cached_attr(g_major, cudaDevAttrComputeCapabilityMajor, "compute capability") >= 9;
}

bool wgmma_supported() {
#ifdef RAPID_CUDA_SM90A
  // cached_attr stores 0 as -1 (0 marks "not read yet").
  return cached_attr(g_major, cudaDevAttrComputeCapabilityMajor, "compute capability") == 9 &&
         cached_attr(g_minor, cudaDevAttrComputeCapabilityMinor, "compute capability") <= 0;
#else
  return false;
#endif
}

int sm_count() { return std::max(1, cached_attr(g_sms, cudaDevAttrMultiProcessorCount, "multiprocessor count")); }

size_t smem_per_sm() {
  return size_t(std::max(0, cached_attr(g_smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, "shared memory per SM")));
}

bool allow_dynamic_smem(const void* kernel, size_t bytes, size_t static_bytes) {
  constexpr size_t kDefault = size_t(48) << 10;  // dynamic plus static, without an opt-in
  if (bytes + static_bytes <= kDefault) return true;
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> opted;  // (kernel, device) -> the cap set
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mu);
  size_t& cap = opted[{kernel, dev}];
  if (bytes <= cap) return true;
  int max_optin = 0;
  check(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "shared memory opt-in limit");
  if (bytes + static_bytes > size_t(max_optin)) return false;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)), "shared memory opt-in");
  cap = bytes;
  return true;
}

}  // namespace rapid::cuda
