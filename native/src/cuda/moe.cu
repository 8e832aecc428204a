// The MoE block's kernels and their host launchers (cuda/moe.h).
#include <cuda_runtime.h>
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include "cuda/device_math.cuh"
#include "cuda/launch.cuh"
#include "cuda/mma.cuh"
#include "cuda/moe.h"
#include "cuda/tiled_codes.h"
#include "quant/mlx_quant.h"
#include "tensor/dtype.h"

namespace rapid::cuda {
namespace {

constexpr int kThreads = 256;             // every MoE kernel: 8 warps
constexpr int kWarps = kThreads / 32;
// The sorted path's tiles: up to kTileSlots slots of one expert, kTileRows output rows per warp, so each dequantized
// weight serves every slot of the tile and each x chunk kTileRows rows from registers (the f32 FMA, not L1, limits).
constexpr int kTileSlots = 8;
constexpr int kTileRows = 2;
constexpr int kMaxExperts = 1024;         // the sort's scan: 32 experts per lane at most
constexpr int kMaxTopK = 32;
// Steps of at most this many tokens skip the sort: a block per (row tile, slot) reading the slot's expert id, and the
// down projection fused with the weighted sum (two launches less; the same arithmetic per slot, bit for bit). 8: at 8
// tokens of different sequences (64 slots over ~51 experts) the tiles hold ~1 slot and cost more (H100: 326 -> 252 µs).
constexpr int64_t kSlotMajorTokens = 8;
// The fast tiles (MathMode::Fast, 4-bit experts): a warp multiplies 16 weight rows (the mma's M) by a tile's 8 slots
// (its N), 4 warps a block; a warp loads the codes and scales of kMmaAhead groups before it multiplies them, so
// enough bytes are in flight to stream the experts near the memory's bandwidth.
constexpr int kMmaWarps = 4;
constexpr int kMmaThreads = kMmaWarps * 32;
constexpr int kMmaRows = 16;
constexpr int64_t kMmaBlockRows = int64_t(kMmaWarps) * kMmaRows;
constexpr int kMmaAhead = 4;
static_assert(kTileSlots == 8, "a fast tile is one m16n8k16 B operand: 8 slots");

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

// A weight row reader: fmt 0/1/2 dense F32/F16/BF16, 4 or 8 MLX affine bits (scales/biases of dtype sdt). The
// strides are precomputed: a 64-bit division per load (in / group) cost more than the load itself.
struct WView {
  const void* data = nullptr;
  const void* scales = nullptr;
  const void* biases = nullptr;
  int64_t in = 0;
  int64_t row_elems = 0;   // a row's stride in data's units: elements (dense) or 32-bit code words (affine)
  int64_t row_groups = 0;  // affine: in / group
  int fmt = 0, sdt = 0, group_shift = 0;  // group = 1 << group_shift (32, 64 or 128)
};

WView view_of(const DevWeight& w) {
  WView v;
  v.data = w.data;
  v.scales = w.scales;
  v.biases = w.biases;
  v.in = w.in;
  v.fmt = w.kind == WeightKind::Dense ? int(w.dtype) : w.bits;
  v.sdt = int(w.dtype);
  v.row_elems = w.kind == WeightKind::Dense ? w.in : w.in * w.bits / 32;
  if (w.kind != WeightKind::Dense) {
    while ((1 << v.group_shift) < w.group) ++v.group_shift;
    v.row_groups = w.in >> v.group_shift;
  }
  return v;
}

// A code n < 2^23 as f32, exactly: 2^23 + n has n in its mantissa, so one OR and one subtraction replace the
// int-to-float conversion (a quarter-rate instruction that bounded the expert kernels).
__device__ __forceinline__ float code_value(uint32_t n) { return __fsub_rn(__uint_as_float(0x4B000000u | n), 8388608.0f); }

// v[0..8) = W[row, c .. c+8) as f32 (c a multiple of 8; a group never splits 8 columns: group >= 32).
__device__ __forceinline__ void load8(const WView& w, int64_t row, int64_t c, float (&v)[8]) {
  if (w.fmt == 4 || w.fmt == 8) {
    const int64_t g = row * w.row_groups + (c >> w.group_shift);
    const float sc = load_elem(w.scales, g, w.sdt), bi = load_elem(w.biases, g, w.sdt);
    const uint32_t* codes = static_cast<const uint32_t*>(w.data) + row * w.row_elems;
    if (w.fmt == 4) {
      const uint32_t q = codes[c >> 3];
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = fmaf(code_value((q >> (4 * i)) & 15u), sc, bi);
    } else {
      const uint2 q = *reinterpret_cast<const uint2*>(codes + (c >> 2));
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[i] = fmaf(code_value((q.x >> (8 * i)) & 255u), sc, bi);
        v[4 + i] = fmaf(code_value((q.y >> (8 * i)) & 255u), sc, bi);
      }
    }
    return;
  }
  if (w.fmt == 0) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(w.data) + row * w.row_elems + c);
    const float4 a = p[0], b = p[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    return;
  }
  const uint4 q = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w.data) + row * w.row_elems + c);
  const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (w.fmt == 2) {
      v[2 * i] = bf16_bits_to_float(uint16_t(u[i] & 0xffffu));
      v[2 * i + 1] = bf16_bits_to_float(uint16_t(u[i] >> 16));
    } else {
      v[2 * i] = f16_bits_to_float(uint16_t(u[i] & 0xffffu));
      v[2 * i + 1] = f16_bits_to_float(uint16_t(u[i] >> 16));
    }
  }
}

// acc += Σ_i v[i]·x[i] in i order.
__device__ __forceinline__ float dot8(const float (&v)[8], const float (&x)[8], float acc) {
#pragma unroll
  for (int i = 0; i < 8; ++i) acc = fmaf(v[i], x[i], acc);
  return acc;
}
__device__ __forceinline__ void load_x8(const float* x, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(x), b = *reinterpret_cast<const float4*>(x + 4);
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
__device__ __forceinline__ float dot8(const float (&v)[8], const float* x, float acc) {
  float xv[8];
  load_x8(x, xv);
  return dot8(v, xv, acc);
}

// Gemma 4's router input, block t: y[t] = x[t] · inv · scale · mult elementwise in that order (moe_route's),
// inv = 1 / sqrt(Σx²/H + eps) with the sum over a fixed tree (per-thread strided sums, warps, then 8 warp sums in
// order): a row's bits do not depend on the other rows. scale null: 1.
__global__ void router_input_kernel(const float* __restrict__ x, int64_t H, const float* __restrict__ scale, float eps,
                                    float mult, float* __restrict__ y) {
  __shared__ float part[kWarps];
  pdl_wait();
  pdl_trigger();
  const float* xr = x + int64_t(blockIdx.x) * H;  // [H]
  float* yr = y + int64_t(blockIdx.x) * H;        // [H]
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < H; i += kThreads) ss = __fadd_rn(ss, __fmul_rn(xr[i], xr[i]));
  ss = warp_sum(ss);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
  __syncthreads();
  float tot = 0.0f;
  for (int w = 0; w < kWarps; ++w) tot = __fadd_rn(tot, part[w]);
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(tot, float(H)), eps)));
  for (int64_t i = threadIdx.x; i < H; i += kThreads)
    yr[i] = __fmul_rn(__fmul_rn(__fmul_rn(xr[i], inv), scale ? scale[i] : 1.0f), mult);
}

