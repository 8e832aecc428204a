#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include "cuda/cuda_kernels.h"
#include "cuda/launch.cuh"

namespace rapid::cuda {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

bool pdl_enabled() {
  static const bool env_on = [] {
    const char* e = std::getenv("RAPID_CUDA_PDL");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  if (!env_on) return false;
  // Per device, read once: the attribute is an error on devices before sm_90.
  static std::atomic<int> major[64] = {};
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  if (dev < 0 || dev >= 64) return false;
  if (major[dev].load() == 0) {
    int m = 0;
    check(cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute");
    major[dev].store(m > 0 ? m : -1);
  }
  return major[dev].load() >= 9;
}

}  // namespace rapid::cuda
