// Token sampling on the device: the host sampler's pipeline (sampling/sampler.cpp) — bitmask → penalties →
// greedy | temperature → top-k → top-p → min-p → one draw with the row's uniform u — without copying the logits row
// to the host. Weights are fixed-point integers (w · 2^40), so every sum is exact whatever its order: a row's token
// is a pure function of its logits, parameters and u, never of the rows that share the launch nor of how many blocks
// split the row. A row takes a cluster of up to 8 blocks on sm_90 (the cluster path, below); top-k / top-p take the
// sorted order (logit descending, id ascending) through a histogram by log-weight distance and a short list of the
// few bins that matter, searched by radix selects in shared memory. The whole-row path (one block: a short sorted
// list when the candidates are few, else weighted radix selects over the row) decides the rows whose bins are too
// crowded.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>
#include "cuda/cluster.cuh"
#include "cuda/cuda_kernels.h"
#include "cuda/device_math.cuh"
#include "cuda/launch.cuh"
#include "sampling/fixed_weight.h"
#include "sampling/rng.h"

namespace rapid::cuda {

namespace {

constexpr int kThreads = 1024;  // one block per row (whole-row path): 512 threads ran 1.4x slower per row on an H200
constexpr int kWarps = kThreads / 32;
constexpr int kGroup = 128;                 // ids a warp reads per step (4 per lane): the id-order scan's unit
constexpr int kUnroll = 2;                  // groups whose loads a warp has in flight at once (4: no faster)
constexpr int kHistCopies = 16;             // radix histograms, one per pair of warps: fewer same-address atomics
constexpr int kBuckets = 256;               // 8-bit digits, four passes per 32-bit key
constexpr int kSmemWords = kHistCopies * kBuckets;  // u64 scratch: the histograms, or one sum per group
constexpr int64_t kMaxVocab = int64_t(kSmemWords) * kGroup;

// A logits row as the sampler sees it: a masked or non-finite logit is -inf (never a candidate).
struct RowView {
  const float* x;        // [vocab]
  const uint32_t* mask;  // [ceil(vocab/32)] bit set = allowed, or null
  int64_t vocab;
  bool aligned;          // x is 16-byte aligned: a lane's four logits are one float4
  bool written;          // x is written by this launch (the penalties' scratch): loads bypass the read-only cache