// logits[t, e] = x[t]·R[e]: block (x, t) computes experts [x·8, x·8 + 8), a warp each (spread over the GPU: one
// token's 128 router rows would keep a single block busy for the whole layer's budget).
__global__ void router_logits_kernel(WView r, const float* __restrict__ x, int64_t E, float* __restrict__ logits) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.y, e = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (e >= E) return;
  const float* xr = x + t * r.in;  // [hidden]
  float acc = 0.0f;
#pragma unroll 4
  for (int64_t c = int64_t(lane) * 8; c < r.in; c += 256) {
    float v[8];
    load8(r, e, c, v);
    acc = dot8(v, xr + c, acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) logits[t * E + e] = acc;
}

// One warp routes token t: softmax of its logits row, then top-k by repeated best (larger probability, then lower id:
// moe_route's order) and the weights, renormalized over the k in j order, then times expert_scale[idx] (Gemma 4's
// per-expert scale; null: none). Lane l holds experts l, l + 32, ... (E <= 32·kPerLane) in registers as keys (a taken
// one zeroed), so the k rounds read no memory.
template <int kPerLane>
__device__ void route_token(const float* __restrict__ logits, int64_t E, int k, bool renormalize,
                            const float* __restrict__ expert_scale, int32_t* __restrict__ idx, float* __restrict__ w) {
  const int lane = threadIdx.x % 32;
  float p[kPerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t e = lane + 32 * i;
    p[i] = e < E ? logits[e] : -INFINITY;
    mx = fmaxf(mx, p[i]);
  }
  mx = warp_max(mx);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (lane + 32 * i < E) sum += (p[i] = expf(p[i] - mx));
  sum = warp_sum(sum);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) p[i] /= sum;
  // A round's pick is the largest probability, then the lowest id (better_pair's order), found by two warp
  // reductions: the largest key (a probability's bits + 1, ordered as the floats since p >= 0; 0: taken or past E),
  // then the lowest id holding it.
  uint32_t key[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) key[i] = lane + 32 * i < E ? __float_as_uint(p[i]) + 1u : 0u;
  float top_sum = 0.0f, my_p = 0.0f;
  int32_t my_e = 0;
#pragma unroll
  for (int j = 0; j < kMaxTopK; ++j) {
    if (j >= k) break;
    uint32_t mine = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) mine = max(mine, key[i]);
    const uint32_t best = __reduce_max_sync(0xffffffffu, mine);
    int32_t cand = INT32_MAX;
#pragma unroll
    for (int i = kPerLane - 1; i >= 0; --i) cand = key[i] == best ? lane + 32 * i : cand;
    const int32_t bi = best == 0 ? -1 : __reduce_min_sync(0xffffffffu, cand);
    const float bv = best == 0 ? 0.0f : __uint_as_float(best - 1u);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) key[i] = bi == lane + 32 * i ? 0u : key[i];
    top_sum += bv;
    if (lane == j) {  // lane j keeps pick j (k <= 32)
      my_p = bv;
      my_e = bi;
    }
  }
  if (lane >= k) return;
  const float v = renormalize ? my_p / top_sum : my_p;
  idx[lane] = my_e;
  w[lane] = expert_scale ? __fmul_rn(v, expert_scale[my_e]) : v;
}

// select_sort_kernel's block: 32 warps when a lane's experts fit few registers.
template <int kPerLane>
constexpr int select_threads() {
  return kPerLane <= 8 ? 1024 : 256;
}

// One block of select_threads() threads: each warp routes tokens (route_token over logits [T, E]: idx/w [T, k]),
// then the S = T·k slots are sorted by expert (when order is not null) and cut into tiles of at most kTileSlots slots
// of one expert: tiles[0] = n; tiles[1 + 3g ..] = (expert, first position in order, count) of the g-th tile, in
// expert order; order[pos] = slot id. The order of slots inside an expert is not fixed (atomics): no slot's
// arithmetic depends on it.
template <int kPerLane>
__global__ void __launch_bounds__(select_threads<kPerLane>())
    select_sort_kernel(const float* __restrict__ logits, int64_t T, int E, int k, bool renormalize,
                       const float* __restrict__ expert_scale, int32_t* __restrict__ idx, float* __restrict__ w,
                       int32_t* __restrict__ order, int32_t* __restrict__ tiles) {
  __shared__ int cnt[kMaxExperts], start[kMaxExperts];
  TL_MARKS
  TL_MARK(0);
  pdl_wait();
  pdl_trigger();
  TL_MARK(1);
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  for (int64_t t = warp; t < T; t += warps)
    route_token<kPerLane>(logits + t * E, E, k, renormalize, expert_scale, idx + t * k, w + t * k);
  __syncthreads();  // idx (global, written by this block) is visible to the whole block after the barrier
  TL_MARK(2);
  if (!order) return;
  const int64_t S = T * k;
  for (int64_t i = threadIdx.x; i < S; i += blockDim.x) atomicAdd(&cnt[idx[i]], 1);
  __syncthreads();
  if (threadIdx.x < 32) {
    // Lane l scans experts [l·per, (l+1)·per): slot and tile counts, then a warp-wide exclusive scan.
    const int lane = threadIdx.x, per = (E + 31) / 32, e0 = lane * per, e1 = min(E, e0 + per);
    int n_rows = 0, n_tiles = 0;
    for (int e = e0; e < e1; ++e) {
      n_rows += cnt[e];
      n_tiles += (cnt[e] + kTileSlots - 1) / kTileSlots;
    }
    int rows_before = n_rows, tiles_before = n_tiles;
    for (int o = 1; o < 32; o <<= 1) {
      const int a = __shfl_up_sync(0xffffffffu, rows_before, o), b = __shfl_up_sync(0xffffffffu, tiles_before, o);
      if (lane >= o) {
        rows_before += a;
        tiles_before += b;
      }
    }
    rows_before -= n_rows;
    tiles_before -= n_tiles;
    for (int e = e0; e < e1; ++e) {
      start[e] = rows_before;
      for (int f = 0; f < cnt[e]; f += kTileSlots, ++tiles_before) {
        tiles[1 + 3 * tiles_before] = e;
        tiles[2 + 3 * tiles_before] = rows_before + f;
        tiles[3 + 3 * tiles_before] = min(kTileSlots, cnt[e] - f);
      }
      rows_before += cnt[e];
    }
    if (lane == 31) tiles[0] = tiles_before;
  }
  __syncthreads();
  TL_MARK(3);
  for (int64_t i = threadIdx.x; i < S; i += blockDim.x) {
    const int e = idx[i];
    order[start[e] + atomicSub(&cnt[e], 1) - 1] = int32_t(i);  // cnt[e] counts down: start .. start + count - 1
  }
  TL_MARK(4);
  TL_FLUSH(4, 0);
}

