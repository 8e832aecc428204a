// Greedy token selection on the device: per row, the lowest id among the maximal allowed finite logits.
// A row's vocab is cut into chunks (a function of vocab only), one block each; every block writes its chunk's
// best (value, id) to a per-stream scratch and the block that finishes the row last picks the best of them.
// (max value, then min id) is a total order, so whatever the chunking, the visit order or the row's neighbours
// the answer is the same; NaN and +-inf never win, and a row with no allowed finite logit yields -1.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include "cuda/cuda_kernels.h"
#include "cuda/device_math.cuh"
#include "cuda/launch.cuh"
#include "cuda/stream_scratch.h"

namespace rapid::cuda {

namespace {

constexpr int kArgThreads = 256;
constexpr int kArgWarps = kArgThreads / 32;
constexpr int64_t kChunkElems = 4096;  // target logits per block: a 152k vocab is 38 blocks per row
constexpr int kMaxChunks = 64;         // most blocks per row; the merge reads them with one warp, two per lane
static_assert(kMaxChunks <= 64, "the merge covers two chunks per lane");
constexpr int kUnroll = 4;             // float4 loads in flight per thread
// Rows per launch: the scratch holds [kTileRows, kMaxChunks] partials and [kTileRows] counters; more rows are
// cut into launches of kTileRows (a row's result does not depend on its tile).
constexpr int64_t kTileRows = 1024;
constexpr size_t kPartialBytes = size_t(kTileRows) * kMaxChunks * sizeof(int2);
constexpr size_t kScratchBytes = kPartialBytes + size_t(kTileRows) * sizeof(int);

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Grid (chunks, rows). logits [rows, vocab]; masks [*, words] bit set = allowed; mask_of [rows] (-1 = no mask) or
// null; tokens [rows]. Block (c, r) scans ids [c·len, min(vocab, (c+1)·len)) of row r. partials [kTileRows,
// kMaxChunks] (value bits, id) and counters [kTileRows] (0 between launches) are used when gridDim.x > 1.
__global__ void __launch_bounds__(kArgThreads) argmax_kernel(const float* __restrict__ logits, int64_t vocab,
                                                             int64_t len, const uint32_t* __restrict__ masks,
                                                             const int32_t* __restrict__ mask_of,
                                                             int32_t* __restrict__ tokens, int2* partials,
                                                             int* counters) {
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.y;
  const int c = int(blockIdx.x), nc = int(gridDim.x);
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const float* x = logits + r * vocab;  // [vocab]
  const int64_t words = (vocab + 31) / 32;
  const int32_t mrow = (masks != nullptr && mask_of != nullptr) ? mask_of[r] : -1;
  const uint32_t* mk = mrow >= 0 ? masks + int64_t(mrow) * words : nullptr;  // [words] or null

  float bv = 0.0f;
  int32_t bi = -1;
  auto consider = [&](float v, int64_t i) {
    if (!isfinite(v)) return;
    if (mk && !((mk[i >> 5] >> (i & 31)) & 1u)) return;
    if (better_pair(v, int32_t(i), bv, bi)) {
      bv = v;
      bi = int32_t(i);
    }
  };
  // The chunk as a scalar head up to the first 16-byte aligned logit, float4s, and a scalar tail (a row starts
  // aligned only when vocab % 4 == 0).
  const int64_t lo = min64(vocab, int64_t(c) * len), hi = min64(vocab, lo + len);
  const int64_t mis = int64_t((reinterpret_cast<uintptr_t>(x + lo) >> 2) & 3);
  const int64_t head = min64(hi - lo, (4 - mis) & 3);
  const int64_t b0 = lo + head;             // first float4 logit
  const int64_t n4 = (hi - b0) >> 2;        // float4s
  const int64_t t0 = b0 + 4 * n4;           // first tail logit (< 4 of them)
  if (tid < head) consider(x[lo + tid], lo + tid);
  if (tid < hi - t0) consider(x[t0 + tid], t0 + tid);
  const float4* x4 = reinterpret_cast<const float4*>(x + b0);
  for (int64_t j0 = tid; j0 < n4; j0 += int64_t(kUnroll) * kArgThreads) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = j0 + int64_t(u) * kArgThreads;
      v[u] = j < n4 ? __ldg(x4 + j) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = j0 + int64_t(u) * kArgThreads;
      if (j < n4) {
        const int64_t i = b0 + 4 * j;
        consider(v[u].x, i);
        consider(v[u].y, i + 1);
        consider(v[u].z, i + 2);
        consider(v[u].w, i + 3);
      }
    }
  }

  warp_best(bv, bi);
  __shared__ float sv[kArgWarps];
  __shared__ int32_t si[kArgWarps];
  __shared__ int last;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    bv = lane < kArgWarps ? sv[lane] : 0.0f;
    bi = lane < kArgWarps ? si[lane] : -1;
    warp_best(bv, bi);
    if (lane == 0) {
      if (nc == 1) {
        tokens[r] = bi;
        last = 0;
      } else {
        // Publish the chunk's best before counting it; the row's last block resets the counter for the next launch.
        partials[r * kMaxChunks + c] = make_int2(__float_as_int(bv), bi);
        __threadfence();
        const int before = atomicAdd(counters + r, 1);
        last = before == nc - 1;
        if (last) counters[r] = 0;
      }
    }
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (warp == 0) {  // the row's best over its chunks: lane l holds chunks l and l + 32 (read through L2)
    const int2* pr = partials + r * kMaxChunks;  // [nc]
    const int2 a = lane < nc ? __ldcg(pr + lane) : make_int2(0, -1);
    const int2 b = lane + 32 < nc ? __ldcg(pr + lane + 32) : make_int2(0, -1);
    bv = __int_as_float(a.x);
    bi = a.y;
    if (better_pair(__int_as_float(b.x), b.y, bv, bi)) {
      bv = __int_as_float(b.x);
      bi = b.y;
    }
    warp_best(bv, bi);
    if (lane == 0) tokens[r] = bi;
  }
}

// The per-stream partials and counters (the counters start at zero).
StreamScratch g_scratch("argmax_rows", kScratchBytes, kPartialBytes);

}  // namespace

void argmax_rows(const float* logits, int64_t m, int64_t vocab, const uint32_t* masks, const int32_t* mask_of,
                 int32_t* tokens, cudaStream_t s) {
  if (m <= 0) return;
  // Chunks: a function of vocab alone; len a multiple of 4 so chunks of an aligned row start aligned.
  const int nc = int(std::clamp<int64_t>((vocab + kChunkElems - 1) / kChunkElems, 1, kMaxChunks));
  const int64_t len = ((vocab + nc - 1) / nc + 3) / 4 * 4;
  int2* partials = nullptr;
  int* counters = nullptr;
  if (nc > 1) {
    char* scratch = static_cast<char*>(g_scratch.get(s));
    partials = reinterpret_cast<int2*>(scratch);
    counters = reinterpret_cast<int*>(scratch + kPartialBytes);
  }
  for (int64_t r0 = 0; r0 < m; r0 += kTileRows) {
    const int64_t rows = std::min(kTileRows, m - r0);
    launch(argmax_kernel, dim3(unsigned(nc), unsigned(rows)), dim3(kArgThreads), 0, s, "argmax_rows launch",
           logits + r0 * vocab, vocab, len, masks, mask_of ? mask_of + r0 : nullptr, tokens + r0, partials, counters);
  }
}

void argmax_reserve(cudaStream_t s) { g_scratch.get(s); }

void argmax_release(cudaStream_t s) { g_scratch.release(s); }

}  // namespace rapid::cuda
