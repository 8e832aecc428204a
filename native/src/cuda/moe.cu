// The MoE block's kernels and their host launchers (cuda/moe.h).
#include <cuda_runtime.h>
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include "cuda/device_math.cuh"
#include "cuda/launch.cuh"
#include "cuda/moe.h"
#include "quant/mlx_quant.h"
#include "tensor/dtype.h"

namespace rapid::cuda {
namespace {

constexpr int kThreads = 256;             // every MoE kernel: 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerBlock = kWarps;     // expert kernels: one output row per warp
constexpr int kTokensPerPass = 4;         // rows of one expert a warp carries through one pass over a weight row
constexpr int kMaxExperts = 1024;         // the sort's scan: 32 experts per lane at most
constexpr int kMaxTopK = 32;
// Steps of at most this many tokens skip the sort: a block per (row tile, slot) reading the slot's expert id, and the
// down projection fused with the weighted sum (two launches less; the same arithmetic per slot, bit for bit).
constexpr int64_t kSlotMajorTokens = 4;

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

// A weight row reader: fmt 0/1/2 dense F32/F16/BF16, 4 or 8 MLX affine bits (scales/biases of dtype sdt).
struct WView {
  const void* data = nullptr;
  const void* scales = nullptr;
  const void* biases = nullptr;
  int64_t in = 0;
  int fmt = 0, sdt = 0, group = 0;
};

WView view_of(const DevWeight& w) {
  WView v;
  v.data = w.data;
  v.scales = w.scales;
  v.biases = w.biases;
  v.in = w.in;
  v.fmt = w.kind == WeightKind::Dense ? int(w.dtype) : w.bits;
  v.sdt = int(w.dtype);
  v.group = w.group;
  return v;
}

// v[0..8) = W[row, c .. c+8) as f32 (c a multiple of 8; a group never splits 8 columns: group >= 32).
__device__ __forceinline__ void load8(const WView& w, int64_t row, int64_t c, float (&v)[8]) {
  if (w.fmt == 4 || w.fmt == 8) {
    const int64_t g = row * (w.in / w.group) + c / w.group;
    const float sc = load_elem(w.scales, g, w.sdt), bi = load_elem(w.biases, g, w.sdt);
    if (w.fmt == 4) {
      const uint32_t q = static_cast<const uint32_t*>(w.data)[row * (w.in / 8) + c / 8];
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = fmaf(float((q >> (4 * i)) & 15u), sc, bi);
    } else {
      const uint2 q = *reinterpret_cast<const uint2*>(static_cast<const uint32_t*>(w.data) + row * (w.in / 4) + c / 4);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[i] = fmaf(float((q.x >> (8 * i)) & 255u), sc, bi);
        v[4 + i] = fmaf(float((q.y >> (8 * i)) & 255u), sc, bi);
      }
    }
    return;
  }
  if (w.fmt == 0) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(w.data) + row * w.in + c);
    const float4 a = p[0], b = p[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    return;
  }
  const uint4 q = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w.data) + row * w.in + c);
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
__device__ __forceinline__ float dot8(const float (&v)[8], const float* x, float acc) {
  const float4 a = *reinterpret_cast<const float4*>(x), b = *reinterpret_cast<const float4*>(x + 4);
  acc = fmaf(v[0], a.x, acc); acc = fmaf(v[1], a.y, acc); acc = fmaf(v[2], a.z, acc); acc = fmaf(v[3], a.w, acc);
  acc = fmaf(v[4], b.x, acc); acc = fmaf(v[5], b.y, acc); acc = fmaf(v[6], b.z, acc); acc = fmaf(v[7], b.w, acc);
  return acc;
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
  for (int64_t c = int64_t(lane) * 8; c < r.in; c += 256) {
    float v[8];
    load8(r, e, c, v);
    acc = dot8(v, xr + c, acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) logits[t * E + e] = acc;
}

// One warp routes token t: softmax of its logits row (turned into probabilities in place), then top-k by repeated
// best (larger probability, then lower id: moe_route's order) and the weights, renormalized over the k in j order,
// then times expert_scale[idx] (Gemma 4's per-expert scale; null: none).
__device__ void route_token(float* __restrict__ prob, int64_t E, int k, bool renormalize,
                            const float* __restrict__ expert_scale, int32_t* __restrict__ idx, float* __restrict__ w) {
  const int lane = threadIdx.x % 32;
  float mx = -INFINITY;
  for (int64_t e = lane; e < E; e += 32) mx = fmaxf(mx, prob[e]);
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int64_t e = lane; e < E; e += 32) sum += (prob[e] = expf(prob[e] - mx));
  sum = warp_sum(sum);
  for (int64_t e = lane; e < E; e += 32) prob[e] /= sum;
  __syncwarp();
  int32_t chosen[kMaxTopK];
  float pick[kMaxTopK];
  float top_sum = 0.0f;
  for (int j = 0; j < k; ++j) {
    float bv = 0.0f;
    int32_t bi = -1;
    for (int64_t e = lane; e < E; e += 32) {
      bool taken = false;
      for (int q = 0; q < j; ++q) taken |= chosen[q] == int32_t(e);
      if (!taken && better_pair(prob[e], int32_t(e), bv, bi)) {
        bv = prob[e];
        bi = int32_t(e);
      }
    }
    warp_best(bv, bi);
    chosen[j] = bi;
    pick[j] = bv;
    top_sum += bv;
  }
  if (lane != 0) return;
  for (int j = 0; j < k; ++j) {
    idx[j] = chosen[j];
    const float v = renormalize ? pick[j] / top_sum : pick[j];
    w[j] = expert_scale ? __fmul_rn(v, expert_scale[chosen[j]]) : v;
  }
}