  __device__ float fix(float v, int64_t i) const {
    if (mask && !((mask[i >> 5] >> (i & 31)) & 1u)) return -INFINITY;
    if (!isfinite(v)) return -INFINITY;
    return v == 0.0f ? 0.0f : v;  // -0 == +0: one key, so equal logits tie by id as on the host
  }
  // Logits i0 .. i0+3 (i0 a multiple of 4); past the vocabulary -inf.
  __device__ void load4(int64_t i0, float v[4]) const {
    if (aligned && i0 + 3 < vocab) {
      const float4* p = reinterpret_cast<const float4*>(x + i0);
      const float4 q = written ? __ldcg(p) : __ldg(p);
      v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = i0 + j < vocab ? x[i0 + j] : -INFINITY;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = i0 + j < vocab ? fix(v[j], i0 + j) : -INFINITY;
  }
};

__device__ __forceinline__ bool valid(float v) { return v != -INFINITY; }

// Order-preserving key of a finite logit: larger logit, larger key.
__device__ __forceinline__ uint32_t key_of(float v) {
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Fixed-point weight exp(v/T - max/T) · 2^40 of a valid logit, with the host's roundings (v·(1/T) and
// max·(1/T) rounded to float before the subtraction).
struct Weights {
  float inv_t, mx_t;
  __device__ float real(float v) const { return expf(__fsub_rn(__fmul_rn(v, inv_t), mx_t)); }
  // floor(w · 2^40): the host sampler's integer (sampling/fixed_weight.h).
  __device__ uint64_t fixed(float w) const { return fixed_weight(w); }
};

__device__ __forceinline__ uint64_t warp_sum_u64(uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ uint64_t warp_inclusive_u64(uint64_t v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint64_t t = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += t;
  }
  return v;
}

// Scratch of the block's collective steps besides the u64 array.
struct Shared {
  uint64_t warp_part[kWarps];
  uint64_t sel_before;  // cumulative weight before the selected group / bucket / id
  uint64_t total;       // the weights' total over the row (id_select) or over the first radix pass
  int64_t sel_index;    // the selected group, bucket or id
  uint32_t n_comp;      // candidates compacted by sorted_compact
  float best_v[kWarps];
  int32_t best_i[kWarps];
  int32_t count[kWarps];
};

// Calls f(g, i0, v[4]) for every 4-logit slice of the row, warp-collectively (a warp's 32 lanes read one group
// of kGroup consecutive ids: group g = i0 / kGroup is read by warp g % kWarps). A pass is bound by load latency
// (one block per row): each warp issues the loads of kUnroll groups before it uses any.
template <class F>
__device__ void for_each_group(const RowView& r, F&& f, int64_t first = 0, int64_t groups = -1) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (groups < 0) groups = (r.vocab + kGroup - 1) / kGroup;
  for (int64_t g0 = first + warp; g0 < groups; g0 += int64_t(kWarps) * kUnroll) {
    float v[kUnroll][4];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t g = g0 + int64_t(u) * kWarps;
      if (g < groups) r.load4(g * kGroup + lane * 4, v[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t g = g0 + int64_t(u) * kWarps;
      if (g < groups) f(g, g * kGroup + lane * 4, v[u]);
    }
  }
}

// Walks the weights at(i), i in [first, end), on from a running sum acc to the first that takes the sum past
// target (sum before <= target < sum through it): index(i) and the sum before it go to sh.sel_index and
// sh.sel_before. Nothing is written if none does.
template <class I, class At, class Index>
__device__ __forceinline__ void walk_to(uint64_t acc, uint64_t target, I first, I end, At&& at, Index&& index, Shared& sh) {
  for (I i = first; i < end; ++i) {
    if (target < acc + at(i)) {
      sh.sel_index = index(i);
      sh.sel_before = acc;
      break;
    }
    acc += at(i);
  }
}

// Exclusive prefix over the block's threads (thread order) of one u64 each; total gets the sum. All threads call.
__device__ uint64_t block_scan(uint64_t mine, Shared& sh, uint64_t& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint64_t incl_w = warp_inclusive_u64(mine, lane);
  __syncthreads();  // sh.warp_part may still be read by a previous step
  if (lane == 31) sh.warp_part[warp] = incl_w;
  __syncthreads();
  if (warp == 0) {
    const uint64_t own = lane < kWarps ? sh.warp_part[lane] : 0;
    const uint64_t t = warp_inclusive_u64(own, lane);
    if (lane < kWarps) sh.warp_part[lane] = t - own;  // exclusive prefix of the warps
    if (lane == 31) sh.total = t;
  }
  __syncthreads();
  total = sh.total;
  return sh.warp_part[warp] + incl_w - mine;
}

// The id within group g whose running sum of wt passes target (gb: the weight of the ids before the group), into
// sh.sel_index and sh.sel_before: warp 0's lanes scan their four-id sums. Called by warp 0 only.
template <class W>
__device__ __forceinline__ void select_in_group(const RowView& r, W&& wt, int64_t g, uint64_t gb, uint64_t target, Shared& sh) {
  const int lane = threadIdx.x & 31;
  const int64_t i0 = g * kGroup + lane * 4;
  float v[4];
  r.load4(i0, v);
  uint64_t w[4], s = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) s += (w[j] = wt(i0 + j, v[j]));
  const uint64_t incl = warp_inclusive_u64(s, lane);
  const uint64_t a = gb + incl - s;
  if (a <= target && target < a + s) walk_to(a, target, 0, 4, [&](int j) { return w[j]; }, [&](int j) { return i0 + j; }, sh);
}

// The id of the first element, in id order, whose running sum of wt(i, v) passes target = target_of(total of wt)
// (sum before <= target < sum through it), and that sum before; -1 when target >= total. Every group's sum
// into sm (one pass), then the group, then the id within it.
template <class W, class T>
__device__ int64_t id_select(const RowView& r, W&& wt, T&& target_of, uint64_t* sm, Shared& sh, uint64_t& before) {
  const int tid = threadIdx.x, lane = tid & 31;
  const int64_t groups = (r.vocab + kGroup - 1) / kGroup;
  __syncthreads();  // sm may still be read by a previous step
  for_each_group(r, [&](int64_t g, int64_t i0, const float* v) {
    uint64_t s = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) s += wt(i0 + j, v[j]);
    s = warp_sum_u64(s);
    if (lane == 0) sm[g] = s;
  });
  if (tid == 0) sh.sel_index = -1;  // stays -1 if target is out of range (a caller's bug: the row fails, no guess)
  __syncthreads();
  // Each thread owns a contiguous run of groups; an exclusive scan of the runs finds the one holding target.
  const int64_t per = (groups + kThreads - 1) / kThreads;
  const int64_t g0 = tid * per, g1 = g0 + per < groups ? g0 + per : groups;
  uint64_t mine = 0;
  for (int64_t g = g0; g < g1; ++g) mine += sm[g];
  const int warp = tid >> 5;
  uint64_t total;
  uint64_t acc = block_scan(mine, sh, total);  // exclusive prefix of this thread's run
  const uint64_t target = target_of(total);
  if (acc <= target && target < acc + mine)
    walk_to(acc, target, g0, g1, [&](int64_t g) { return sm[g]; }, [](int64_t g) { return g; }, sh);
  __syncthreads();
  const int64_t g = sh.sel_index;
  const uint64_t gb = sh.sel_before;
  __syncthreads();
  if (g < 0) return -1;
  if (tid == 0) sh.sel_index = -1;
  __syncthreads();
  if (warp == 0) select_in_group(r, wt, g, gb, target, sh);
  __syncthreads();
  before = sh.sel_before;
  return sh.sel_index;
}

struct Pick {
  uint32_t key;
  int64_t id;
  uint64_t before;  // weight of every element ahead of it in the sorted order
};

// The first element in the sorted order (key descending, id ascending) whose running sum of wt passes
// target = target_of(total of wt over the valid elements); id -1 when target >= total. Four radix passes fix its
// key (per pass a histogram of the weight per 8-bit digit among the elements that share the digits fixed so
// far; the first pass also gives the total), then an id-order select among the elements with that key.
template <class W, class T>
__device__ Pick sorted_select(const RowView& r, W&& wt, T&& target_of, uint64_t* sm, Shared& sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  uint32_t prefix = 0, pmask = 0;
  uint64_t cum = 0;  // weight of the elements with a larger key than the current prefix range
  uint64_t target = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    __syncthreads();  // sm may still be read by a previous step
    for (int i = tid; i < kSmemWords; i += kThreads) sm[i] = 0;
    __syncthreads();
    uint64_t* hist = sm + (warp * kHistCopies / kWarps) * kBuckets;
    for_each_group(r, [&](int64_t, int64_t i0, const float* v) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t k = key_of(v[j]);
        const uint64_t w = valid(v[j]) && (k & pmask) == prefix ? wt(i0 + j, v[j]) : 0;
        // Logits cluster in few buckets: the warp's lanes that share one add their weights first (exact: 20-bit
        // halves of a weight <= 2^40, summed over <= 32 lanes), and one lane does the atomic.
        const unsigned active = __ballot_sync(0xffffffffu, w != 0);
        if (w != 0) {
          const uint32_t b = (k >> shift) & 255u;
          const unsigned peers = __match_any_sync(active, b);
          const uint32_t lo = __reduce_add_sync(peers, uint32_t(w & 0xfffffu));
          const uint32_t hi = __reduce_add_sync(peers, uint32_t(w >> 20));
          if (lane == __ffs(peers) - 1)
            atomicAdd(reinterpret_cast<unsigned long long*>(hist + b), (unsigned long long)((uint64_t(hi) << 20) + lo));
        }
      }
    });
    __syncthreads();
    if (tid < kBuckets) {
      uint64_t s = 0;
      for (int c = 0; c < kHistCopies; ++c) s += sm[c * kBuckets + tid];
      sm[tid] = s;  // copy 0 column tid: only this thread touches it
    }
    if (tid == 0) sh.sel_index = -1;
    __syncthreads();
    if (shift == 24) {  // the first pass saw every weighted element: its histogram's total is the row's
      uint64_t s = 0;
      for (int b = 0; b < 8; ++b) s += sm[255 - 8 * lane - b];
      target = target_of(warp_sum_u64(s));
    }
    if (warp == 0) {  // lane l holds buckets 255-8l down to 248-8l: descending key order across lanes
      uint64_t s = 0;
      for (int b = 0; b < 8; ++b) s += sm[255 - 8 * lane - b];
      const uint64_t incl = warp_inclusive_u64(s, lane);
      const uint64_t a = cum + incl - s;
      const auto bucket = [&](int b) { return 255 - 8 * lane - b; };
      if (a <= target && target < a + s) walk_to(a, target, 0, 8, [&](int b) { return sm[bucket(b)]; }, bucket, sh);
    }
    __syncthreads();
    if (sh.sel_index < 0) return {0, -1, 0};
    prefix |= uint32_t(sh.sel_index) << shift;
    pmask |= 255u << shift;
    cum = sh.sel_before;
  }
  uint64_t in_ties = 0;
  const uint32_t key = prefix;
  const int64_t id = id_select(
      r, [&](int64_t i, float v) -> uint64_t { return valid(v) && key_of(v) == key ? wt(i, v) : 0; },
      [&](uint64_t) { return target - cum; }, sm, sh, in_ties);
  return {key, id, cum + in_ties};
}

// Whether (v, i) is at or before pick p in the sorted order.
__device__ __forceinline__ bool at_or_before(float v, int64_t i, const Pick& p) {
  const uint32_t k = key_of(v);
  return k > p.key || (k == p.key && i <= p.id);
}

