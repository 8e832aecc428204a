// Token sampling on the device, one block per row: the host sampler's pipeline (sampling/sampler.cpp) —
// bitmask → penalties → greedy | temperature → top-k → top-p → min-p → one draw with the row's uniform u —
// without copying the logits row to the host. Weights are fixed-point integers (w · 2^40), so every sum is
// exact whatever its order: a row's token is a pure function of its logits, parameters and u, never of the
// rows that share the launch. The sorted order (logit descending, id ascending) is never materialized: a
// weighted select over it is a radix search over the logits' order-preserving keys plus an id-order scan of
// the ties, each a few passes over the row (in L2 right after the head matmul).
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include "cuda/cuda_kernels.h"
#include "cuda/device_math.cuh"
#include "cuda/launch.cuh"

namespace rapid::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kGroup = 128;                 // ids a warp reads per step (4 per lane): the id-order scan's unit
constexpr int kHistCopies = 16;             // radix histograms, one per pair of warps: fewer same-address atomics
constexpr int kBuckets = 256;               // 8-bit digits, four passes per 32-bit key
constexpr int kSmemWords = kHistCopies * kBuckets;  // u64 scratch: the histograms, or one sum per group
constexpr int64_t kMaxVocab = int64_t(kSmemWords) * kGroup;
constexpr double kFix = 1099511627776.0;    // 2^40: a weight of 1 (the top token); sums stay below 2^60

// A logits row as the sampler sees it: a masked or non-finite logit is -inf (never a candidate).
struct RowView {
  const float* x;        // [vocab]
  const uint32_t* mask;  // [ceil(vocab/32)] bit set = allowed, or null
  int64_t vocab;
  bool aligned;          // x is 16-byte aligned: a lane's four logits are one float4

  __device__ float fix(float v, int64_t i) const {
    if (mask && !((mask[i >> 5] >> (i & 31)) & 1u)) return -INFINITY;
    if (!isfinite(v)) return -INFINITY;
    return v == 0.0f ? 0.0f : v;  // -0 == +0: one key, so equal logits tie by id as on the host
  }
  // Logits i0 .. i0+3 (i0 a multiple of 4); past the vocabulary -inf.
  __device__ void load4(int64_t i0, float v[4]) const {
    if (aligned && i0 + 3 < vocab) {
      const float4 q = __ldg(reinterpret_cast<const float4*>(x + i0));
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
  __device__ uint64_t fixed(float w) const { return uint64_t(double(w) * kFix); }
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
  int64_t sel_index;    // the selected group, bucket or id
  float best_v[kWarps];
  int32_t best_i[kWarps];
  int32_t count[kWarps];
};

// Sum over the block of one u64 per thread; every thread gets it.
__device__ uint64_t block_sum(uint64_t v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum_u64(v);
  __syncthreads();  // sh.warp_part may still be read by a previous step
  if (lane == 0) sh.warp_part[warp] = v;
  __syncthreads();
  return warp_sum_u64(sh.warp_part[lane]);
}

// Calls f(i0, v[4]) for every 4-logit slice of the row, warp-collectively (a warp's 32 lanes read one group of
// kGroup consecutive ids: group g = (i0 / kGroup) is read by warp g % kWarps).
template <class F>
__device__ void for_each_group(const RowView& r, F&& f) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t groups = (r.vocab + kGroup - 1) / kGroup;
  for (int64_t g = warp; g < groups; g += kWarps) {
    const int64_t i0 = g * kGroup + lane * 4;
    float v[4];
    r.load4(i0, v);
    f(g, i0, v);
  }
}

// The id of the first element, in id order, whose running sum of wt(i, v) passes target (sum before <= target
// < sum through it), and that sum before. Requires target < the row's total of wt. Two steps: every group's
// sum into sm (one pass), then the group, then the id within it.
template <class W>
__device__ int64_t id_select(const RowView& r, W&& wt, uint64_t target, uint64_t* sm, Shared& sh, uint64_t& before) {
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
  const uint64_t incl_w = warp_inclusive_u64(mine, lane);
  if (lane == 31) sh.warp_part[warp] = incl_w;
  __syncthreads();
  if (warp == 0) {
    const uint64_t t = warp_inclusive_u64(sh.warp_part[lane], lane);
    sh.warp_part[lane] = t - sh.warp_part[lane];  // exclusive prefix of the warps
  }
  __syncthreads();
  uint64_t acc = sh.warp_part[warp] + incl_w - mine;  // exclusive prefix of this thread's run
  if (acc <= target && target < acc + mine) {
    for (int64_t g = g0; g < g1; ++g) {
      if (target < acc + sm[g]) {
        sh.sel_index = g;
        sh.sel_before = acc;
        break;
      }
      acc += sm[g];
    }
  }
  __syncthreads();
  const int64_t g = sh.sel_index;
  const uint64_t gb = sh.sel_before;
  __syncthreads();
  if (g < 0) return -1;
  if (tid == 0) sh.sel_index = -1;
  __syncthreads();
  if (warp == 0) {  // the id within group g: lanes' four-id sums, scanned
    const int64_t i0 = g * kGroup + lane * 4;
    float v[4];
    r.load4(i0, v);
    uint64_t w[4], s = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) s += (w[j] = wt(i0 + j, v[j]));
    const uint64_t incl = warp_inclusive_u64(s, lane);
    uint64_t a = gb + incl - s;
    if (a <= target && target < a + s) {
      for (int j = 0; j < 4; ++j) {
        if (target < a + w[j]) {
          sh.sel_index = i0 + j;
          sh.sel_before = a;
          break;
        }
        a += w[j];
      }
    }
  }
  __syncthreads();
  before = sh.sel_before;
  return sh.sel_index;
}