// Every expert product below, out[slot, row] = x_slot · W[row], is one f32 chain per lane (lane l: columns
// l·8 + 256·i .. + 8, i ascending, each weight dequantized as load8 does) summed by warp_sum's tree, whichever kernel
// computes it and whatever shares its expert: a slot's bits depend neither on the batch nor on the step's path.

// Steps of few tokens, gate/up: block (x, slot), a warp per output row r of [x·8, x·8 + 8):
// inter[slot, r] = act(x_t·G_e[r]) · (x_t·U_e[r]), e = idx[slot], t = slot / top_k.
__global__ void __launch_bounds__(kThreads)
    slot_gate_up_kernel(WView g, WView u, const float* __restrict__ x, int top_k, const int32_t* __restrict__ idx,
                        int64_t out_rows, int act, float* __restrict__ inter) {
  pdl_wait();
  pdl_trigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  if (row >= out_rows) return;
  const int64_t slot = blockIdx.y, wrow = int64_t(idx[slot]) * out_rows + row;  // row of the stacked [E·out, in]
  const float* xr = x + (slot / top_k) * g.in;                                   // [in]
  float ga = 0.0f, ua = 0.0f;
#pragma unroll 4
  for (int64_t c = int64_t(lane) * 8; c < g.in; c += 256) {
    float wg[8], wu[8], xv[8];
    load8(g, wrow, c, wg);
    load8(u, wrow, c, wu);
    load_x8(xr + c, xv);
    ga = dot8(wg, xv, ga);
    ua = dot8(wu, xv, ua);
  }
  ga = warp_sum(ga);
  ua = warp_sum(ua);
  if (lane == 0) inter[slot * out_rows + row] = __fmul_rn(glu_act(ga, act), ua);
}

// The sorted path: block (x, y) takes tile y (select_sort_kernel's: up to kTileSlots slots of one expert e) on output
// rows [x·R·8, (x+1)·R·8), R = kTileRows per warp. GLU: out[slot, r] = act(x_t·A_e[r]) · (x_t·B_e[r]) with
// t = slot / top_k; else out[slot, r] = x_slot·A_e[r] (x holds a row per slot).
template <bool kGlu>
__global__ void __launch_bounds__(kThreads, 2)
    expert_tile_kernel(WView a, WView b, const float* __restrict__ x, int top_k, const int32_t* __restrict__ order,
                       const int32_t* __restrict__ tiles, int64_t out_rows, int act, float* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  if (int(blockIdx.y) >= tiles[0]) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = (int64_t(blockIdx.x) * kWarps + warp) * kTileRows;
  if (row0 >= out_rows) return;
  const int e = tiles[1 + 3 * blockIdx.y], first = tiles[2 + 3 * blockIdx.y], n = tiles[3 + 3 * blockIdx.y];
  const int64_t in = a.in;
  int32_t slot[kTileSlots];  // past n: the last slot again (never used)
  int64_t xoff[kTileSlots];  // the slot's row of x
#pragma unroll
  for (int i = 0; i < kTileSlots; ++i) {
    slot[i] = order[first + min(i, n - 1)];
    xoff[i] = int64_t(kGlu ? slot[i] / top_k : slot[i]) * in;
  }
  float ga[kTileRows][kTileSlots] = {}, ua[kTileRows][kTileSlots] = {};
  for (int64_t c = int64_t(lane) * 8; c < in; c += 256) {
    float wa[kTileRows][8], wb[kTileRows][8];  // the chunk's weights, dequantized once for every slot
#pragma unroll
    for (int r = 0; r < kTileRows; ++r) {
      const int64_t wrow = int64_t(e) * out_rows + min(row0 + r, out_rows - 1);
      load8(a, wrow, c, wa[r]);
      if constexpr (kGlu) load8(b, wrow, c, wb[r]);
    }
#pragma unroll
    for (int i = 0; i < kTileSlots; ++i) {
      if (i >= n) break;
      float xv[8];
      load_x8(x + xoff[i] + c, xv);
#pragma unroll
      for (int r = 0; r < kTileRows; ++r) {
        ga[r][i] = dot8(wa[r], xv, ga[r][i]);
        if constexpr (kGlu) ua[r][i] = dot8(wb[r], xv, ua[r][i]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kTileRows; ++r) {
    if (row0 + r >= out_rows) break;
#pragma unroll
    for (int i = 0; i < kTileSlots; ++i) {
      if (i >= n) break;
      const float v = warp_sum(ga[r][i]);
      if constexpr (kGlu) {
        const float w = warp_sum(ua[r][i]);
        if (lane == 0) out[int64_t(slot[i]) * out_rows + row0 + r] = __fmul_rn(glu_act(v, act), w);
      } else {
        if (lane == 0) out[int64_t(slot[i]) * out_rows + row0 + r] = v;
      }
    }
  }
}

// The fast tiles' arithmetic. A 4-bit group's codes enter the tensor cores exactly as bf16 and the tile's slots of
// x rounded to bf16: Σ x·q over the group from zero (m16n8k16, f32 sums), then y = s·Σx·q + b·Σx in group order,
// Σx the group's rounded x in a fixed tree. So each (slot, row) value is one fixed chain whatever shares its tile,
// and every step size takes these kernels (no slot-major path): a row's bits do not depend on the batch.

// Two codes of a 4-bit word as the bf16 pair (n_lo, n_hi), exact: code_pair_128's 128 + n, less 128 (pair (n0, n4) at
// shift 0).
__device__ __forceinline__ uint32_t code_pair(uint32_t q, int shift) {
  const uint32_t v = code_pair_128(q, shift);
  const __nv_bfloat162 h = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&v), __float2bfloat162_rn(128.0f));
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Four scale-dtype elements at p[i .. i + 4) (i a multiple of 4) as f32: tile_scales' s(a), b(a), s(b), b(b).
__device__ __forceinline__ void load_quad(const void* __restrict__ p, int64_t i, int sdt, float (&v)[4]) {
  if (sdt == 0) {
    const float4 f = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(p) + i));
    v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
    return;
  }
  const uint2 u = __ldg(reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(p) + i));
  const uint16_t h[4] = {uint16_t(u.x & 0xffffu), uint16_t(u.x >> 16), uint16_t(u.y & 0xffffu), uint16_t(u.y >> 16)};