// The logit of an order-preserving key (key_of's inverse).
__device__ __forceinline__ float value_of(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Bitonic step of element i against its partner i ^ j in runs of k: runs where (i & k) == 0 descend, so the lower
// position keeps the larger entry there and the smaller one in ascending runs.
__device__ __forceinline__ uint64_t bitonic_keep(int i, int j, int k, uint64_t mine, uint64_t other) {
  const bool larger = ((i & j) == 0) == ((i & k) == 0);
  return larger ? (mine > other ? mine : other) : (mine < other ? mine : other);
}

// Sorts entries (key << 32 | ~id) [0, n) of data (n <= kSmemWords) descending, so key descending, id ascending:
// bitonic over n rounded up to a power of two np2 (the padding is 0, below every entry). Thread t holds elements
// 4t .. 4t + 3 in registers: partners 1 and 2 apart are its own, 4 to 64 apart a lane's of its warp (shuffles, by the
// warps that hold entries), 128 and more another warp's, through xchg [np2]. xchg may be data itself when data has
// room for np2 (then data [n, np2) is overwritten); otherwise data past n is untouched. Ends with a barrier.
static_assert(kSmemWords == 4 * kThreads, "four entries per thread");
__device__ void sort_entries(uint64_t* data, int n, uint64_t* xchg) {
  const int tid = threadIdx.x, base = 4 * tid;
  int np2 = 1;
  while (np2 < n) np2 <<= 1;
  const bool mine = base < np2;                    // whether this thread holds entries of the sort
  const bool live = (tid & ~31) * 4 < np2;         // whether its warp does
  __syncthreads();                                 // the entries were written by other threads
  uint64_t v[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) v[r] = base + r < n ? data[base + r] : 0;
  for (int k = 2; k <= np2; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      if (j >= 128) {  // the partner is another warp's
        __syncthreads();  // the last step's reads of xchg are done
        if (mine)
#pragma unroll
          for (int r = 0; r < 4; ++r) xchg[base + r] = v[r];
        __syncthreads();
        if (mine)
#pragma unroll
          for (int r = 0; r < 4; ++r) v[r] = bitonic_keep(base + r, j, k, v[r], xchg[(base + r) ^ j]);
      } else if (!live) {
        continue;
      } else if (j >= 4) {  // lane ^ j / 4 of this warp
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const uint64_t other = __shfl_xor_sync(0xffffffffu, v[r], j >> 2);
          v[r] = bitonic_keep(base + r, j, k, v[r], other);
        }
      } else {  // this thread's own (j spelled out: register indices must be constants)
        uint64_t w[4];
        if (j == 2)
#pragma unroll
          for (int r = 0; r < 4; ++r) w[r] = bitonic_keep(base + r, 2, k, v[r], v[r ^ 2]);
        else
#pragma unroll
          for (int r = 0; r < 4; ++r) w[r] = bitonic_keep(base + r, 1, k, v[r], v[r ^ 1]);
#pragma unroll
        for (int r = 0; r < 4; ++r) v[r] = w[r];
      }
    }
  __syncthreads();  // the last step's reads of xchg are done
#pragma unroll
  for (int r = 0; r < 4; ++r)
    if (base + r < n) data[base + r] = v[r];
  __syncthreads();
}

constexpr int kCuts = 6;           // top-p: log-weight distances from the top at which each thread counts
constexpr int kBins = 64;          // top-k: a histogram by log-weight distance from the top in steps of
constexpr float kBinsPerUnit = 4;  // 1/4, up to 16 (weights below e^-16 of the top's are never short-listed)

// Top-k / top-p when the candidates are few (trained models' logits usually are peaked): one pass finds a
// distance d from the top, in log-weight, within which every candidate surely lies and at most kSmemWords
// logits do; those are compacted into sm and sorted there (key descending, id ascending: bitonic), and top-k,
// top-p, min-p and the draw run on that short list with the radix path's fixed-point weights. Top-p (no top-k
// cut) needs the row's total weight and the weight within each cut: each thread counts at kCuts distances in
// registers (shared-memory atomics on clustered logits cost more than the pass). Top-k needs counts only, at a
// finer resolution (the k-th logit can sit deep in a dense bulk): a count histogram by quarter units. Returns
// the token, or -2 when no distance qualifies (the caller takes the radix path).
__device__ int64_t sorted_compact(const RowView& r, const SampleRow& R, const Weights& W, bool cut_k, uint64_t* sm,
                                  Shared& sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const auto dist = [&](float v) { return __fsub_rn(W.mx_t, __fmul_rn(v, W.inv_t)); };  // -(weight exponent)
  const auto bin_of = [&](float v) {  // kBins (none) when invalid or too far from the top
    if (!valid(v)) return kBins;
    const float d4 = __fmul_rn(dist(v), kBinsPerUnit);
    return d4 < float(kBins) ? int(d4) : kBins;
  };
  const float cuts[kCuts] = {1.0f, 2.0f, 4.0f, 6.0f, 9.0f, 13.0f};
  float cut = -1.0f;
  int last = -1;
  uint64_t t_p = 0;  // the nucleus' weight target over the whole row (top-p without top-k)
  __syncthreads();   // sm may still be read by a previous step
  if (!cut_k) {
    uint32_t cnt[kCuts] = {};
    uint64_t mass[kCuts] = {};
    uint64_t total = 0;
    for_each_group(r, [&](int64_t, int64_t, const float* v) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (!valid(v[j])) continue;
        const float d = dist(v[j]);
        const uint64_t w = W.fixed(W.real(v[j]));
        total += w;
#pragma unroll
        for (int c = 0; c < kCuts; ++c)
          if (d <= cuts[c]) ++cnt[c], mass[c] += w;
      }
    });
    uint64_t* part = sm;  // [kWarps, 2 kCuts + 1] (integers: any order gives the same sums)
#pragma unroll
    for (int c = 0; c < kCuts; ++c) {
      const uint64_t a = warp_sum_u64(cnt[c]), b = warp_sum_u64(mass[c]);
      if (lane == 0) part[warp * (2 * kCuts + 1) + c] = a, part[warp * (2 * kCuts + 1) + kCuts + c] = b;
    }
    total = warp_sum_u64(total);
    if (lane == 0) part[warp * (2 * kCuts + 1) + 2 * kCuts] = total;
    __syncthreads();
    uint64_t sums[2 * kCuts + 1] = {};
    for (int w = 0; w < kWarps; ++w)
      for (int q = 0; q < 2 * kCuts + 1; ++q) sums[q] += part[w * (2 * kCuts + 1) + q];
    t_p = nucleus_target(R.top_p, sums[2 * kCuts]);
    for (int c = 0; c < kCuts && cut < 0.0f; ++c) {
      if (sums[c] > uint64_t(kSmemWords)) break;
      if (sums[kCuts + c] >= t_p) cut = cuts[c];
    }
    if (cut < 0.0f) return -2;
  } else {
    uint32_t* hcount = reinterpret_cast<uint32_t*>(sm);  // [kHistCopies, kBins]
    for (int i = tid; i < kHistCopies * kBins / 2; i += kThreads) sm[i] = 0;
    __syncthreads();
    const int copy = warp * kHistCopies / kWarps;
    for_each_group(r, [&](int64_t, int64_t, const float* v) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int b = bin_of(v[j]);
        const unsigned active = __ballot_sync(0xffffffffu, b < kBins);
        if (b < kBins) {  // lanes sharing a bin count together: one atomic per bin and warp step
          const unsigned peers = __match_any_sync(active, b);
          if (lane == __ffs(peers) - 1) atomicAdd(hcount + copy * kBins + b, uint32_t(__popc(peers)));
        }
      }
    });
    __syncthreads();
    uint64_t cc = 0;  // every thread walks the bins: all agree
    for (int b = 0; b < kBins && last < 0; ++b) {
      for (int k = 0; k < kHistCopies; ++k) cc += hcount[k * kBins + b];
      if (cc > uint64_t(kSmemWords)) break;
      if (cc >= uint64_t(R.top_k)) last = b;
    }
    if (last < 0) return -2;
  }
  const auto take = [&](float v) { return cut_k ? bin_of(v) <= last : valid(v) && dist(v) <= cut; };

  // Compact: (key << 32 | ~id) sorts descending as key descending, id ascending.
  __syncthreads();
  if (tid == 0) sh.n_comp = 0;
  __syncthreads();
  for_each_group(r, [&](int64_t, int64_t i0, const float* v) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (!take(v[j])) continue;
      const uint32_t slot = atomicAdd(&sh.n_comp, 1u);
      sm[slot] = (uint64_t(key_of(v[j])) << 32) | uint32_t(~uint32_t(i0 + j));
    }
  });
  __syncthreads();
  const int n = int(sh.n_comp);
  sort_entries(sm, n, sm);

  // Each thread owns up to kPer consecutive entries of the sorted list.
  constexpr int kPer = (kSmemWords + kThreads - 1) / kThreads;
  const int e0 = tid * kPer;
  float wf[kPer];
  uint64_t w[kPer];
  uint64_t z_mine = 0;
  const int k_eff = cut_k ? int(R.top_k) : n;
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int i = e0 + q;
    wf[q] = 0.0f;
    w[q] = 0;
    if (i < n) {
      wf[q] = W.real(value_of(uint32_t(sm[i] >> 32)));
      w[q] = W.fixed(wf[q]);
    }
    if (i < k_eff) z_mine += w[q];
  }
  uint64_t z;
  uint64_t acc = block_scan(z_mine, sh, z);
  int end = k_eff - 1;
  if (R.top_p < 1.0f) {
    const uint64_t target = cut_k ? nucleus_target(R.top_p, z) : t_p;
    __syncthreads();
    if (tid == 0) sh.sel_index = k_eff - 1;  // the whole top-k set if rounding leaves the target unreached
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      const int i = e0 + q;
      if (i >= k_eff) break;
      if (acc < target && acc + w[q] >= target) sh.sel_index = i;
      acc += w[q];
    }
    __syncthreads();
    end = int(sh.sel_index);
  }
  // The draw over entries 0..end whose weight passes min-p.
  uint64_t d_mine = 0;
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    if (e0 + q > end || wf[q] < R.min_p) w[q] = 0;
    d_mine += w[q];
  }
  uint64_t dtot;
  acc = block_scan(d_mine, sh, dtot);
  const uint64_t target = draw_target(R.u, dtot);
  __syncthreads();
  if (tid == 0) sh.sel_index = -1;
  __syncthreads();
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    if (acc <= target && target < acc + w[q]) sh.sel_index = int64_t(~uint32_t(sm[e0 + q]));
    acc += w[q];
  }
  __syncthreads();
  return sh.sel_index;
}

