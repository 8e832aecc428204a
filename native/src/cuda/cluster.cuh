// Thread-block clusters (sm_90): a block's rank in its cluster, the cluster-wide barrier and reads of a peer block's
// shared memory (distributed shared memory). Callers launch clusters only where the device has them (sm_90 or newer);
// on older targets these compile to nothing.
#pragma once
#include <cstdint>
#include "cuda/bulk_copy.cuh"

namespace rapid::cuda {

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}

// Every thread of every block of the cluster arrives; shared-memory writes before it are visible to the peers'
// reads after it (release / acquire at cluster scope). Every thread must call it.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// The float4 at `p` (this block's shared memory) in the shared memory of the cluster's block `rank`.
__device__ __forceinline__ float4 peer_load4(const void* p, uint32_t rank) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t remote = 0;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(p)), "r"(rank));
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote)
               : "memory");
#endif
  return v;
}

// `p` (a generic address in this block's shared memory) as the generic address of the same variable in the
// shared memory of the cluster's block `rank`: plain loads, stores and atomics through it reach the peer.
template <class T>
__device__ __forceinline__ T* peer_ptr(T* p, uint32_t rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint64_t r = 0;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(r) : "l"(reinterpret_cast<uint64_t>(p)), "r"(rank));
  return reinterpret_cast<T*>(r);
#else
  return p;
#endif
}

}  // namespace rapid::cuda