#pragma unroll
  for (int k = 0; k < 4; ++k) v[k] = sdt == 1 ? f16_bits_to_float(h[k]) : bf16_bits_to_float(h[k]);
}

// The tile's n slots of x in shared memory for the B operands: xs[i·stride + w] = x_i[8w .. 8w + 8) rounded to bf16
// in the fragments' order (0,4 | 1,5 | 2,6 | 3,7: code_pair's pairs); xsum[i·groups + g] = the sum of group g's rounded
// values (8 in order per word, then a shuffle tree over the group's gw = group / 8 words, which never straddle a
// warp or a slot). Slots n .. 7 are left as they are: their B columns only reach outputs that are never written.
__device__ void stage_slots(const float* __restrict__ x, const int64_t (&xoff)[kTileSlots], int n, int64_t in, int gw,
                            uint4* xs, int64_t stride, float* xsum) {
  constexpr int kU = 4;  // chunks a thread loads before it converts them (loads in flight)
  const int64_t words = in / 8, groups = words / gw, total = int64_t(n) * words;
  const int lane = threadIdx.x % 32;
  for (int64_t f0 = 0; f0 < total; f0 += int64_t(kU) * kMmaThreads) {  // uniform: every lane reaches the shuffles
    float v[kU][8];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t f = f0 + u * kMmaThreads + threadIdx.x;
#pragma unroll
      for (int j = 0; j < 8; ++j) v[u][j] = 0.0f;
      if (f >= total) continue;
      const int i = int(f / words);
      int64_t off = xoff[0];
#pragma unroll
      for (int k = 1; k < kTileSlots; ++k) off = i == k ? xoff[k] : off;  // registers, not a local array
      load_x8(x + off + 8 * (f - i * words), v[u]);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t f = f0 + u * kMmaThreads + threadIdx.x;
      float r[8], sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) sum = __fadd_rn(sum, r[j] = __bfloat162float(__float2bfloat16_rn(v[u][j])));
      for (int o = 1; o < gw; o <<= 1) {
        const float t = __shfl_down_sync(0xffffffffu, sum, o);
        if (lane % (2 * o) == 0) sum = __fadd_rn(sum, t);
      }
      if (f >= total) continue;
      const int64_t i = f / words, w = f - i * words;
      xs[i * stride + w] = make_uint4(pack_bf16(r[0], r[4]), pack_bf16(r[1], r[5]), pack_bf16(r[2], r[6]),
                                      pack_bf16(r[3], r[7]));
      if (lane % gw == 0) xsum[i * groups + w / gw] = sum;
    }
  }
}

// A fast tile's value is the sum of its groups' terms in group order; the terms of a 16-row tile come from one warp,
// or, split, from kSplitWarps warps (group g from warp g % 4) through shared memory, with the same bits; split, a
// round of kMmaAhead·kSplitWarps groups' terms is summed at once.
constexpr int kSplitWarps = 4;
constexpr int kSplitRound = kMmaAhead * kSplitWarps;

// Shared memory of expert_mma_kernel for inputs of width `in`: the slots' bf16 rows (padded by 16 bytes, against
// bank conflicts between slots), their group sums, and (split) a round's terms, [kSplitRound][8][32 lanes].
size_t mma_smem_bytes(int64_t in, int group, bool split) {
  const size_t groups = size_t(in / group);
  return size_t(kTileSlots) * size_t(in / 8 + 1) * sizeof(uint4) + size_t(kTileSlots) * groups * sizeof(float) +
         (split ? size_t(kSplitRound) * 32 * 8 * sizeof(float) : 0);
}

