// Stream-ordered byte copies by a kernel. A step's small uploads (metadata, mask rows) and downloads (sampled
// tokens) between its kernels went through cudaMemcpyAsync, and each copy-engine operation cost the chain several
// microseconds (the kernel after it cannot start early); a kernel reading or writing page-locked host memory
// (directly addressable under unified addressing) keeps the chain of PDL launches unbroken.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include "cuda/cuda_kernels.h"
#include "cuda/launch.cuh"

namespace rapid::cuda {

namespace {

constexpr int kCopyThreads = 256;

// dst[0, bytes) = src[0, bytes): 16-byte words when both are 16-byte aligned (vec), then the tail bytes.
__global__ void __launch_bounds__(kCopyThreads) copy_bytes_kernel(char* __restrict__ dst, const char* __restrict__ src,
                                                                  int64_t bytes, bool vec, bool src_ready) {
  const int64_t stride = int64_t(gridDim.x) * kCopyThreads, first = int64_t(blockIdx.x) * kCopyThreads + threadIdx.x;
  const int64_t words = vec ? bytes / 16 : 0;  // [words] uint4
  const uint4* s4 = reinterpret_cast<const uint4*>(src);
  uint4* d4 = reinterpret_cast<uint4*>(dst);
  // A source no earlier launch writes (host data) is read before the wait: its PCIe round trip overlaps the
  // previous kernel. Nothing is written before the wait (the previous kernels may still read dst).
  uint4 head{};
  const bool early = src_ready && first < words;
  if (early) head = s4[first];
  pdl_wait();
  pdl_trigger();
  for (int64_t i = first; i < words; i += stride) d4[i] = i == first && early ? head : s4[i];
  for (int64_t i = words * 16 + first; i < bytes; i += stride) dst[i] = src[i];
  __threadfence_system();  // a host destination holds the bytes once an event after this launch has fired
}

}  // namespace

void copy_bytes(void* dst, const void* src, size_t bytes, bool src_ready, cudaStream_t s) {
  if (bytes == 0) return;
  if (!dst || !src) throw std::runtime_error("copy_bytes: null pointer");
  const bool vec = reinterpret_cast<uintptr_t>(dst) % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
  const int64_t items = vec ? int64_t(bytes / 16) + int64_t(bytes % 16) : int64_t(bytes);
  const int64_t blocks = std::clamp<int64_t>((items + kCopyThreads - 1) / kCopyThreads, 1, 4 * int64_t(sm_count()));
  launch(copy_bytes_kernel, dim3(unsigned(blocks)), dim3(kCopyThreads), 0, s, "copy_bytes launch", static_cast<char*>(dst),
         static_cast<const char*>(src), int64_t(bytes), vec, src_ready);
}

}  // namespace rapid::cuda