// Top-k / top-p over the whole row by one block (the path of rows the cluster path cannot finish: a bin of tied or
// near-tied logits longer than the list, or a top logit whose weights overflow): a short list sorted in shared memory
// when the candidates are few (sorted_compact), otherwise weighted radix selects.
__device__ int64_t whole_row_truncate(const RowView& rv, const SampleRow& R, const Weights& W, int32_t n_valid,
                                      uint64_t* sm, Shared& sh) {
  const float min_p = R.min_p;
  const auto draw = [&](uint64_t total) { return draw_target(R.u, total); };
  const bool cut_k = R.top_k > 0 && R.top_k < n_valid;
  const int64_t few = sorted_compact(rv, R, W, cut_k, sm, sh);
  if (few != -2) return few;
  // Top-k: the k-th element of the sorted order (a count select); the weights beyond it are zero from here on.
  Pick end_k{0, -1, 0};
  if (cut_k) {
    end_k = sorted_select(rv, [](int64_t, float) -> uint64_t { return 1; },
                          [&](uint64_t) { return uint64_t(R.top_k - 1); }, sm, sh);
    if (end_k.id < 0) return -1;
  }
  auto w_k = [&](int64_t i, float v) -> uint64_t {
    return valid(v) && (!cut_k || at_or_before(v, i, end_k)) ? W.fixed(W.real(v)) : 0;
  };
  Pick end = end_k;
  bool has_end = cut_k;
  if (R.top_p < 1.0f) {
    // The nucleus of the top-k set's weight z: its end is the first element whose running weight passes
    // nucleus_target - 1.
    end = sorted_select(rv, w_k, [&](uint64_t z) { return nucleus_target(R.top_p, z) - 1; }, sm, sh);
    if (end.id < 0) return -1;
    has_end = true;
  }
  // The draw over the candidates (at or before the end), min-p as a weight floor (weights fall along the order).
  auto w_cand = [&](int64_t i, float v) -> uint64_t {
    if (!valid(v) || (has_end && !at_or_before(v, i, end))) return 0;
    const float w = W.real(v);
    return w >= min_p ? W.fixed(w) : 0;
  };
  return sorted_select(rv, w_cand, draw, sm, sh).id;
}

// ---- The cluster path: a row split over the blocks of a thread-block cluster (sm_90) ----
// Rank truncation without a sort of the row: one pass histograms the candidates by their log-weight distance from
// the top, d = max/T - v/T (bins of 1/64 up to 32, beyond which a weight is below 2^-40, fixed-point 0), with each
// bin's count and fixed-point weight, exact and so the same whatever the split. Bins follow the sorted order (d
// rises along it), so the top-k cut, the nucleus' end and the draw each fall in a bin found from the bins' sums;
// only those bins' logits are compacted into one list, placed by bin (the bins' counts give each its segment), and
// the entry each needs is found by radix selects on its bin's segment, unsorted (select_in_segment). The same
// weights, targets and order as the whole-row path: the same token.
constexpr int kMaxCluster = 8;                 // blocks per row (portable cluster size)
constexpr int kDistBins = 2048;
constexpr float kDistPerUnit = 64.0f;
constexpr float kDistMax = 32.0f;              // e^-32 < 2^-40: a weight's fixed point is 0 beyond
constexpr int kList = kSmemWords;              // the compacted list's capacity
constexpr int kPer = kList / kThreads;         // list entries (and bins) per thread in the block scans
constexpr int kSelWords = 256 + 128;           // select_in_segment's scratch: [256] u64 weights, [256] u32 counts
constexpr size_t kDynBytes = size_t(kDistBins) * 16 + size_t(kList + kSelWords) * 8 + size_t(kDistBins) * 8;

// What a block of a cluster shares with its peers.
struct Peer {
  float best_v;       // the slice's best logit and id, and its number of valid logits
  int32_t best_i;
  int32_t n_valid;
  uint64_t total;     // the slice's weight (no rank truncation)
  int32_t op;         // rank 0's command: 1 compact the bins lo[r]..hi[r] (r < nr) into rank 0's list, 0 done
  int32_t nr;
  int32_t lo[2], hi[2];
};

template <class T>
__device__ __forceinline__ T* at_rank(T* p, uint32_t rank, int C) { return C > 1 ? peer_ptr(p, rank) : p; }
__device__ __forceinline__ void csync(int C) {
  if (C > 1) cluster_sync();
  else __syncthreads();
}

// Σ val(i) over i in [0, n), n <= kList; every thread gets it. All threads call.
template <class V>
__device__ uint64_t block_sum(int n, V&& val, Shared& sh) {
  const int e0 = threadIdx.x * kPer;
  uint64_t s = 0;
#pragma unroll
  for (int q = 0; q < kPer; ++q)
    if (e0 + q < n) s += val(e0 + q);
  uint64_t total;
  block_scan(s, sh, total);
  return total;
}