// The fast sorted path over tiled experts (tile_codes / tile_scales of the stacked [E·out, in], out % 16 == 0): block
// (x, y) takes tile y (up to 8 slots of expert e). kSplit 1: weight rows [x·64, x·64 + 64), a 16-row code tile a
// warp; kSplit 4 (steps of few slots, where the GPU would otherwise idle): rows [x·16, x·16 + 16), warp w making the
// terms of groups w, w + 4, ..., warp 0 summing them. Group g's term is s·Σx·q + b·Σx (one product, one fma), the
// value the sum of the terms in group order either way. Fragments: rows lane / 4 and lane / 4 + 8, slots
// 2 (lane % 4) and 2 (lane % 4) + 1. Per group a lane reads its 2·kWords code words (row a's quarter, then row b's:
// one contiguous 512-byte warp load at g64) and its four scale and bias elements. GLU: out[slot, r] =
// act(x_t·A_e[r]) · (x_t·B_e[r]), t = slot / top_k; else x_slot·A_e[r].
template <bool kGlu, int kWords, int kSplit>
__global__ void __launch_bounds__(kMmaThreads)
    expert_mma_kernel(WView a, WView b, const float* __restrict__ x, int top_k, const int32_t* __restrict__ order,
                      const int32_t* __restrict__ tiles, int64_t out_rows, int act, float* __restrict__ out) {
  static_assert(kSplit == 1 || kSplit == kSplitWarps, "a warp makes every group's terms, or every fourth");
  constexpr int kAhead = kMmaAhead;
  constexpr int kStep = kSplit;             // from one of a warp's groups to its next
  constexpr int kRound = kAhead * kSplit;  // the groups of a round
  constexpr int kLane = 2 * kWords;  // code words per lane per group
  extern __shared__ uint4 smem[];
  TL_MARKS
  TL_MARK(0);
  pdl_wait();
  pdl_trigger();
  TL_MARK(1);
  if (int(blockIdx.y) >= tiles[0]) return;
  const int e = tiles[1 + 3 * blockIdx.y], first = tiles[2 + 3 * blockIdx.y], n = tiles[3 + 3 * blockIdx.y];
  const int64_t in = a.in, words = in / 8, groups = a.row_groups, stride = words + 1;
  uint4* xs = smem;                                                             // [kTileSlots][stride]
  float* xsum = reinterpret_cast<float*>(smem + int64_t(kTileSlots) * stride);  // [kTileSlots][groups]
  float* terms = xsum + int64_t(kTileSlots) * groups;                           // split: [kRound][8][32 lanes]
  int64_t xoff[kTileSlots];
#pragma unroll
  for (int i = 0; i < kTileSlots; ++i) {
    const int32_t slot = order[first + min(i, n - 1)];
    xoff[i] = int64_t(kGlu ? slot / top_k : slot) * in;
  }
  stage_slots(x, xoff, n, in, 4 * kWords, xs, stride, xsum);  // a group is 4·kWords words
  __syncthreads();
  TL_MARK(2);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
  const int64_t row0 = kSplit == 1 ? int64_t(blockIdx.x) * kMmaBlockRows + int64_t(warp) * kMmaRows
                                    : int64_t(blockIdx.x) * kMmaRows;
  if (row0 >= out_rows) return;  // kSplit: the whole block (one row0)
  const int64_t tile = (int64_t(e) * out_rows + row0) / 16;  // the warp's code tile
  const uint32_t* const pa = static_cast<const uint32_t*>(a.data) + (tile * groups * 32 + lane) * kLane;
  const uint32_t* const pb = static_cast<const uint32_t*>(b.data) + (tile * groups * 32 + lane) * kLane;
  const int64_t sq = tile * groups * 32 + 4 * gq;           // this lane's scale quad of group 0
  const uint4* const xrow = xs + int64_t(gq) * stride + tq * kWords;  // this lane's B operand: slot gq
  // c0..c3: (row gq, slot 2tq), (row gq, 2tq + 1), (row gq + 8, 2tq), (gq + 8, 2tq + 1). Round r0 takes groups
  // [r0, r0 + kRound), this warp g0 + kStep·j of them (kSplit: g0 = r0 + warp).
  float ya[4] = {}, yb[4] = {};
  for (int64_t r0 = 0; r0 < groups; r0 += kRound) {
    const int64_t g0 = r0 + (kSplit == 1 ? 0 : warp);
    uint32_t qa[kAhead][kLane], qb[kAhead][kLane];
    float sa[kAhead][4], sb[kAhead][4];  // s(a), b(a), s(b), b(b)
#pragma unroll
    for (int j = 0; j < kAhead; ++j) {
      const int64_t g = min(g0 + kStep * j, groups - 1);  // past the end: the last group again (never used)
      load_words<kLane>(pa + g * 32 * kLane, qa[j]);
      load_quad(a.scales, sq + g * 32, a.sdt, sa[j]);
      if constexpr (kGlu) {
        load_words<kLane>(pb + g * 32 * kLane, qb[j]);
        load_quad(b.scales, sq + g * 32, b.sdt, sb[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < kAhead; ++j) {
      const int64_t g = g0 + kStep * j;
      if (g >= groups) break;
      float da[4] = {}, db[4] = {};
#pragma unroll
      for (int i = 0; i < kWords; ++i) {
        const uint4 xv = xrow[g * 4 * kWords + i];
        const uint32_t wa = qa[j][i], wb = qa[j][kWords + i];  // rows a and b
        const uint32_t a0[4] = {code_pair(wa, 0), code_pair(wb, 0), code_pair(wa, 4), code_pair(wb, 4)};
        const uint32_t a1[4] = {code_pair(wa, 8), code_pair(wb, 8), code_pair(wa, 12), code_pair(wb, 12)};
        mma_bf16(da, a0, xv.x, xv.y);
        mma_bf16(da, a1, xv.z, xv.w);
        if constexpr (kGlu) {
          const uint32_t ua = qb[j][i], ub = qb[j][kWords + i];
          const uint32_t b0[4] = {code_pair(ua, 0), code_pair(ub, 0), code_pair(ua, 4), code_pair(ub, 4)};
          const uint32_t b1[4] = {code_pair(ua, 8), code_pair(ub, 8), code_pair(ua, 12), code_pair(ub, 12)};
          mma_bf16(db, b0, xv.x, xv.y);
          mma_bf16(db, b1, xv.z, xv.w);
        }
      }
      const float x0 = xsum[int64_t(2 * tq) * groups + g], x1 = xsum[int64_t(2 * tq + 1) * groups + g];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int h = 2 * (c >> 1);  // row a: s, b at 0, 1; row b: at 2, 3
        const float xg = (c & 1) ? x1 : x0;
        const float ta = fmaf(sa[j][h + 1], xg, __fmul_rn(sa[j][h], da[c]));
        const float tb = kGlu ? fmaf(sb[j][h + 1], xg, __fmul_rn(sb[j][h], db[c])) : 0.0f;
        if constexpr (kSplit == 1) {
          ya[c] = __fadd_rn(ya[c], ta);
          yb[c] = __fadd_rn(yb[c], tb);
        } else {
          terms[((g - r0) * 8 + c) * 32 + lane] = ta;  // lanes consecutive: no bank conflicts
          terms[((g - r0) * 8 + 4 + c) * 32 + lane] = tb;
        }
      }
    }
    if constexpr (kSplit != 1) {  // warp 0 adds the round's terms in group order
      __syncthreads();
      if (warp == 0)
        for (int64_t g = r0; g < min(r0 + kRound, groups); ++g)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            ya[c] = __fadd_rn(ya[c], terms[((g - r0) * 8 + c) * 32 + lane]);
            yb[c] = __fadd_rn(yb[c], terms[((g - r0) * 8 + 4 + c) * 32 + lane]);
          }
      __syncthreads();  // before the next round's terms
    }
  }
  TL_MARK(3);
  if (kSplit != 1 && warp != 0) return;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const int i = 2 * tq + (c & 1);
    const int64_t r = row0 + gq + (c >> 1) * 8;
    if (i >= n || r >= out_rows) continue;
    out[int64_t(order[first + i]) * out_rows + r] = kGlu ? __fmul_rn(glu_act(ya[c], act), yb[c]) : ya[c];
  }
  TL_MARK(4);
  TL_FLUSH(kGlu ? 5 : 6, 0);
}

