// Kernel launches with programmatic dependent launch (PDL, sm_90+): a kernel may start while its predecessor on
// the stream is still running, do work that reads nothing the predecessor writes (a matmul prefetches its
// weights), then wait for it. Every kernel launched through `launch` calls pdl_wait() before its first access to
// memory another kernel writes (and before any global write), so results are the same with PDL on or off.
#pragma once
#include <cuda_runtime.h>
#include <utility>
#include "cuda/cuda_kernels.h"
#include "cuda/timeline.cuh"

namespace rapid::cuda {

// Blocks until the predecessor grid has completed and its writes are visible (a no-op without PDL).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#ifdef RAPID_CUDA_TIMELINE
  const unsigned long long enter = timeline_now();
#endif
  asm volatile("griddepcontrol.wait;" ::: "memory");
#ifdef RAPID_CUDA_TIMELINE
  timeline_record(enter);
#endif
#endif
}

// Lets the successor grid launch once every block of this one has called it (or exited).
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// A tuning knob: the environment variable `name` as a base-10 integer (strtol), `fallback` when unset or empty.
long env_long(const char* name, long fallback);

// Whether launches on the current device use PDL: compute capability 9.0 or newer, unless RAPID_CUDA_PDL=0.
bool pdl_enabled();

// Whether the current device has bulk (TMA) copies and mbarrier transaction counts (bulk_copy.cuh): sm_90 or newer.
bool bulk_copy_supported();

// Whether warpgroup MMA kernels (wgmma.cuh) can run: this build has sm_90a machine code (RAPID_CUDA_SM90A, set by
// scripts/build-cuda.mjs) and the current device is compute capability 9.0, the only one that code loads on.
bool wgmma_supported();

// Multiprocessors of the current device (read once per device): launch shapes that aim to fill the GPU.
int sm_count();

// Shared memory of one multiprocessor of the current device, in bytes (read once per device; 0 if unknown).
size_t smem_per_sm();

// Lets `kernel` launch with `bytes` of dynamic shared memory on the current device: above the 48 KB default a kernel
// must opt in, per device (a second GPU needs its own opt-in), so the largest size set is kept per (kernel, device).
// False, with nothing changed, when bytes plus the kernel's static shared memory exceed the device's opt-in limit.
bool allow_dynamic_smem(const void* kernel, size_t bytes, size_t static_bytes);

// kernel<<<grid, block, smem, s>>>(args...) with PDL where enabled (created streams only), in thread-block clusters of
// cluster_x blocks along x when cluster_x > 0 (sm_90 or newer; grid.x a multiple of it); throws "<what>: <error>" on a
// launch error.
template <typename... Params, typename... Args>
void launch_in(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, unsigned cluster_x,
               const char* what, Args&&... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (cluster_x > 0) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster_x;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (s != nullptr && pdl_enabled()) {  // the legacy default stream keeps plain ordering
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = n;
  check(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), what);
}

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, const char* what,
            Args&&... args) {
  launch_in(kernel, grid, block, smem, s, 0, what, std::forward<Args>(args)...);
}

}  // namespace rapid::cuda