// A u64 shared-memory sum by two native 32-bit atomics (a 64-bit add is a compare-and-swap loop; this halved the
// histogram pass on an H100): the adder that carries out of the low word adds the carry to the high one.
__device__ __forceinline__ void add_u64_shared(uint64_t* p, uint64_t f) {
  uint32_t* w = reinterpret_cast<uint32_t*>(p);  // [0] low, [1] high (little-endian)
  const uint32_t lo = uint32_t(f), hi = uint32_t(f >> 32);
  const uint32_t old = atomicAdd(w, lo);
  const uint32_t up = hi + (old + lo < old ? 1u : 0u);
  if (up != 0) atomicAdd(w + 1, up);
}

// select_in_segment for a short segment (m <= kSmallSelect): thread t takes entry t and sums the weights of the
// entries above it, a pass over the segment (cheaper than the radix rounds' barriers while m is small).
constexpr int kSmallSelect = 256;  // <= kThreads, and its weights fit the scratch's [256] u64
static_assert(kSmallSelect <= kThreads && kSmallSelect <= 256, "one entry per thread, weights in the scratch");
template <class Wt>
__device__ uint64_t select_small(const uint64_t* seg, int m, Wt&& wt, uint64_t target, uint64_t* scratch,
                                 Shared& sh) {
  const int tid = threadIdx.x;
  __syncthreads();  // scratch and sh may still be read by a previous step
  const uint64_t e = tid < m ? seg[tid] : 0, w = tid < m ? wt(e) : 0;
  if (tid < m) scratch[tid] = w;  // [m] the entries' weights
  if (tid == 0) sh.total = 0;
  __syncthreads();
  if (w != 0) {
    uint64_t before = 0;
    for (int j = 0; j < m; ++j) before += seg[j] > e ? scratch[j] : 0;
    if (before <= target && target < before + w) sh.total = e;  // one entry at most
  }
  __syncthreads();
  const uint64_t r = sh.total;
  __syncthreads();  // sh is written again by the next step
  return r;
}

// The entry of seg [0, m) (m <= kList) at which the running sum of wt(entry) over the sorted order (entries
// descending) passes target (the sum before it <= target < the sum through it), without sorting seg: radix selects
// on the entries' bits below those all share, 8 a round, each round's digits' weights and counts summed in scratch
// ([256] u64, then [256] u32) and the digit the target falls in kept, until one entry is left (a short segment:
// select_small). 0 when target is at or past the segment's sum. All threads call.
template <class Wt>
__device__ uint64_t select_in_segment(const uint64_t* seg, int m, Wt&& wt, uint64_t target, uint64_t* scratch,
                                      Shared& sh) {
  if (m <= kSmallSelect) return select_small(seg, m, wt, target, scratch, sh);
  const int tid = threadIdx.x, lane = tid & 31, e0 = tid * kPer;
  uint64_t v[kPer], w[kPer], any = 0, all = ~0ull;
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const bool in = e0 + q < m;
    v[q] = in ? seg[e0 + q] : 0;
    w[q] = in ? wt(v[q]) : 0;
    if (in) any |= v[q], all &= v[q];
  }
  for (int o = 16; o > 0; o >>= 1) {
    any |= __shfl_xor_sync(0xffffffffu, any, o);
    all &= __shfl_xor_sync(0xffffffffu, all, o);
  }
  uint64_t* wsum = scratch;                                   // [256] a digit's weight
  uint32_t* count = reinterpret_cast<uint32_t*>(scratch + 256);  // [256] a digit's entries
  __syncthreads();  // scratch and sh may still be read by a previous step
  if (tid == 0) wsum[0] = 0, wsum[1] = ~0ull;
  __syncthreads();
  if (lane == 0) {
    atomicOr(reinterpret_cast<unsigned long long*>(wsum), (unsigned long long)any);
    atomicAnd(reinterpret_cast<unsigned long long*>(wsum + 1), (unsigned long long)all);
  }
  __syncthreads();
  uint64_t cur = wsum[1];                                     // the bits every candidate has, as far as fixed
  const uint64_t differ = wsum[0] ^ wsum[1];
  int hi = differ == 0 ? 0 : 64 - __clzll((long long)differ);  // bits [hi, 64) are fixed
  const auto above = [](uint64_t x, int h) { return h >= 64 ? 0ull : x >> h; };
  uint32_t left = uint32_t(m);
  while (hi > 0 && left > 1) {
    const int shift = hi > 8 ? hi - 8 : 0;
    const uint64_t digits = (uint64_t(1) << (hi - shift)) - 1;
    __syncthreads();  // this round's scratch is free
    if (tid < 256) wsum[tid] = 0, count[tid] = 0;
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      if (e0 + q >= m || above(v[q], hi) != above(cur, hi)) continue;
      const int d = int((v[q] >> shift) & digits);
      atomicAdd(count + d, 1u);
      if (w[q] != 0) add_u64_shared(wsum + d, w[q]);
    }
    __syncthreads();
    const int d = 255 - tid;  // thread t takes digit 255 - t: the scan runs in the sorted order
    const uint64_t mine = tid < 256 ? wsum[d] : 0;
    uint64_t total;
    const uint64_t before = block_scan(mine, sh, total);
    if (target >= total) return 0;  // the same for every thread
    if (tid < 256 && before <= target && target < before + mine) {
      sh.sel_index = d;
      sh.sel_before = before;
      sh.n_comp = count[d];
    }
    __syncthreads();
    target -= sh.sel_before;
    cur = (cur & ~(digits << shift)) | (uint64_t(sh.sel_index) << shift);
    left = sh.n_comp;
    hi = shift;
  }
  if (left == 0) return 0;  // m == 0
  __syncthreads();  // sh is read above
#pragma unroll
  for (int q = 0; q < kPer; ++q)
    if (e0 + q < m && above(v[q], hi) == above(cur, hi)) sh.total = v[q], sh.sel_before = w[q];  // the one left
  __syncthreads();
  const uint64_t e = sh.total, we = sh.sel_before;
  __syncthreads();  // sh is written again by the next step
  return target < we ? e : 0;  // (m == 1: no round checked the target)
}

// The bin of a valid logit, kDistBins when beyond kDistMax (or when the distance is not a number).
__device__ __forceinline__ int dist_bin(const Weights& W, float v) {
  const float d = __fsub_rn(W.mx_t, __fmul_rn(v, W.inv_t));
  return d < kDistMax ? min(int(d * kDistPerUnit), kDistBins - 1) : kDistBins;
}

// The id of the row's first element, in id order, whose running sum of wt passes target (base: the weight of the
// rows' ids before the slice; target lies in this slice's weight), from the slice's group sums gsum [ng].
template <class Wt>
__device__ int64_t select_in_groups(const RowView& r, Wt&& wt, const uint64_t* gsum, int64_t g_begin, int ng,
                                    uint64_t base, uint64_t target, Shared& sh) {
  const int tid = threadIdx.x, warp = tid >> 5;
  const int per = (ng + kThreads - 1) / kThreads;
  const int j0 = tid * per, j1 = min(j0 + per, ng);
  uint64_t mine = 0;
  for (int j = j0; j < j1; ++j) mine += gsum[j];
  uint64_t total;
  const uint64_t acc = base + block_scan(mine, sh, total);
  if (acc <= target && target < acc + mine)
    walk_to(acc, target, j0, j1, [&](int j) { return gsum[j]; }, [](int j) { return int64_t(j); }, sh);
  __syncthreads();
  const int64_t g = g_begin + sh.sel_index;
  const uint64_t gb = sh.sel_before;
  __syncthreads();
  if (warp == 0) select_in_group(r, wt, g, gb, target, sh);
  __syncthreads();
  const int64_t id = sh.sel_index;
  __syncthreads();
  return id;
}