// Steps of few tokens, down: block (x, t), a warp per output row of token t: y_j = inter[t·k + j]·D_{idx}[row] (the
// chain above; four slots at a time for loads in flight), then h[t, row] (+)= Σ_j w_j·y_j as combine_kernel sums it.
__global__ void __launch_bounds__(kThreads, 2)
    down_combine_kernel(WView d, const float* __restrict__ inter, const int32_t* __restrict__ idx,
                        const float* __restrict__ w, int k, int64_t H, bool accumulate, float* __restrict__ h) {
  constexpr int kJ = 4;
  pdl_wait();
  pdl_trigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = blockIdx.y, row = int64_t(blockIdx.x) * kWarps + warp;
  if (row >= H) return;
  float acc = 0.0f;
  for (int j0 = 0; j0 < k; j0 += kJ) {
    int64_t wrow[kJ];
    const float* xr[kJ];
#pragma unroll
    for (int jj = 0; jj < kJ; ++jj) {  // past k: the last slot again (computed, never summed)
      const int64_t slot = t * k + min(j0 + jj, k - 1);
      wrow[jj] = int64_t(idx[slot]) * H + row;
      xr[jj] = inter + slot * d.in;
    }
    float g[kJ] = {};
#pragma unroll 2
    for (int64_t c = int64_t(lane) * 8; c < d.in; c += 256) {
#pragma unroll
      for (int jj = 0; jj < kJ; ++jj) {
        float v[8];
        load8(d, wrow[jj], c, v);
        g[jj] = dot8(v, xr[jj] + c, g[jj]);
      }
    }
#pragma unroll
    for (int jj = 0; jj < kJ; ++jj) {
      const float y = warp_sum(g[jj]);
      if (j0 + jj < k) acc = fmaf(w[t * k + j0 + jj], y, acc);
    }
  }
  if (lane == 0) h[t * H + row] = accumulate ? h[t * H + row] + acc : acc;
}

// h[t, :] (+)= Σ_j w[t, j] · yo[t·k + j, :], the sum from 0 in j order (moe_experts_forward's axpy order).
__global__ void combine_kernel(const float* __restrict__ yo, const float* __restrict__ w, int k, int64_t H,
                               bool accumulate, float* __restrict__ h) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.y, i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= H) return;
  float acc = 0.0f;
  for (int j = 0; j < k; ++j) acc = fmaf(w[t * k + j], yo[(t * k + j) * H + i], acc);
  h[t * H + i] = accumulate ? h[t * H + i] + acc : acc;
}

// The most tiles T tokens can sort into: an expert's c slots make ceil(c / kTileSlots) <= c / kTileSlots + 1 tiles,
// over at most min(E, S) active experts (S = T·k slots), and never more than S.
int64_t max_tiles(const DevMoe& m, int64_t T) {
  const int64_t S = T * m.top_k;
  return std::min(S, std::min<int64_t>(m.n_experts, S) + (S + kTileSlots - 1) / kTileSlots);
}

// Scratch offsets of moe_forward for T tokens.
struct Layout {
  size_t idx = 0, w = 0, order = 0, tiles = 0, logits = 0, xin = 0, inter = 0, yo = 0, total = 0;
  Layout(const DevMoe& m, int64_t T) {
    const size_t S = size_t(T) * size_t(m.top_k);
    size_t o = 0;
    idx = o; o += align_up(S * 4);
    w = o; o += align_up(S * 4);
    order = o; o += align_up(S * 4);
    tiles = o; o += align_up(size_t(1 + 3 * max_tiles(m, T)) * 4);
    logits = o; o += align_up(size_t(T) * size_t(m.n_experts) * 4);
    xin = o; o += m.input_rmsnorm ? align_up(size_t(T) * size_t(m.hidden) * 4) : 0;
    inter = o; o += align_up(S * size_t(m.ffn) * 4);
    yo = o; o += align_up(S * size_t(m.hidden) * 4);
    total = o;
  }
};

bool same_format(const Weight& a, const Weight& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.bits == b.bits && a.group == b.group && a.out == b.out && a.in == b.in;
}

void* device_alloc(size_t bytes, std::vector<void*>& allocations) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc expert weights");
  allocations.push_back(p);
  return p;
}

// The E expert views `ws` (one format) as one stacked device weight [E * out, in]; tiled: in the tensor-core tiles'
// layout (tile_codes, tile_scales), expert by expert (out % 16 == 0: no tile spans two experts).
DevWeight upload_stacked(const std::vector<Weight>& ws, std::vector<void*>& allocations, bool tiled = false) {
  const Weight& w0 = ws.front();
  const size_t E = ws.size();
  if (tiled) {
    const size_t words = tiled_words(w0.out, w0.in, w0.bits), sbytes = tiled_weight_scale_bytes(w0);
    char* data = static_cast<char*>(device_alloc(words * 4 * E, allocations));
    char* quads = static_cast<char*>(device_alloc(sbytes * E, allocations));
    std::vector<uint32_t> t(words);
    std::vector<uint8_t> q(sbytes);
    for (size_t e = 0; e < E; ++e) {  // synchronous copies: the host buffers are reused for the next expert
      tile_weight(ws[e], t.data(), q.data());
      check(cudaMemcpy(data + e * words * 4, t.data(), words * 4, cudaMemcpyHostToDevice), "upload expert tiles");
      check(cudaMemcpy(quads + e * sbytes, q.data(), sbytes, cudaMemcpyHostToDevice), "upload expert scale tiles");
    }
    DevWeight d = device_view(w0, data, quads, quads);
    d.out = w0.out * int64_t(E);
    d.tiled = true;
    return d;
  }
  const size_t code = weight_data_bytes(w0), sb = weight_scale_bytes(w0);
  char* data = static_cast<char*>(device_alloc(code * E, allocations));
  char* scales = sb ? static_cast<char*>(device_alloc(sb * E, allocations)) : nullptr;
  char* biases = sb ? static_cast<char*>(device_alloc(sb * E, allocations)) : nullptr;
  for (size_t e = 0; e < E; ++e) {
    check(cudaMemcpy(data + e * code, ws[e].data, code, cudaMemcpyHostToDevice), "upload expert weights");
    if (!sb) continue;
    check(cudaMemcpy(scales + e * sb, ws[e].scales, sb, cudaMemcpyHostToDevice), "upload expert scales");
    check(cudaMemcpy(biases + e * sb, ws[e].biases, sb, cudaMemcpyHostToDevice), "upload expert biases");
  }
  DevWeight d = device_view(w0, data, scales, biases);
  d.out = w0.out * int64_t(E);
  return d;
}