// One block of 1024 threads: each warp routes tokens (route_token over logits [T, E]: idx/w [T, k]), then the S = T·k
// slots are sorted by expert (when order is not null). groups[0] = active experts n; groups[1 + 3g ..] = (expert,
// first position in order, count) of the g-th active expert, in expert order; order[pos] = slot id. The order of
// slots inside a group is not fixed (atomics): each slot's arithmetic does not depend on it.
__global__ void select_sort_kernel(float* __restrict__ logits, int64_t T, int E, int k, bool renormalize,
                                   const float* __restrict__ expert_scale, int32_t* __restrict__ idx,
                                   float* __restrict__ w, int32_t* __restrict__ order, int32_t* __restrict__ groups) {
  __shared__ int cnt[kMaxExperts], start[kMaxExperts];
  pdl_wait();
  pdl_trigger();
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  for (int64_t t = warp; t < T; t += warps)
    route_token(logits + t * E, E, k, renormalize, expert_scale, idx + t * k, w + t * k);
  __syncthreads();  // idx (global, written by this block) is visible to the whole block after the barrier
  if (!order) return;
  const int64_t S = T * k;
  for (int64_t i = threadIdx.x; i < S; i += blockDim.x) atomicAdd(&cnt[idx[i]], 1);
  __syncthreads();
  if (threadIdx.x < 32) {
    // Lane l scans experts [l·per, (l+1)·per): counts and active flags, then a warp-wide exclusive scan.
    const int lane = threadIdx.x, per = (E + 31) / 32, e0 = lane * per, e1 = min(E, e0 + per);
    int n_rows = 0, n_act = 0;
    for (int e = e0; e < e1; ++e) {
      n_rows += cnt[e];
      n_act += cnt[e] > 0;
    }
    int rows_before = n_rows, act_before = n_act;
    for (int o = 1; o < 32; o <<= 1) {
      const int a = __shfl_up_sync(0xffffffffu, rows_before, o), b = __shfl_up_sync(0xffffffffu, act_before, o);
      if (lane >= o) {
        rows_before += a;
        act_before += b;
      }
    }
    rows_before -= n_rows;
    act_before -= n_act;
    for (int e = e0; e < e1; ++e) {
      start[e] = rows_before;
      if (cnt[e] > 0) {
        groups[1 + 3 * act_before] = e;
        groups[2 + 3 * act_before] = rows_before;
        groups[3 + 3 * act_before] = cnt[e];
        ++act_before;
      }
      rows_before += cnt[e];
    }
    if (lane == 31) groups[0] = act_before;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < S; i += blockDim.x) {
    const int e = idx[i];
    order[start[e] + atomicSub(&cnt[e], 1) - 1] = int32_t(i);  // cnt[e] counts down: start .. start + count - 1
  }
}