// Grid (rows · C), clusters of C blocks along x (C = 1: no cluster): block rank q of a row takes its groups
// [groups·q/C, groups·(q+1)/C). logits [m, vocab]; rows [n]; masks [*, ceil(vocab/32)]; penalties [*]; scratch
// [*, vocab] (rows with penalties); tokens [n] (-1: no allowed finite logit). Dynamic shared memory: kDynBytes.
__global__ void __launch_bounds__(kThreads) sample_kernel(const float* __restrict__ logits, int64_t vocab,
                                                          const SampleRow* __restrict__ rows,
                                                          const uint32_t* __restrict__ masks,
                                                          const TokenPenalty* __restrict__ penalties, float* scratch,
                                                          int32_t* __restrict__ tokens, int C) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(16) uint64_t dyn[];
  uint64_t* mass = dyn;                 // [kDistBins] fixed-point weight per bin
  uint64_t* massd = dyn + kDistBins;    // [kDistBins] the same over the weights that pass min-p
  uint64_t* list = dyn + 2 * kDistBins; // [kList] compacted entries; the whole-row path's scratch; group sums
  uint64_t* sel = list + kList;         // [kSelWords] the selects' scratch
  uint32_t* cnt = reinterpret_cast<uint32_t*>(sel + kSelWords);  // [kDistBins] logits per bin
  uint32_t* fill = cnt + kDistBins;     // [kDistBins] rank 0: the list position of a bin's next entry
  __shared__ Shared sh;
  __shared__ Peer me;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t row = blockIdx.x / C;
  const uint32_t rank = blockIdx.x % C;
  const SampleRow R = rows[row];
  const int64_t words = (vocab + 31) / 32, groups = (vocab + kGroup - 1) / kGroup;
  const int64_t g_begin = groups * rank / C, g_end = groups * (rank + 1) / C;
  const float* x = logits + R.logit_row * vocab;
  RowView rv{x, R.mask >= 0 ? masks + int64_t(R.mask) * words : nullptr, vocab,
             (reinterpret_cast<uintptr_t>(x) & 15) == 0, false};

  if (R.pen_count > 0) {  // the slice, masked, into scratch, then the penalties on its ids (each listed token once)
    float* dst = scratch + int64_t(R.scratch) * vocab;  // [vocab]
    const int64_t i_begin = g_begin * kGroup, i_end = min(g_end * kGroup, vocab);
    for (int64_t i = i_begin + tid; i < i_end; i += kThreads) dst[i] = rv.fix(x[i], i);
    __syncthreads();
    for (int e = tid; e < R.pen_count; e += kThreads) {
      const TokenPenalty p = penalties[R.pen_begin + e];
      if (p.token < i_begin || p.token >= i_end) continue;
      float l = dst[p.token];
      if (p.repetition) l = l > 0 ? __fdiv_rn(l, R.repetition) : __fmul_rn(l, R.repetition);
      dst[p.token] = __fsub_rn(l, p.subtract);
    }
    __syncthreads();
    rv = RowView{dst, nullptr, vocab, (reinterpret_cast<uintptr_t>(dst) & 15) == 0, true};
  }

  // The best (max logit, lowest id) and the number of valid logits: the slice's, then the row's.
  float bv = 0.0f;
  int32_t bi = -1;
  int32_t n_valid = 0;
  for_each_group(rv, [&](int64_t, int64_t i0, const float* v) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (!valid(v[j])) continue;
      ++n_valid;
      if (better_pair(v[j], int32_t(i0 + j), bv, bi)) bv = v[j], bi = int32_t(i0 + j);
    }
  }, g_begin, g_end);
  warp_best(bv, bi);
  for (int o = 16; o > 0; o >>= 1) n_valid += __shfl_xor_sync(0xffffffffu, n_valid, o);
  if (lane == 0) sh.best_v[warp] = bv, sh.best_i[warp] = bi, sh.count[warp] = n_valid;
  __syncthreads();
  bv = lane < kWarps ? sh.best_v[lane] : 0.0f;
  bi = lane < kWarps ? sh.best_i[lane] : -1;
  n_valid = lane < kWarps ? sh.count[lane] : 0;
  warp_best(bv, bi);
  for (int o = 16; o > 0; o >>= 1) n_valid += __shfl_xor_sync(0xffffffffu, n_valid, o);
  if (tid == 0) me.best_v = bv, me.best_i = bi, me.n_valid = n_valid;
  csync(C);
  {
    const Peer* p = lane < C ? at_rank(&me, uint32_t(lane), C) : nullptr;
    bv = p ? p->best_v : 0.0f;
    bi = p ? p->best_i : -1;
    n_valid = p ? p->n_valid : 0;
  }
  warp_best(bv, bi);
  for (int o = 16; o > 0; o >>= 1) n_valid += __shfl_xor_sync(0xffffffffu, n_valid, o);
  if (bi < 0 || R.inv_temperature == 0.0f) {  // nothing allowed, or greedy (after the mask and penalties)
    if (rank == 0 && tid == 0) tokens[row] = bi;
    csync(C);  // the peers may still read `me`
    return;
  }

  const Weights W{R.inv_temperature, __fmul_rn(bv, R.inv_temperature)};
  const float min_p = R.min_p;
  if (R.top_k == 0 && R.top_p >= 1.0f) {
    // No truncation by rank: the candidates in id order (the host's order here), min-p as a weight floor. Each
    // block sums its slice's groups; the block whose slice holds the draw finds the id.
    auto wt = [&](int64_t, float v) -> uint64_t {
      if (!valid(v)) return 0;
      const float w = W.real(v);
      return w > 0.0f && w >= min_p ? W.fixed(w) : 0;
    };
    uint64_t* gsum = list;
    for_each_group(rv, [&](int64_t g, int64_t i0, const float* v) {
      uint64_t s = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) s += wt(i0 + j, v[j]);
      s = warp_sum_u64(s);
      if (lane == 0) gsum[g - g_begin] = s;
    }, g_begin, g_end);
    __syncthreads();
    const int ng = int(g_end - g_begin);
    const uint64_t mine = block_sum(ng, [&](int j) { return gsum[j]; }, sh);
    if (tid == 0) me.total = mine;
    if (rank == 0 && tid == 0) tokens[row] = -1;  // stays if the draw finds nothing (never with a top weight of 1)
    csync(C);
    uint64_t t = lane < C ? at_rank(&me, uint32_t(lane), C)->total : 0;
    const uint64_t total = warp_sum_u64(t);
    const uint64_t before = warp_sum_u64(lane < int(rank) ? t : 0);
    const uint64_t target = draw_target(R.u, total);
    if (total > 0 && before <= target && target < before + mine) {
      const int64_t id = select_in_groups(rv, wt, gsum, g_begin, ng, before, target, sh);
      if (tid == 0) tokens[row] = int32_t(id);
    }
    csync(C);
    return;
  }

  // Rank truncation. The histogram of the slice, then each block sums its share of the bins over the cluster.
  const bool mp = min_p > 0.0f;
  for (int i = tid; i < kDistBins; i += kThreads) cnt[i] = 0, mass[i] = 0, massd[i] = 0;
  __syncthreads();
  if (isfinite(W.mx_t))
    for_each_group(rv, [&](int64_t, int64_t, const float* v) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (!valid(v[j])) continue;
        const int b = dist_bin(W, v[j]);
        if (b == kDistBins) continue;
        atomicAdd(cnt + b, 1u);
        const float w = W.real(v[j]);
        const uint64_t f = W.fixed(w);
        if (f == 0) continue;
        add_u64_shared(mass + b, f);
        if (mp && w >= min_p) add_u64_shared(massd + b, f);
      }
    }, g_begin, g_end);
  csync(C);
  const int share = kDistBins / C;
  for (int b = int(rank) * share + tid; b < int(rank + 1) * share; b += kThreads) {
    uint32_t c = 0;
    uint64_t m = 0, md = 0;
    for (int q = 0; q < C; ++q) {
      c += at_rank(cnt, uint32_t(q), C)[b];
      m += at_rank(mass, uint32_t(q), C)[b];
      if (mp) md += at_rank(massd, uint32_t(q), C)[b];
    }
    cnt[b] = c, mass[b] = m, massd[b] = mp ? md : m;
  }
  csync(C);

  // Compacts this slice's logits of bins lo[r]..hi[r] (r < nr, as `me` says) into rank 0's list, each at its bin's
  // next position (rank 0's fill).
  const auto compact = [&]() {
    const int nr = me.nr;
    const int lo0 = me.lo[0], hi0 = me.hi[0], lo1 = nr > 1 ? me.lo[1] : 1, hi1 = nr > 1 ? me.hi[1] : 0;
    uint32_t* fill0 = at_rank(fill, 0, C);
    uint64_t* list0 = at_rank(list, 0, C);
    for_each_group(rv, [&](int64_t, int64_t i0, const float* v) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (!valid(v[j])) continue;
        const int b = dist_bin(W, v[j]);
        if (!((lo0 <= b && b <= hi0) || (lo1 <= b && b <= hi1))) continue;
        const uint32_t slot = atomicAdd(fill0 + b, 1u);
        list0[slot] = (uint64_t(key_of(v[j])) << 32) | uint32_t(~uint32_t(i0 + j));
      }
    }, g_begin, g_end);
  };
  if (rank != 0) {  // rank 0 decides; the peers compact what it asks for until it is done
    for (;;) {
      csync(C);
      if (me.op == 0) return;
      compact();
      csync(C);
    }
  }
  for (int b = share + tid; C > 1 && b < kDistBins; b += kThreads) {  // gather the peers' shares
    const uint32_t q = uint32_t(b / share);
    cnt[b] = at_rank(cnt, q, C)[b];
    mass[b] = at_rank(mass, q, C)[b];
    massd[b] = at_rank(massd, q, C)[b];
  }
  __syncthreads();

  // Rank 0: the bins' inclusive prefix sums, in place (thread t owns bins 2t and 2t+1); from here on, bin lookups
  // are binary searches every thread makes alike.
  static_assert(kDistBins == 2 * kThreads, "two bins per thread");
  {
    const int b0 = 2 * tid;
    uint64_t total;
    const uint64_t c0 = cnt[b0], c1 = cnt[b0 + 1];
    const uint64_t ca = block_scan(c0 + c1, sh, total);
    cnt[b0] = uint32_t(ca + c0), cnt[b0 + 1] = uint32_t(ca + c0 + c1);
    const uint64_t m0 = mass[b0], m1 = mass[b0 + 1];
    const uint64_t ma = block_scan(m0 + m1, sh, total);
    mass[b0] = ma + m0, mass[b0 + 1] = ma + m0 + m1;
    const uint64_t d0 = massd[b0], d1 = massd[b0 + 1];
    const uint64_t da = block_scan(d0 + d1, sh, total);
    massd[b0] = da + d0, massd[b0 + 1] = da + d0 + d1;
    __syncthreads();
  }
  const auto cum = [&](const auto* a, int b) -> uint64_t { return b < 0 ? 0 : uint64_t(a[b]); };
  const auto find = [&](const auto* a, uint64_t target) -> int {  // the first bin whose prefix passes target, or -1
    if (uint64_t(a[kDistBins - 1]) <= target) return -1;
    int lo = 0, hi = kDistBins - 1;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (uint64_t(a[mid]) > target) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
  const auto bins_count = [&](int lo, int hi) { return cum(cnt, hi) - cum(cnt, lo - 1); };

  // A compaction round adds bins to the list: range r's bins lo..hi from had_start[r] on, a bin's segment after the
  // counts of the range's bins before it. Segments stay unsorted: the cut, the end and the draw are selects.
  int list_n = 0, n_had = 0;
  int had_lo[6], had_hi[6], had_start[6];
  bool peers_live = true;
  const auto finish_peers = [&]() {
    if (!peers_live) return;
    peers_live = false;
    if (tid > 0 && tid < C) at_rank(&me, uint32_t(tid), C)->op = 0;
    csync(C);
  };
  // One round over bins lo[r]..hi[r] (none already listed); false, with nothing done, when they would overflow.
  const auto request = [&](int nr, const int* lo, const int* hi) -> bool {
    uint64_t c = 0;
    for (int r = 0; r < nr; ++r) c += bins_count(lo[r], hi[r]);
    if (uint64_t(list_n) + c > uint64_t(kList) || n_had + nr > 6) return false;
    if (tid < C) {
      Peer* p = at_rank(&me, uint32_t(tid), C);
      p->op = 1, p->nr = nr;
      for (int r = 0; r < nr; ++r) p->lo[r] = lo[r], p->hi[r] = hi[r];
    }
    for (int r = 0; r < nr; ++r) {
      for (int b = lo[r] + tid; b <= hi[r]; b += kThreads)
        fill[b] = uint32_t(list_n + int(cum(cnt, b - 1) - cum(cnt, lo[r] - 1)));
      had_lo[n_had] = lo[r], had_hi[n_had] = hi[r], had_start[n_had++] = list_n;
      list_n += int(bins_count(lo[r], hi[r]));
    }
    csync(C);  // fill is set
    compact();
    csync(C);
    return true;
  };
  const auto ensure = [&](int b) -> bool {
    for (int r = 0; r < n_had; ++r)
      if (had_lo[r] <= b && b <= had_hi[r]) return true;
    const int lo[1] = {b};
    return request(1, lo, lo);
  };
  const auto entry_wt = [&](uint64_t e) { return W.fixed(W.real(value_of(uint32_t(e >> 32)))); };  // its weight
  const auto seg_begin = [&](int b) {  // the list position of listed bin b's segment
    for (int r = 0; r < n_had; ++r)
      if (had_lo[r] <= b && b <= had_hi[r]) return had_start[r] + int(cum(cnt, b - 1) - cum(cnt, had_lo[r] - 1));
    return list_n;  // not listed: callers ensure() it first
  };
  const auto seg_end = [&](int b) { return seg_begin(b) + int(bins_count(b, b)); };
  // On a bin's segment list[s, s + m): entries past `limit` in the sorted order (entries compare as the order,
  // larger is earlier; 0: none past it) weigh 0, the others wt(entry). Their sum, and the select at target.
  const auto seg_sum = [&](int s, int m, uint64_t limit, auto&& wt) {
    return block_sum(m, [&](int q) -> uint64_t { return list[s + q] >= limit ? wt(list[s + q]) : 0; }, sh);
  };
  const auto seg_select = [&](int s, int m, uint64_t limit, auto&& wt, uint64_t target) {
    const auto w = [&](uint64_t e) -> uint64_t { return e >= limit ? wt(e) : 0; };
    return select_in_segment(list + s, m, w, target, sel, sh);
  };

  int64_t token = -2;  // -2: the whole-row path decides
  do {
    if (!isfinite(W.mx_t)) break;
    const uint64_t tot_mass = mass[kDistBins - 1];
    // The top-k cut: in bin bk, its first kk logits (none: the cut lies beyond the bins, among weights of 0).
    int bk = -1;
    int64_t kk = 0;
    if (R.top_k > 0 && R.top_k < n_valid) {
      bk = find(cnt, uint64_t(R.top_k - 1));
      kk = int64_t(R.top_k) - int64_t(cum(cnt, bk - 1));
    }
    const bool cut = bk >= 0;
    // The first round: every bin up to the last one needed when they fit, else the bins the cut, the nucleus and
    // the draw fall in as far as the bins' sums tell.
    {
      int upper = bk, be0 = -1;
      if (!cut && R.top_p < 1.0f) upper = be0 = find(mass, nucleus_target(R.top_p, tot_mass) - 1);
      int lo[2] = {0, 0}, hi[2] = {upper, upper}, nr = 1;
      if (!(upper >= 0 && bins_count(0, upper) <= uint64_t(kList))) {
        if (cut) {
          lo[0] = bk;
        } else {
          const uint64_t d_lo = be0 >= 0 ? cum(massd, be0 - 1) : massd[kDistBins - 1];
          const uint64_t d_hi = be0 >= 0 ? cum(massd, be0) : d_lo;
          const int bd_lo = d_lo > 0 ? find(massd, draw_target(R.u, d_lo)) : 0;
          const int bd_hi = find(massd, draw_target(R.u, d_hi));
          if (bd_lo < 0 || bd_hi < 0) break;
          lo[0] = bd_lo, hi[0] = bd_hi;
          if (be0 > bd_hi) {
            lo[1] = hi[1] = be0, nr = 2;
            if (bins_count(bd_lo, bd_hi) + bins_count(be0, be0) > uint64_t(kList)) lo[0] = hi[0] = be0, nr = 1;
          } else if (be0 >= 0) {
            hi[0] = be0;
            if (bins_count(bd_lo, be0) > uint64_t(kList)) lo[0] = be0;
          }
        }
      }
      if (!request(nr, lo, hi)) break;
    }
    // The top-k set's weight z: the bins before bk and bk's entries down to its kk-th in the sorted order, k_entry
    // (entries compare as the order: larger is earlier). A count select: every entry weighs 1.
    uint64_t z = tot_mass, k_entry = 0;
    if (cut) {
      if (!ensure(bk)) break;
      const int s = seg_begin(bk), m = seg_end(bk) - s;
      k_entry = seg_select(s, m, 0, [](uint64_t) -> uint64_t { return 1; }, uint64_t(kk - 1));
      if (k_entry == 0) break;
      z = cum(mass, bk - 1) + seg_sum(s, m, k_entry, entry_wt);
    }
    // The nucleus' end: the first logit whose running weight reaches nucleus_target (entry end_entry of bin be).
    bool has_end = cut;
    int be = bk;
    uint64_t end_entry = k_entry;
    if (R.top_p < 1.0f) {
      const uint64_t t = nucleus_target(R.top_p, z) - 1;  // < z
      be = cut && t >= cum(mass, bk - 1) ? bk : find(mass, t);
      if (be < 0 || !ensure(be)) break;
      const uint64_t base = cum(mass, be - 1), limit = cut && be == bk ? k_entry : 0;  // entries past the cut weigh 0
      if (t < base) break;
      const int s = seg_begin(be);
      end_entry = seg_select(s, seg_end(be) - s, limit, entry_wt, t - base);
      if (end_entry == 0) break;
      has_end = true;
    }
    // The draw over the logits up to the end whose weight passes min-p.
    const auto draw_wt = [&](uint64_t entry) -> uint64_t {  // a list entry's draw weight
      const float w = W.real(value_of(uint32_t(entry >> 32)));
      return w >= min_p ? W.fixed(w) : 0;
    };
    uint64_t total = massd[kDistBins - 1];
    if (has_end) {
      const int s = seg_begin(be);
      total = cum(massd, be - 1) + seg_sum(s, seg_end(be) - s, end_entry, draw_wt);
    }
    const uint64_t target = draw_target(R.u, total);
    const int bd = has_end && target >= cum(massd, be - 1) ? be : find(massd, target);
    if (bd < 0 || !ensure(bd)) break;
    // The draw's bin: a select over its entries, those past the end (when it is the end's bin) weighing 0.
    const uint64_t base = cum(massd, bd - 1), limit = has_end && bd == be ? end_entry : 0;
    if (target < base) break;
    const int s = seg_begin(bd);
    const uint64_t e = seg_select(s, seg_end(bd) - s, limit, draw_wt, target - base);
    if (e != 0) token = int64_t(~uint32_t(e));
  } while (false);
  finish_peers();
  if (token == -2) token = whole_row_truncate(rv, R, W, n_valid, list, sh);
  if (tid == 0) tokens[row] = int32_t(token);
}