// What load8 cannot read in w (empty: it can): dense F32/F16/BF16 rows of a multiple of 8, or MLX affine 4/8-bit in
// groups of 32/64/128 with float scales.
std::string format_problem(const Weight& w) {
  const bool float_type = w.dtype == DType::F32 || w.dtype == DType::F16 || w.dtype == DType::BF16;
  if (!float_type) return w.name + " has dtype " + dtype_name(w.dtype) + " (the CUDA MoE kernels take F32/F16/BF16)";
  if (w.kind == WeightKind::Dense)
    return w.in % 8 == 0 ? "" : w.name + " has an input width of " + std::to_string(w.in) + " (not a multiple of 8)";
  if (w.bits != 4 && w.bits != 8) return w.name + " is " + std::to_string(w.bits) + "-bit (the MoE kernels take 4 and 8)";
  if (w.group != 32 && w.group != 64 && w.group != 128) return w.name + " has group size " + std::to_string(w.group);
  return "";
}

// RAPID_CUDA_MOE_MMA=0 keeps the f32 chains under Fast too (the A/B switch of docs/cuda.md); read once per process,
// so every step of a model takes the same arithmetic.
bool mma_tiles_on() {
  static const bool v = env_long("RAPID_CUDA_MOE_MMA", 1) != 0;
  return v;
}

// Whether the fast tiles take experts of format w: MLX affine 4-bit in groups of 32, 64 or 128, whole 16-row tiles.
bool mma_tiles_take(const Weight& w) {
  return w.kind == WeightKind::Affine && w.bits == 4 && (w.group == 32 || w.group == 64 || w.group == 128) &&
         w.in % w.group == 0 && w.out % 16 == 0;
}

// expert_mma_kernel<kGlu, words a lane takes per group, split> over grid (row blocks, tiles) with its shared memory.
// split (steps of at most kSplitSlots slots, top-8: up to 4 tokens): four warps per 16-row tile; the bits are the same
// either way. H100, block of the 30B-A3B shape (docs/cuda.md): split T=1 33 us, T=4 84; unsplit T=8 100, T=64 255.
constexpr int64_t kSplitSlots = 32;
template <bool kGlu>
void launch_mma(const DevWeight& a, const DevWeight& b, const float* x, int top_k, const int32_t* order,
                const int32_t* tiles, unsigned n_tiles, int64_t out_rows, int act, float* out, bool split,
                cudaStream_t s) {
  const auto go = [&](auto kernel, bool split_kernel) {
    const size_t smem = mma_smem_bytes(a.in, a.group, split_kernel);
    if (!allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem, 0)) return false;
    const int64_t block_rows = split_kernel ? kMmaRows : kMmaBlockRows;
    const dim3 grid(unsigned((out_rows + block_rows - 1) / block_rows), n_tiles);
    launch(kernel, grid, dim3(kMmaThreads), smem, s, kGlu ? "moe gate/up (mma)" : "moe down (mma)", view_of(a),
           view_of(b), x, top_k, order, tiles, out_rows, act, out);
    return true;
  };
  // A split whose terms exceed the shared memory runs unsplit: the same bits.
  const auto pick = [&](auto words) {
    constexpr int kW = decltype(words)::value;
    if (split && go(expert_mma_kernel<kGlu, kW, kSplitWarps>, true)) return;
    if (!go(expert_mma_kernel<kGlu, kW, 1>, false))
      throw std::runtime_error("moe: expert inputs of width " + std::to_string(a.in) + " exceed the shared memory");
  };
  if (a.group == 32) pick(std::integral_constant<int, 1>{});
  else if (a.group == 64) pick(std::integral_constant<int, 2>{});
  else pick(std::integral_constant<int, 4>{});
}

// A host vector's device copy (null when empty).
const float* upload_vec(const std::vector<float>& v, std::vector<void*>& allocations) {
  if (v.empty()) return nullptr;
  void* p = device_alloc(v.size() * sizeof(float), allocations);
  check(cudaMemcpy(p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice), "upload router vector");
  return static_cast<const float*>(p);
}

}  // namespace

std::string moe_unsupported(const MoeRouter& r, const MoeExperts& ex) {
  const RouterOptions& o = r.opt;
  if (ex.n_experts > kMaxExperts || o.top_k > kMaxTopK)
    return std::to_string(ex.n_experts) + " experts, top-" + std::to_string(o.top_k) + " (the CUDA kernels take at most " +
           std::to_string(kMaxExperts) + " experts, top-" + std::to_string(kMaxTopK) + ")";
  if (r.n_experts() != ex.n_experts || r.gate.in() != ex.hidden)
    return "the router " + r.gate.w.name + " [" + std::to_string(r.n_experts()) + ", " + std::to_string(r.gate.in()) +
           "] does not match " + std::to_string(ex.n_experts) + " experts of width " + std::to_string(ex.hidden);
  std::string why = format_problem(r.gate.w);
  for (const std::vector<Weight>* ws : {&ex.gate, &ex.up, &ex.down}) {
    if (why.empty() && !ws->empty()) why = format_problem(ws->front());
    for (const Weight& w : *ws)
      if (why.empty() && !same_format(w, ws->front()))
        why = "experts of " + ws->front().name + " are stored in more than one format";
  }
  return why;
}

DevMoe upload_moe(const MoeRouter& r, const MoeExperts& ex, std::vector<void*>& allocations, bool tensor_cores) {
  DevMoe m;
  const bool tc = tensor_cores && mma_tiles_on();
  const Weight &g0 = ex.gate.front(), &u0 = ex.up.front();
  const bool glu_tiles = tc && mma_tiles_take(g0) && mma_tiles_take(u0) && g0.group == u0.group && g0.dtype == u0.dtype;
  m.router = upload_stacked({r.gate.w}, allocations);
  m.gate = upload_stacked(ex.gate, allocations, glu_tiles);
  m.up = upload_stacked(ex.up, allocations, glu_tiles);
  m.down = upload_stacked(ex.down, allocations, tc && mma_tiles_take(ex.down.front()));
  m.n_experts = ex.n_experts;
  m.hidden = ex.hidden;
  m.ffn = ex.ffn;
  m.top_k = r.opt.top_k;
  m.renormalize = r.opt.renormalize;
  m.act = ex.act == Activation::Silu ? 0 : 1;
  m.input_rmsnorm = r.opt.input_rmsnorm;
  m.input_eps = r.opt.input_eps;
  m.input_mult = r.opt.input_mult;
  // moe_route applies scale and mult only under input_rmsnorm (Gemma 4 sets all three).
  m.input_scale = m.input_rmsnorm ? upload_vec(r.opt.input_scale, allocations) : nullptr;
  m.expert_scale = upload_vec(r.opt.per_expert_scale, allocations);
  // cudaMemcpy from pageable memory may return before its DMA lands, unordered with the non-blocking streams that
  // read these weights next: finish every copy here (at load or first use, never during a capture).
  check(cudaDeviceSynchronize(), "upload expert weights (sync)");
  return m;
}