struct Pick {
  uint32_t key;
  int64_t id;
  uint64_t before;  // weight of every element ahead of it in the sorted order
};

// The first element in the sorted order (key descending, id ascending) whose running sum of wt passes target,
// over valid elements. Requires target < the row's total of wt. Four radix passes fix its key (per pass a
// histogram of the weight per 8-bit digit among the elements that share the digits fixed so far), then an
// id-order select among the elements with that key.
template <class W>
__device__ Pick sorted_select(const RowView& r, W&& wt, uint64_t target, uint64_t* sm, Shared& sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  uint32_t prefix = 0, pmask = 0;
  uint64_t cum = 0;  // weight of the elements with a larger key than the current prefix range
  for (int shift = 24; shift >= 0; shift -= 8) {
    __syncthreads();  // sm may still be read by a previous step
    for (int i = tid; i < kSmemWords; i += kThreads) sm[i] = 0;
    __syncthreads();
    uint64_t* hist = sm + (warp >> 1) * kBuckets;
    for_each_group(r, [&](int64_t, int64_t i0, const float* v) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (!valid(v[j])) continue;
        const uint32_t k = key_of(v[j]);
        if ((k & pmask) != prefix) continue;
        const uint64_t w = wt(i0 + j, v[j]);
        if (w) atomicAdd(reinterpret_cast<unsigned long long*>(hist + ((k >> shift) & 255u)), (unsigned long long)w);
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
    if (warp == 0) {  // lane l holds buckets 255-8l down to 248-8l: descending key order across lanes
      uint64_t s = 0;
      for (int b = 0; b < 8; ++b) s += sm[255 - 8 * lane - b];
      const uint64_t incl = warp_inclusive_u64(s, lane);
      uint64_t a = cum + incl - s;
      if (a <= target && target < a + s) {
        for (int b = 0; b < 8; ++b) {
          const int bucket = 255 - 8 * lane - b;
          if (target < a + sm[bucket]) {
            sh.sel_index = bucket;
            sh.sel_before = a;
            break;
          }
          a += sm[bucket];
        }
      }
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
      r, [&](int64_t i, float v) -> uint64_t { return valid(v) && key_of(v) == key ? wt(i, v) : 0; }, target - cum, sm, sh,
      in_ties);
  return {key, id, cum + in_ties};
}

// Whether (v, i) is at or before pick p in the sorted order.
__device__ __forceinline__ bool at_or_before(float v, int64_t i, const Pick& p) {
  const uint32_t k = key_of(v);
  return k > p.key || (k == p.key && i <= p.id);
}

// A draw in [0, total): floor(u · total), kept below total against rounding.
__device__ __forceinline__ uint64_t draw_target(double u, uint64_t total) {
  const uint64_t t = uint64_t(u * double(total));
  return t < total ? t : total - 1;
}

// Grid (rows). logits [m, vocab]; rows [gridDim.x]; masks [*, ceil(vocab/32)]; penalties [*]; scratch
// [*, vocab] (rows with penalties); tokens [gridDim.x] (-1: no allowed finite logit).
__global__ void __launch_bounds__(kThreads) sample_kernel(const float* __restrict__ logits, int64_t vocab,
                                                          const SampleRow* __restrict__ rows,
                                                          const uint32_t* __restrict__ masks,
                                                          const TokenPenalty* __restrict__ penalties, float* scratch,
                                                          int32_t* __restrict__ tokens) {
  pdl_wait();
  pdl_trigger();
  __shared__ uint64_t sm[kSmemWords];
  __shared__ Shared sh;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const SampleRow R = rows[blockIdx.x];
  const int64_t words = (vocab + 31) / 32;
  const float* x = logits + R.logit_row * vocab;
  RowView rv{x, R.mask >= 0 ? masks + int64_t(R.mask) * words : nullptr, vocab,
             (reinterpret_cast<uintptr_t>(x) & 15) == 0};

  if (R.pen_count > 0) {  // the masked row into scratch, then the penalties (each listed token once), in place
    float* dst = scratch + int64_t(R.scratch) * vocab;  // [vocab]
    for (int64_t i = tid; i < vocab; i += kThreads) dst[i] = rv.fix(x[i], i);
    __syncthreads();
    for (int e = tid; e < R.pen_count; e += kThreads) {
      const TokenPenalty p = penalties[R.pen_begin + e];
      float l = dst[p.token];
      if (p.repetition) l = l > 0 ? __fdiv_rn(l, R.repetition) : __fmul_rn(l, R.repetition);
      dst[p.token] = __fsub_rn(l, p.subtract);
    }
    __syncthreads();
    rv = RowView{dst, nullptr, vocab, (reinterpret_cast<uintptr_t>(dst) & 15) == 0};
  }

  // The best (max logit, lowest id) and the number of valid logits.
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
  });
  warp_best(bv, bi);
  for (int o = 16; o > 0; o >>= 1) n_valid += __shfl_xor_sync(0xffffffffu, n_valid, o);
  if (lane == 0) sh.best_v[warp] = bv, sh.best_i[warp] = bi, sh.count[warp] = n_valid;
  __syncthreads();
  bv = sh.best_v[lane];
  bi = sh.best_i[lane];
  n_valid = sh.count[lane];
  warp_best(bv, bi);
  for (int o = 16; o > 0; o >>= 1) n_valid += __shfl_xor_sync(0xffffffffu, n_valid, o);
  if (bi < 0 || R.inv_temperature == 0.0f) {  // nothing allowed, or greedy (after the mask and penalties)
    if (tid == 0) tokens[blockIdx.x] = bi;
    return;
  }

  const Weights W{R.inv_temperature, __fmul_rn(bv, R.inv_temperature)};
  const float min_p = R.min_p;
  int64_t token;
  if (R.top_k == 0 && R.top_p >= 1.0f) {
    // No truncation by rank: the candidates in id order (the host's order here), min-p as a weight floor.
    auto wt = [&](int64_t, float v) -> uint64_t {
      if (!valid(v)) return 0;
      const float w = W.real(v);
      return w > 0.0f && w >= min_p ? W.fixed(w) : 0;
    };
    uint64_t s = 0;
    for_each_group(rv, [&](int64_t, int64_t i0, const float* v) {
#pragma unroll
      for (int j = 0; j < 4; ++j) s += wt(i0 + j, v[j]);
    });
    const uint64_t total = block_sum(s, sh);
    uint64_t before;
    token = id_select(rv, wt, draw_target(R.u, total), sm, sh, before);
  } else {
    auto w_all = [&](int64_t, float v) -> uint64_t { return valid(v) ? W.fixed(W.real(v)) : 0; };
    // Top-k: the k-th element of the sorted order (a count select), and the weight through it.
    const bool cut_k = R.top_k > 0 && R.top_k < n_valid;
    Pick end{0, -1, 0};
    uint64_t z = 0;
    if (cut_k) {
      end = sorted_select(rv, [](int64_t, float) -> uint64_t { return 1; }, uint64_t(R.top_k - 1), sm, sh);
      if (end.id < 0) {
        if (tid == 0) tokens[blockIdx.x] = -1;
        return;
      }
    }
    uint64_t s = 0;
    for_each_group(rv, [&](int64_t, int64_t i0, const float* v) {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (valid(v[j]) && (!cut_k || at_or_before(v[j], i0 + j, end))) s += w_all(i0 + j, v[j]);
    });
    z = block_sum(s, sh);
    bool has_end = cut_k;
    if (R.top_p < 1.0f) {
      // The nucleus ends at the first element whose running weight reaches top_p of z (the host stops before
      // the first element whose preceding mass is >= top_p). It lies within the top-k prefix: target < z.
      double t = ceil(double(R.top_p) * double(z));
      uint64_t target = t < 1.0 ? 1 : (t >= double(z) ? z : uint64_t(t));
      end = sorted_select(rv, w_all, target - 1, sm, sh);
      if (end.id < 0) {
        if (tid == 0) tokens[blockIdx.x] = -1;
        return;
      }
      has_end = true;
      const float ev = end.key & 0x80000000u ? __uint_as_float(end.key & 0x7fffffffu) : __uint_as_float(~end.key);
      z = end.before + w_all(end.id, ev);
    }
    uint64_t total = z;
    auto w_cand = [&](int64_t, float v) -> uint64_t {
      if (!valid(v)) return 0;
      const float w = W.real(v);
      return w >= min_p ? W.fixed(w) : 0;
    };
    if (min_p > 0.0f) {  // min-p keeps a prefix of the candidates (weights fall along the order)
      s = 0;
      for_each_group(rv, [&](int64_t, int64_t i0, const float* v) {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (valid(v[j]) && (!has_end || at_or_before(v[j], i0 + j, end))) s += w_cand(i0 + j, v[j]);
      });
      total = block_sum(s, sh);
    }
    // The draw: target < total, so the pick lies within the candidates whatever follows them.
    const Pick p = min_p > 0.0f ? sorted_select(rv, w_cand, draw_target(R.u, total), sm, sh)
                                : sorted_select(rv, w_all, draw_target(R.u, total), sm, sh);
    token = p.id;
  }
  if (tid == 0) tokens[blockIdx.x] = int32_t(token);
}

}  // namespace

void sample_rows(const float* logits, int64_t vocab, const SampleRow* rows, int64_t n, const uint32_t* masks,
                 const TokenPenalty* penalties, float* scratch, int32_t* tokens, cudaStream_t s) {
  if (n <= 0) return;
  if (vocab > kMaxVocab)
    throw std::runtime_error("sample_rows: vocabulary of " + std::to_string(vocab) + " exceeds the device sampler's " +
                             std::to_string(kMaxVocab));
  launch(sample_kernel, dim3(unsigned(n)), dim3(kThreads), 0, s, "sample_rows launch", logits, vocab, rows, masks,
         penalties, scratch, tokens);
}

}  // namespace rapid::cuda
