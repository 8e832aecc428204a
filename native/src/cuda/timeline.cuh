// The step timeline of a profiling build (`node scripts/build-cuda.mjs --timeline`, never shipped): every kernel's
// block (0,0,0) records, in pdl_wait, when it reached the wait and when the wait released (the previous kernel done),
// with its grid, block and dynamic shared memory. The release-to-release gaps are each kernel's cost inside the real
// chain of a decode step (PDL overlap, graph replay), which neither ncu (it serializes) nor a micro-benchmark shows.
// At exit the records go to the file RAPID_CUDA_TIMELINE names (`node bench/run.js timeline FILE` reads them), and the
// per-block phase marks of the one-token matmul, attention and MoE kernels (TL_MARK / TL_FLUSH) to FILE.blocks.
#pragma once
#ifdef RAPID_CUDA_TIMELINE
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>

namespace rapid::cuda {

// Adds a translation unit's dump (each .cu has its own device ring: no relocatable device code).
void timeline_register(void (*dump)());
// Called once CUDA is initialized (the first launch): the dumps then run at exit before the runtime tears down.
void timeline_arm();

namespace {
constexpr unsigned kTimelineSize = 1u << 16;                    // records per translation unit (a ring)
__device__ unsigned long long timeline_ring[kTimelineSize][3];  // [enter ns, release ns, kernel id]
__device__ unsigned timeline_count;

__device__ __forceinline__ unsigned long long timeline_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One record by block (0,0,0): the kernel id packs grid x (16 bits), y, z (8 each), block x (12) and the dynamic
// shared memory in 16-byte units (20).
__device__ __forceinline__ void timeline_record(unsigned long long enter) {
  if (blockIdx.x != 0 || blockIdx.y != 0 || blockIdx.z != 0 || threadIdx.x != 0) return;
  const unsigned long long release = timeline_now();
  unsigned smem;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(smem));
  const unsigned i = atomicAdd(&timeline_count, 1u) & (kTimelineSize - 1);
  timeline_ring[i][0] = enter;
  timeline_ring[i][1] = release;
  timeline_ring[i][2] = (unsigned long long)(gridDim.x & 0xffff) << 48 | (unsigned long long)(gridDim.y & 0xff) << 40 |
                        (unsigned long long)(gridDim.z & 0xff) << 32 | (unsigned long long)(blockDim.x & 0xfff) << 20 |
                        ((smem >> 4) & 0xfffff);
}

// Per-block phase marks: thread 0 of each block of the one-token matmul, attention and MoE kernels keeps up to 5
// timestamps (TL_MARK) and writes them at its end (TL_FLUSH) with a tag, the weight's K groups (matmul: tells launches
// of one grid apart), the grid's block count and the block's index, to $RAPID_CUDA_TIMELINE.blocks
// (src/bench/timeline-blocks.ts reads them).
constexpr unsigned kBlockRing = 1u << 17;                 // records per translation unit (a ring)
__device__ unsigned long long block_ring[kBlockRing][6];  // [mark 0..4 ns (0: unmarked), id]
__device__ unsigned block_count;
struct BlockMarks {
  unsigned long long t[5];
};
__device__ __forceinline__ void block_mark(BlockMarks& m, int i) {
  if (threadIdx.x == 0) m.t[i] = timeline_now();
}
__device__ __forceinline__ void block_flush(const BlockMarks& m, unsigned tag, long long groups) {
  if (threadIdx.x != 0) return;
  const unsigned i = atomicAdd(&block_count, 1u) & (kBlockRing - 1);
  for (int k = 0; k < 5; ++k) block_ring[i][k] = m.t[k];
  const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  block_ring[i][5] = (unsigned long long)tag << 56 | (unsigned long long)(groups & 0xffff) << 32 |
                     (unsigned long long)(blocks & 0xffff) << 16 | (block & 0xffff);
}

// Appends this unit's records to $RAPID_CUDA_TIMELINE as "enter release id" lines (ns, ns, hex).
void timeline_dump_unit() {
  static unsigned long long host[kTimelineSize][3];
  unsigned n = 0;
  const char* path = std::getenv("RAPID_CUDA_TIMELINE");
  if (!path || !*path) return;
  if (cudaMemcpyFromSymbol(&n, timeline_count, sizeof n) != cudaSuccess) return;
  if (cudaMemcpyFromSymbol(host, timeline_ring, sizeof host) != cudaSuccess) return;
  FILE* f = std::fopen(path, "a");
  if (!f) return;
  const unsigned m = n < kTimelineSize ? n : kTimelineSize;
  for (unsigned i = 0; i < m; ++i) std::fprintf(f, "%llu %llu %llx\n", host[i][0], host[i][1], host[i][2]);
  std::fclose(f);
  static unsigned long long bh[kBlockRing][6];
  unsigned bn = 0;
  if (cudaMemcpyFromSymbol(&bn, block_count, sizeof bn) != cudaSuccess || bn == 0) return;
  if (cudaMemcpyFromSymbol(bh, block_ring, sizeof bh) != cudaSuccess) return;
  char bp[4096];
  std::snprintf(bp, sizeof bp, "%s.blocks", path);
  FILE* g = std::fopen(bp, "a");
  if (!g) return;
  const unsigned bm = bn < kBlockRing ? bn : kBlockRing;
  for (unsigned i = 0; i < bm; ++i)
    std::fprintf(g, "%llu %llu %llu %llu %llu %llx\n", bh[i][0], bh[i][1], bh[i][2], bh[i][3], bh[i][4], bh[i][5]);
  std::fclose(g);
}

struct TimelineUnit {
  TimelineUnit() { timeline_register(&timeline_dump_unit); }
} timeline_unit;
}  // namespace

}  // namespace rapid::cuda
#define TL_MARKS ::rapid::cuda::BlockMarks tl_marks_{};
#define TL_MARK(i) ::rapid::cuda::block_mark(tl_marks_, i)
#define TL_FLUSH(tag, groups) ::rapid::cuda::block_flush(tl_marks_, tag, groups)
#else
#define TL_MARKS
#define TL_MARK(i)
#define TL_FLUSH(tag, groups)
#endif