size_t moe_scratch_bytes(const DevMoe& m, int64_t tokens) { return Layout(m, tokens).total; }

// Router logits of x into `logits` [T, E] (Gemma 4: of x's router input, made in `xin` [T, hidden]), then top-k
// (and, given order/tiles, the sort by expert).
static void route(const DevMoe& m, const float* x, int64_t T, float* xin, float* logits, int32_t* idx, float* w,
                  int32_t* order, int32_t* tiles, cudaStream_t s) {
  if (m.input_rmsnorm) {
    launch(router_input_kernel, dim3(unsigned(T)), dim3(kThreads), 0, s, "moe router input", x, m.hidden,
           m.input_scale, m.input_eps, m.input_mult, xin);
    x = xin;
  }
  launch(router_logits_kernel, dim3(unsigned((m.n_experts + kWarps - 1) / kWarps), unsigned(T)), dim3(kThreads), 0, s,
         "moe router", view_of(m.router), x, m.n_experts, logits);
  const auto select = [&](auto per_lane) {
    constexpr int kPerLane = decltype(per_lane)::value;
    launch(select_sort_kernel<kPerLane>, dim3(1), dim3(select_threads<kPerLane>()), 0, s, "moe select",
           static_cast<const float*>(logits), T, int(m.n_experts), m.top_k, m.renormalize, m.expert_scale, idx, w,
           order, tiles);
  };
  if (m.n_experts <= 128) select(std::integral_constant<int, 4>{});
  else if (m.n_experts <= 256) select(std::integral_constant<int, 8>{});
  else select(std::integral_constant<int, kMaxExperts / 32>{});
}

void moe_route_dev(const DevMoe& m, const float* x, int64_t T, int32_t* idx, float* w, cudaStream_t s) {
  if (T <= 0) return;
  const Layout L(m, T);
  char* base = nullptr;  // a test entry point: its own scratch, freed after the stream drains
  check(cudaMalloc(&base, L.total), "cudaMalloc router scratch");
  route(m, x, T, reinterpret_cast<float*>(base + L.xin), reinterpret_cast<float*>(base + L.logits), idx, w, nullptr,
        nullptr, s);
  check(cudaStreamSynchronize(s), "moe_route_dev");
  cudaFree(base);
}

void moe_forward(const DevMoe& m, const float* route_x, const float* x, int64_t T, float* h, bool accumulate,
                 MathMode mode, void* scratch, cudaStream_t s) {
  if (T <= 0) return;
  const Layout L(m, T);
  char* base = static_cast<char*>(scratch);
  float* xin = reinterpret_cast<float*>(base + L.xin);      // [T, hidden] Gemma 4's router input
  int32_t* idx = reinterpret_cast<int32_t*>(base + L.idx);  // [T, k]
  float* w = reinterpret_cast<float*>(base + L.w);          // [T, k]
  int32_t* order = reinterpret_cast<int32_t*>(base + L.order);    // [T·k] slot ids by expert
  int32_t* tiles = reinterpret_cast<int32_t*>(base + L.tiles);  // [1 + 3 · max_tiles]
  float* inter = reinterpret_cast<float*>(base + L.inter);  // [T·k, ffn] by slot
  float* yo = reinterpret_cast<float*>(base + L.yo);        // [T·k, hidden] by slot
  const int64_t S = T * m.top_k;
  float* logits = reinterpret_cast<float*>(base + L.logits);  // [T, E]
  // Experts uploaded as tensor-core tiles take the fast tiles at every step size (their arithmetic differs from the
  // f32 chains'), so a row's bits never depend on the batch.
  const bool mma_glu = m.gate.tiled, mma_down = m.down.tiled;
  if ((mma_glu || mma_down) && mode != MathMode::Fast)
    throw std::logic_error("moe_forward: experts uploaded for the Fast precision, run in Exact");
  if (T <= kSlotMajorTokens && !mma_glu && !mma_down) {
    route(m, route_x, T, xin, logits, idx, w, nullptr, nullptr, s);
    launch(slot_gate_up_kernel, dim3(unsigned((m.ffn + kWarps - 1) / kWarps), unsigned(S)), dim3(kThreads), 0, s,
           "moe gate/up", view_of(m.gate), view_of(m.up), x, m.top_k, static_cast<const int32_t*>(idx), m.ffn, m.act,
           inter);
    launch(down_combine_kernel, dim3(unsigned((m.hidden + kWarps - 1) / kWarps), unsigned(T)), dim3(kThreads), 0, s,
           "moe down", view_of(m.down), static_cast<const float*>(inter), static_cast<const int32_t*>(idx),
           static_cast<const float*>(w), m.top_k, m.hidden, accumulate, h);
    return;
  }
  // Grid y: every tile the sort can make; blocks past the step's tile count exit.
  const unsigned gy = unsigned(max_tiles(m, T));
  constexpr int64_t kBlockRows = int64_t(kWarps) * kTileRows;
  route(m, route_x, T, xin, logits, idx, w, order, tiles, s);
  if (mma_glu)
    launch_mma<true>(m.gate, m.up, x, m.top_k, order, tiles, gy, m.ffn, m.act, inter, S <= kSplitSlots, s);
  else
    launch(expert_tile_kernel<true>, dim3(unsigned((m.ffn + kBlockRows - 1) / kBlockRows), gy), dim3(kThreads), 0, s,
           "moe gate/up", view_of(m.gate), view_of(m.up), x, m.top_k, static_cast<const int32_t*>(order),
           static_cast<const int32_t*>(tiles), m.ffn, m.act, inter);
  if (mma_down)
    launch_mma<false>(m.down, m.down, inter, m.top_k, order, tiles, gy, m.hidden, m.act, yo, S <= kSplitSlots, s);
  else
    launch(expert_tile_kernel<false>, dim3(unsigned((m.hidden + kBlockRows - 1) / kBlockRows), gy), dim3(kThreads), 0,
           s, "moe down", view_of(m.down), view_of(m.down), static_cast<const float*>(inter), m.top_k,
           static_cast<const int32_t*>(order), static_cast<const int32_t*>(tiles), m.hidden, m.act, yo);
  launch(combine_kernel, dim3(unsigned((m.hidden + 255) / 256), unsigned(T)), dim3(256), 0, s, "moe combine",
         static_cast<const float*>(yo), static_cast<const float*>(w), m.top_k, m.hidden, accumulate, h);
}

}  // namespace rapid::cuda