// Blocks per row: up to kMaxCluster on sm_90 (clusters), fewer as rows fill the multiprocessors; any count gives
// the same tokens. RAPID_CUDA_SAMPLE_CLUSTER=1|2|4|8 forces it (tests, measurements).
int sample_cluster(int64_t n) {
  if (!bulk_copy_supported()) return 1;
  static const long forced = env_long("RAPID_CUDA_SAMPLE_CLUSTER", 0);
  if (forced == 1 || forced == 2 || forced == 4 || forced == 8) return int(forced);
  int c = kMaxCluster;
  while (c > 1 && n * c > sm_count()) c >>= 1;
  return c;
}

}  // namespace

SampleRow sample_row_of(const SampleParams& p, int64_t logit_row, int32_t mask, std::vector<TokenPenalty>& penalties,
                        int32_t& scratch_rows) {
  SampleRow r;
  r.logit_row = logit_row;
  if (p.temperature > 0.0f) {
    r.inv_temperature = 1.0f / p.temperature;  // as the host sampler computes it
    r.u = uniform_draw(p.seed, p.counter);
  }
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  r.top_k = p.top_k;
  r.repetition = p.repetition_penalty;
  r.mask = mask;
  const std::vector<TokenPenalty> tp = token_penalties(p);
  r.pen_begin = int32_t(penalties.size());
  r.pen_count = int32_t(tp.size());
  if (!tp.empty()) r.scratch = scratch_rows++;
  penalties.insert(penalties.end(), tp.begin(), tp.end());
  return r;
}

void sample_rows(const float* logits, int64_t vocab, const SampleRow* rows, int64_t n, const uint32_t* masks,
                 const TokenPenalty* penalties, float* scratch, int32_t* tokens, cudaStream_t s) {
  if (n <= 0) return;
  if (vocab > kMaxVocab)
    throw std::runtime_error("sample_rows: vocabulary of " + std::to_string(vocab) + " exceeds the device sampler's " +
                             std::to_string(kMaxVocab));
  if (!allow_dynamic_smem(reinterpret_cast<const void*>(sample_kernel), kDynBytes, sizeof(Shared) + sizeof(Peer)))
    throw std::runtime_error("sample_rows: " + std::to_string(kDynBytes) + " bytes of shared memory exceed this GPU's limit");
  const int c = sample_cluster(n);
  launch_in(sample_kernel, dim3(unsigned(n * c)), dim3(kThreads), kDynBytes, s, c > 1 ? unsigned(c) : 0u,
            "sample_rows launch", logits, vocab, rows, masks, penalties, scratch, tokens, c);
}

}  // namespace rapid::cuda