// Block (x, y): output rows [x·8, x·8 + 8) (a warp each) of the y-th active expert, for every slot routed to it,
// kTokensPerPass slots per pass over the row (kBySlot: of slot y's expert idx[y], for that slot alone).
// GLU: out[slot, row] = act(x·G[row]) · (x·U[row]) with x the slot's token row of `x` (ldx = hidden); else
// out[slot, row] = inter[slot]·D[row]. Each product is one lane-strided f32 FMA chain and a fixed shuffle tree: a
// slot's value does not depend on the other slots.
// Three blocks per SM: unbounded, the sorted gate/up took 128 registers (two blocks); 85 fit without spills.
template <bool kGlu, bool kBySlot>
__global__ void __launch_bounds__(kThreads, 3)
    expert_rows_kernel(WView a, WView b, const float* __restrict__ x, int top_k, const int32_t* __restrict__ order,
                       const int32_t* __restrict__ groups, const int32_t* __restrict__ idx, int64_t out_rows, int act,
                       float* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  if (!kBySlot && int(blockIdx.y) >= groups[0]) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + warp;
  if (row >= out_rows) return;
  const int32_t by_slot = int32_t(blockIdx.y);  // kBySlot: the block's one slot, as a one-entry `order`
  const int e = kBySlot ? idx[blockIdx.y] : groups[1 + 3 * blockIdx.y];
  const int first = kBySlot ? 0 : groups[2 + 3 * blockIdx.y], count = kBySlot ? 1 : groups[3 + 3 * blockIdx.y];
  if (kBySlot) order = &by_slot;
  const int64_t wrow = int64_t(e) * out_rows + row;  // the row in the stacked [E * out_rows, in] weights
  const int64_t in = a.in;
  for (int p0 = 0; p0 < count; p0 += kTokensPerPass) {
    const int n = min(kTokensPerPass, count - p0);
    int32_t slot[kTokensPerPass];
    const float* xr[kTokensPerPass];
#pragma unroll
    for (int i = 0; i < kTokensPerPass; ++i) {
      slot[i] = order[first + p0 + min(i, n - 1)];
      xr[i] = kGlu ? x + int64_t(slot[i] / top_k) * in : x + int64_t(slot[i]) * in;
    }
    float ga[kTokensPerPass] = {}, ua[kTokensPerPass] = {};
#pragma unroll 2
    for (int64_t c = int64_t(lane) * 8; c < in; c += 256) {
      float wa[8];
      load8(a, wrow, c, wa);
      float wb[8];
      if constexpr (kGlu) load8(b, wrow, c, wb);
#pragma unroll
      for (int i = 0; i < kTokensPerPass; ++i) {
        if (i >= n) break;
        ga[i] = dot8(wa, xr[i] + c, ga[i]);
        if constexpr (kGlu) ua[i] = dot8(wb, xr[i] + c, ua[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kTokensPerPass; ++i) {
      if (i >= n) break;
      const float g = warp_sum(ga[i]);
      if constexpr (kGlu) {
        const float u = warp_sum(ua[i]);
        if (lane == 0) out[int64_t(slot[i]) * out_rows + row] = __fmul_rn(glu_act(g, act), u);
      } else {
        if (lane == 0) out[int64_t(slot[i]) * out_rows + row] = g;
      }
    }
  }
}

// Steps of few tokens: block (x, t), a warp per output row of token t: y_j = inter[t·k + j]·D_{idx}[row] exactly as
// expert_rows_kernel<false> computes it, then h[t, row] (+)= Σ_j w_j·y_j as combine_kernel sums it.
__global__ void down_combine_kernel(WView d, const float* __restrict__ inter, const int32_t* __restrict__ idx,
                                    const float* __restrict__ w, int k, int64_t H, bool accumulate,
                                    float* __restrict__ h) {
  pdl_wait();
  pdl_trigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = blockIdx.y, row = int64_t(blockIdx.x) * kRowsPerBlock + warp;
  if (row >= H) return;
  float acc = 0.0f;
  for (int j = 0; j < k; ++j) {
    const int64_t slot = t * k + j, wrow = int64_t(idx[slot]) * H + row;
    const float* xr = inter + slot * d.in;
    float g = 0.0f;
#pragma unroll 2
    for (int64_t c = int64_t(lane) * 8; c < d.in; c += 256) {
      float v[8];
      load8(d, wrow, c, v);
      g = dot8(v, xr + c, g);
    }
    acc = fmaf(w[slot], warp_sum(g), acc);
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

// Scratch offsets of moe_forward for T tokens.
struct Layout {
  size_t idx = 0, w = 0, order = 0, groups = 0, logits = 0, xin = 0, inter = 0, yo = 0, total = 0;
  Layout(const DevMoe& m, int64_t T) {
    const size_t S = size_t(T) * size_t(m.top_k);
    size_t o = 0;
    idx = o; o += align_up(S * 4);
    w = o; o += align_up(S * 4);
    order = o; o += align_up(S * 4);
    groups = o; o += align_up(size_t(1 + 3 * m.n_experts) * 4);
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

// The E expert views `ws` (one format) as one stacked device weight [E * out, in].
DevWeight upload_stacked(const std::vector<Weight>& ws, std::vector<void*>& allocations) {
  const Weight& w0 = ws.front();
  const size_t code = weight_data_bytes(w0), sb = weight_scale_bytes(w0), E = ws.size();
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

DevMoe upload_moe(const MoeRouter& r, const MoeExperts& ex, std::vector<void*>& allocations) {
  DevMoe m;
  m.router = upload_stacked({r.gate.w}, allocations);
  m.gate = upload_stacked(ex.gate, allocations);
  m.up = upload_stacked(ex.up, allocations);
  m.down = upload_stacked(ex.down, allocations);
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
// (and, given order/groups, the sort by expert).
static void route(const DevMoe& m, const float* x, int64_t T, float* xin, float* logits, int32_t* idx, float* w,
                  int32_t* order, int32_t* groups, cudaStream_t s) {
  if (m.input_rmsnorm) {
    launch(router_input_kernel, dim3(unsigned(T)), dim3(kThreads), 0, s, "moe router input", x, m.hidden,
           m.input_scale, m.input_eps, m.input_mult, xin);
    x = xin;
  }
  launch(router_logits_kernel, dim3(unsigned((m.n_experts + kWarps - 1) / kWarps), unsigned(T)), dim3(kThreads), 0, s,
         "moe router", view_of(m.router), x, m.n_experts, logits);
  launch(select_sort_kernel, dim3(1), dim3(1024), 0, s, "moe select", logits, T, int(m.n_experts), m.top_k,
         m.renormalize, m.expert_scale, idx, w, order, groups);
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
                 void* scratch, cudaStream_t s) {
  if (T <= 0) return;
  const Layout L(m, T);
  char* base = static_cast<char*>(scratch);
  float* xin = reinterpret_cast<float*>(base + L.xin);      // [T, hidden] Gemma 4's router input
  int32_t* idx = reinterpret_cast<int32_t*>(base + L.idx);  // [T, k]
  float* w = reinterpret_cast<float*>(base + L.w);          // [T, k]
  int32_t* order = reinterpret_cast<int32_t*>(base + L.order);    // [T·k] slot ids by expert
  int32_t* groups = reinterpret_cast<int32_t*>(base + L.groups);  // [1 + 3E]
  float* inter = reinterpret_cast<float*>(base + L.inter);  // [T·k, ffn] by slot
  float* yo = reinterpret_cast<float*>(base + L.yo);        // [T·k, hidden] by slot
  const int64_t S = T * m.top_k;
  const unsigned gx_ffn = unsigned((m.ffn + kRowsPerBlock - 1) / kRowsPerBlock);
  const unsigned gx_hidden = unsigned((m.hidden + kRowsPerBlock - 1) / kRowsPerBlock);
  float* logits = reinterpret_cast<float*>(base + L.logits);  // [T, E]
  if (T <= kSlotMajorTokens) {
    route(m, route_x, T, xin, logits, idx, w, nullptr, nullptr, s);
    launch(expert_rows_kernel<true, true>, dim3(gx_ffn, unsigned(S)), dim3(kThreads), 0, s, "moe gate/up", view_of(m.gate),
           view_of(m.up), x, m.top_k, static_cast<const int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
           static_cast<const int32_t*>(idx), m.ffn, m.act, inter);
    launch(down_combine_kernel, dim3(gx_hidden, unsigned(T)), dim3(kThreads), 0, s, "moe down", view_of(m.down),
           static_cast<const float*>(inter), static_cast<const int32_t*>(idx), static_cast<const float*>(w), m.top_k,
           m.hidden, accumulate, h);
    return;
  }
  // Grid y: every expert that can be active (at most one per slot); blocks past the active count exit.
  const unsigned gy = unsigned(std::min<int64_t>(m.n_experts, S));
  route(m, route_x, T, xin, logits, idx, w, order, groups, s);
  launch(expert_rows_kernel<true, false>, dim3(gx_ffn, gy), dim3(kThreads), 0, s, "moe gate/up", view_of(m.gate),
         view_of(m.up), x, m.top_k, static_cast<const int32_t*>(order), static_cast<const int32_t*>(groups),
         static_cast<const int32_t*>(nullptr), m.ffn, m.act, inter);
  launch(expert_rows_kernel<false, false>, dim3(gx_hidden, gy), dim3(kThreads), 0, s, "moe down", view_of(m.down),
         view_of(m.down), static_cast<const float*>(inter), m.top_k, static_cast<const int32_t*>(order),
         static_cast<const int32_t*>(groups), static_cast<const int32_t*>(nullptr), m.hidden, m.act, yo);
  launch(combine_kernel, dim3(unsigned((m.hidden + 255) / 256), unsigned(T)), dim3(256), 0, s, "moe combine",
         static_cast<const float*>(yo), static_cast<const float*>(w), m.top_k, m.hidden, accumulate, h);
}

}  // namespace rapid::cuda
