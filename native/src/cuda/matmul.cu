// y[n, out] = x[n, in] · Wᵀ for Dense (F32/F16/BF16) and MLX affine (4/8-bit) weights, and the fused
// GLU variant. A weight row is cut into 16-byte chunks; four adjacent lanes (a "quad group") own one
// output row each pass, lane p taking chunks p, p+4, p+8, ... . A warp holds 8 groups x OT weight rows
// and RT activation rows, so every weight chunk is loaded and dequantized once per block and used for
// RT rows, and every activation quad is used for OT weight rows.
//
// Batch invariance: per output element (r, o) the arithmetic is fixed and the same in every variant:
//   acc_p = 0; for chunk c = p, p+4, ... in order: for element i: acc_p = fma(w_i, x_i, acc_p)
//            (affine: w_i = s_c·q_i rounded once, then acc_p = fma(b_c, xsum_c, acc_p), xsum_c a fixed sum);
//   y = (acc_0 + acc_1) + (acc_2 + acc_3)
// (launches with few weight rows cut K into 4 segments with that sequence each and add the segments'
// y as (y0 + y1) + (y2 + y3); the choice depends on the weight shapes only). RT, OT, the prefetch depth
// and the tile a row falls in only change scheduling, never that sequence.
#include <stdexcept>
#include <string>
#include "cuda/cuda_kernels.h"
#include "cuda/device_math.cuh"
#include "cuda/launch.cuh"
#include "cuda/matmul_mma.h"

// Tuning knobs (scheduling only; every choice gives bitwise the same results). Overridable at build
// time so the bench can time alternatives without code changes.
#ifndef RAPID_MM_N1_OT
#define RAPID_MM_N1_OT 2   // weight rows per quad group at n = 1
#endif
#ifndef RAPID_MM_N1_U
#define RAPID_MM_N1_U 2    // chunks per lane loaded together at n = 1 (plus as many prefetched)
#endif
#ifndef RAPID_MM_N8_OT
#define RAPID_MM_N8_OT 4   // weight rows per quad group at n >= 8 (row tile 8)
#endif
#ifndef RAPID_MM_SPLIT_ROWS
#define RAPID_MM_SPLIT_ROWS 16384  // launches with fewer weight rows split K over a block's 4 warps
#endif
#ifndef RAPID_MM_BIG_RT
#define RAPID_MM_BIG_RT 8  // row tile at n >= 16: 8 or 16 (16 halves dequantization per FMA)
#endif
#ifndef RAPID_MM_N16_OT
#define RAPID_MM_N16_OT 4  // weight rows per quad group with row tile 16
#endif

namespace rapid::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block
constexpr int kThreads = kWarps * 32;
constexpr int kGroups = 8;  // quad groups per warp
constexpr int kParts = 4;   // lanes (partial sums) per output element

enum class Fmt { A4, A8, D32, D16, DB16 };

__host__ __device__ constexpr bool is_affine(Fmt F) { return F == Fmt::A4 || F == Fmt::A8; }
// Elements per 16-byte chunk; a chunk is consumed in quads of 4 elements (one float4 of x).
__host__ __device__ constexpr int epc(Fmt F) {
  return F == Fmt::A4 ? 32 : F == Fmt::A8 ? 16 : F == Fmt::D32 ? 4 : 8;
}

// One weight of a launch as the kernel sees it.
struct WeightP {
  const uint4* data = nullptr;   // [out, nchunks] 16-byte chunks
  const void* scales = nullptr;  // Affine: [out, ng] of sdt
  const void* biases = nullptr;
  int64_t out = 0;
  int64_t ng = 0;                // groups per row
  int sdt = 0;                   // scales/biases dtype: 0 F32, 1 F16, 2 BF16
};

struct JobP {
  WeightP w;
  const float* bias = nullptr;   // [out] or null
  float* y = nullptr;            // [n, ldy]
  int64_t ldy = 0;
  int accumulate = 0;
  int64_t tile0 = 0;             // first out tile of this job
};

// matmul: jobs[0..njobs). GLU: job[0] = gate (y = out [n, ffn]), job[1] = up, act.
struct KernelP {
  const float* x = nullptr;      // [n, ldx]
  int64_t ldx = 0, n = 0, nchunks = 0;
  int64_t nrt = 0;               // row tiles
  int cshift = 0;                // group of chunk c = c >> cshift (affine)
  int njobs = 0;
  int act = 0;
  JobP job[4];
};

__device__ __forceinline__ uint32_t word(const uint4& v, int j) {
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

// Quad q (elements 4q..4q+3) of chunk v. Affine: w = s·q rounded once, computed as
// fma(2^k + q, s, -s·2^k) where 2^k + q is the code OR-ed under a magic exponent (exact).
// nsk[m] = -s·2^(23-4m) (A4: nibble m of a 16-bit half sits at bits 4m..4m+3; A8 uses nsk[0]).
template <Fmt F>
__device__ __forceinline__ void dequant(const uint4& v, int q, float s, const float (&nsk)[4], float (&out)[4]) {
  if constexpr (F == Fmt::A4) {
    const uint32_t u = word(v, q >> 1) >> (16 * (q & 1));
#pragma unroll
    for (int m = 0; m < 4; ++m)
      out[m] = __fmaf_rn(__uint_as_float((u & (0xFu << (4 * m))) | (uint32_t(150 - 4 * m) << 23)), s, nsk[m]);
  } else if constexpr (F == Fmt::A8) {
    const uint32_t u = word(v, q);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      out[k] = __fmaf_rn(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440u | uint32_t(k))), s, nsk[0]);
  } else if constexpr (F == Fmt::D32) {
    out[0] = __uint_as_float(v.x);
    out[1] = __uint_as_float(v.y);
    out[2] = __uint_as_float(v.z);
    out[3] = __uint_as_float(v.w);
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t u = word(v, 2 * q + h);
      if constexpr (F == Fmt::D16) {
        out[2 * h] = f16_bits_to_float(uint16_t(u & 0xFFFFu));
        out[2 * h + 1] = f16_bits_to_float(uint16_t(u >> 16));
      } else {
        out[2 * h] = __uint_as_float(u << 16);
        out[2 * h + 1] = __uint_as_float(u & 0xFFFF0000u);
      }
    }
  }
}

// The weight rows of slot o: matmul slots are rows r0 + o of one weight; GLU slots alternate gate/up
// of ffn row r0 + o/2 (o is a compile-time index, so the choice folds away).
template <bool GLU>
struct SlotMap {
  const WeightP* a;  // matmul: the weight; GLU: gate
  const WeightP* b;  // GLU: up
  int64_t r0;
  __device__ __forceinline__ const WeightP& w(int o) const { return (GLU && (o & 1)) ? *b : *a; }
  __device__ __forceinline__ int64_t row(int o) const { return GLU ? r0 + o / 2 : r0 + o; }
};

// U chunks x OT slots of raw weight data and their scale/bias.
template <int U, int OT>
struct Stage {
  uint4 v[U][OT];
  float s[U][OT], b[U][OT];
};

template <Fmt F, int U, int OT, bool GLU>
__device__ __forceinline__ void load_stage(const SlotMap<GLU>& M, int64_t c0, int64_t cend, int64_t nchunks,
                                           int cshift, Stage<U, OT>& st) {
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int64_t c = c0 + int64_t(kParts) * k;
#pragma unroll
    for (int o = 0; o < OT; ++o) {
      const WeightP& W = M.w(o);
      const int64_t r = M.row(o);
      const bool ok = c < cend && r < W.out;
      st.v[k][o] = ok ? __ldg(W.data + r * nchunks + c) : make_uint4(0, 0, 0, 0);
      if constexpr (is_affine(F)) {
        const int64_t g = r * W.ng + (c >> cshift);
        st.s[k][o] = ok ? load_elem(W.scales, g, W.sdt) : 0.f;
        st.b[k][o] = ok ? load_elem(W.biases, g, W.sdt) : 0.f;
      } else {
        st.s[k][o] = st.b[k][o] = 0.f;
      }
    }
  }
}

// acc[r][o] += chunk c of slot o against row r of x (xr = x + row0 * ldx), in the fixed element order.
template <Fmt F, int RT, int OT>
__device__ __forceinline__ void chunk_fma(const float* __restrict__ xr, int64_t ldx, int64_t c, const uint4 (&v)[OT],
                                          const float (&s)[OT], const float (&b)[OT], float (&acc)[RT][OT]) {
  constexpr int kE = epc(F);
  [[maybe_unused]] float nsk[OT][4];
#pragma unroll
  for (int o = 0; o < OT; ++o) {
    if constexpr (F == Fmt::A4) {
      nsk[o][0] = __fmul_rn(s[o], -8388608.0f);
      nsk[o][1] = __fmul_rn(s[o], -524288.0f);
      nsk[o][2] = __fmul_rn(s[o], -32768.0f);
      nsk[o][3] = __fmul_rn(s[o], -2048.0f);
    } else {
      nsk[o][0] = nsk[o][1] = nsk[o][2] = nsk[o][3] = __fmul_rn(s[o], -8388608.0f);
    }
  }
  const float4* xc = reinterpret_cast<const float4*>(xr + c * kE);
  const int64_t ld4 = ldx / 4;
  [[maybe_unused]] float xs[RT];
#pragma unroll
  for (int q = 0; q < kE / 4; ++q) {
    float wq[OT][4];
#pragma unroll
    for (int o = 0; o < OT; ++o) dequant<F>(v[o], q, s[o], nsk[o], wq[o]);
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      const float4 t = __ldg(xc + r * ld4 + q);
      if constexpr (is_affine(F)) {
        const float qs = __fadd_rn(__fadd_rn(t.x, t.y), __fadd_rn(t.z, t.w));
        xs[r] = q == 0 ? qs : __fadd_rn(xs[r], qs);
      }
#pragma unroll
      for (int o = 0; o < OT; ++o) {
        acc[r][o] = __fmaf_rn(wq[o][0], t.x, acc[r][o]);
        acc[r][o] = __fmaf_rn(wq[o][1], t.y, acc[r][o]);
        acc[r][o] = __fmaf_rn(wq[o][2], t.z, acc[r][o]);
        acc[r][o] = __fmaf_rn(wq[o][3], t.w, acc[r][o]);
      }
    }
  }
  if constexpr (is_affine(F)) {
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int o = 0; o < OT; ++o) acc[r][o] = __fmaf_rn(b[o], xs[r], acc[r][o]);
  }
}

// This lane's partial sums over its chunks cbeg+p, cbeg+p+4, ... < cend (U per stage; PF: the next
// stage's loads are issued before the current stage is computed).
template <Fmt F, int RT, int OT, int U, bool PF, bool GLU>
__device__ __forceinline__ void dot_rows(const KernelP& P, const SlotMap<GLU>& M, const float* xr, int64_t cbeg,
                                         int64_t cend, int p, float (&acc)[RT][OT]) {
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int o = 0; o < OT; ++o) acc[r][o] = 0.f;
  const int64_t nchunks = P.nchunks;
  int64_t c0 = cbeg + p;
  if (c0 >= cend) return;
  Stage<U, OT> cur;
  load_stage<F, U, OT, GLU>(M, c0, cend, nchunks, P.cshift, cur);
  for (;;) {
    const int64_t cn = c0 + int64_t(kParts) * U;
    const bool more = cn < cend;
    [[maybe_unused]] Stage<U, OT> nxt;
    if constexpr (PF) {
      if (more) load_stage<F, U, OT, GLU>(M, cn, cend, nchunks, P.cshift, nxt);
    }
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int64_t c = c0 + int64_t(kParts) * k;
      if (c < cend) chunk_fma<F, RT, OT>(xr, P.ldx, c, cur.v[k], cur.s[k], cur.b[k], acc);
    }
    if (!more) break;
    c0 = cn;
    if constexpr (PF) {
      cur = nxt;
    } else {
      load_stage<F, U, OT, GLU>(M, c0, cend, nchunks, P.cshift, cur);
    }
  }
}

// Block b covers row tile b % nrt (RT rows) of out tile b / nrt (the row tiles of one out tile are
// neighbours in launch order, so they share its weights in L2). A last partial row tile is moved back
// to end at row n and writes only the rows not yet written.
// SPLIT = false: the 4 warps own different weight rows (kWarps x kGroups x OT per tile).
// SPLIT = true (chosen from the weight shapes alone, never from n): the 4 warps own the same
// kGroups x OT rows and K segment w = chunks [w·C/4, (w+1)·C/4) each; y = (W0 + W1) + (W2 + W3).
template <Fmt F, int RT, int OT, int U, bool PF, bool GLU, bool SPLIT>
__global__ void __launch_bounds__(kThreads) mm_kernel(const __grid_constant__ KernelP P) {
  pdl_wait();
  pdl_trigger();
  __shared__ float red[SPLIT ? kWarps : 1][kGroups][RT][OT];
  const int64_t bid = blockIdx.x;
  const int64_t tile = bid / P.nrt;
  const int64_t t = (bid % P.nrt) * RT;
  const int64_t row0 = t + RT <= P.n ? t : P.n - RT;
  int j = 0;
  if constexpr (!GLU)
    while (j + 1 < P.njobs && tile >= P.job[j + 1].tile0) ++j;
  const JobP& J = P.job[j];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int grp = lane / kParts, p = lane % kParts;
  constexpr int kRows = GLU ? OT / 2 : OT;  // output columns per quad group
  const int64_t r0 = SPLIT ? ((tile - J.tile0) * kGroups + grp) * kRows
                           : ((tile - J.tile0) * (kWarps * kGroups) + warp * kGroups + grp) * kRows;
  if ((r0 - grp * kRows) >= J.w.out) return;  // the whole warp (SPLIT: block) is past the end
  SlotMap<GLU> M{&J.w, GLU ? &P.job[1].w : &J.w, r0};
  const int64_t cbeg = SPLIT ? P.nchunks * warp / kWarps : 0;
  const int64_t cend = SPLIT ? P.nchunks * (warp + 1) / kWarps : P.nchunks;
  float acc[RT][OT];
  dot_rows<F, RT, OT, U, PF, GLU>(P, M, P.x + row0 * P.ldx, cbeg, cend, p, acc);
  // Fixed tree over the 4 partials; afterwards all 4 lanes of the group hold every total.
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int o = 0; o < OT; ++o) {
      acc[r][o] = __fadd_rn(acc[r][o], __shfl_xor_sync(0xffffffffu, acc[r][o], 1));
      acc[r][o] = __fadd_rn(acc[r][o], __shfl_xor_sync(0xffffffffu, acc[r][o], 2));
    }
  if constexpr (SPLIT) {
    if (p == 0)
#pragma unroll
      for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int o = 0; o < OT; ++o) red[warp][grp][r][o] = acc[r][o];
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int o = 0; o < OT; ++o)
        acc[r][o] = __fadd_rn(__fadd_rn(red[0][grp][r][o], red[1][grp][r][o]),
                              __fadd_rn(red[2][grp][r][o], red[3][grp][r][o]));
  }
  // Output (r, i) is written by lane p == (r * kRows + i) % 4 of the group.
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if ((r * kRows + i) % kParts != p || row0 + r < t) continue;
      const int64_t oc = r0 + i;
      if (oc >= J.w.out) continue;
      if constexpr (GLU) {
        J.y[(row0 + r) * J.ldy + oc] = __fmul_rn(glu_act(acc[r][2 * i], P.act), acc[r][2 * i + 1]);
      } else {
        float v = acc[r][i];
        if (J.bias) v = __fadd_rn(v, __ldg(J.bias + oc));
        float* yp = J.y + (row0 + r) * J.ldy + oc;
        *yp = J.accumulate ? __fadd_rn(*yp, v) : v;
      }
    }
}

// ---- host side ----

int dtype_code(DType t, const char* what) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::BF16: return 2;
    default: throw std::runtime_error(std::string(what) + ": unsupported dtype " + dtype_name(t));
  }
}

Fmt fmt_of(const DevWeight& w, const char* what) {
  if (w.kind == WeightKind::Affine) {
    if (w.bits != 4 && w.bits != 8) throw std::runtime_error(std::string(what) + ": affine bits must be 4 or 8");
    if (w.group != 32 && w.group != 64 && w.group != 128)
      throw std::runtime_error(std::string(what) + ": affine group must be 32, 64 or 128");
    if (w.in % w.group != 0) throw std::runtime_error(std::string(what) + ": in is not a multiple of the group");
    dtype_code(w.dtype, what);
    return w.bits == 4 ? Fmt::A4 : Fmt::A8;
  }
  if (w.in % 8 != 0) throw std::runtime_error(std::string(what) + ": dense in must be a multiple of 8");
  const int d = dtype_code(w.dtype, what);
  return d == 0 ? Fmt::D32 : d == 1 ? Fmt::D16 : Fmt::DB16;
}

int log2i(int v) {
  int s = 0;
  while ((1 << s) < v) ++s;
  return s;
}

WeightP weight_p(const DevWeight& w, Fmt f, const char* what) {
  if (!w.data || w.out <= 0 || w.in <= 0) throw std::runtime_error(std::string(what) + ": empty weight");
  if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0)
    throw std::runtime_error(std::string(what) + ": weight data must be 16-byte aligned");
  if (w.tiled) throw std::runtime_error(std::string(what) + ": tiled codes are read only by the Fast (tensor-core) path");
  WeightP p;
  p.data = static_cast<const uint4*>(w.data);
  p.out = w.out;
  if (is_affine(f)) {
    if (!w.scales || !w.biases) throw std::runtime_error(std::string(what) + ": affine weight without scales/biases");
    p.scales = w.scales;
    p.biases = w.biases;
    p.ng = w.in / w.group;
    p.sdt = dtype_code(w.dtype, what);
  }
  return p;
}

void check_x(const float* x, int64_t ldx, int64_t in, const char* what) {
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || ldx % 4 != 0 || ldx < in)
    throw std::runtime_error(std::string(what) + ": x must be 16-byte aligned with ldx % 4 == 0 and ldx >= in");
}

// Row tile of a launch: n = 1 streams weights (latency-bound, deep prefetch); larger n reuses each
// dequantized chunk for up to 8 rows (FMA-bound, no prefetch registers).
int row_tile(int64_t n) { return n == 1 ? 1 : n < 4 ? 2 : n < 8 ? 4 : n < 16 ? 8 : RAPID_MM_BIG_RT; }

int64_t rows_per_tile(int rt, bool split) {
  const int ot = rt == 1 ? RAPID_MM_N1_OT : rt == 8 ? RAPID_MM_N8_OT : rt == 16 ? RAPID_MM_N16_OT : 4;
  return int64_t(split ? 1 : kWarps) * kGroups * ot;
}

// Whether a launch splits K over the block's warps: a function of the weight rows alone (so of the
// model, never of n): few rows need the 4x more blocks to fill the GPU.
bool split_k(int64_t weight_rows) { return weight_rows < RAPID_MM_SPLIT_ROWS; }

template <Fmt F, bool GLU, bool SPLIT>
void launch_fs(const KernelP& P, int rt, const dim3& g, cudaStream_t s, const char* what) {
  const dim3 b{unsigned(kThreads)};
  switch (rt) {
    case 1: launch(mm_kernel<F, 1, RAPID_MM_N1_OT, RAPID_MM_N1_U, true, GLU, SPLIT>, g, b, 0, s, what, P); break;
    case 2: launch(mm_kernel<F, 2, 4, 2, true, GLU, SPLIT>, g, b, 0, s, what, P); break;
    case 4: launch(mm_kernel<F, 4, 4, 2, false, GLU, SPLIT>, g, b, 0, s, what, P); break;
    case 8: launch(mm_kernel<F, 8, RAPID_MM_N8_OT, 1, false, GLU, SPLIT>, g, b, 0, s, what, P); break;
#if RAPID_MM_BIG_RT == 16
    case 16: launch(mm_kernel<F, 16, RAPID_MM_N16_OT, 1, false, GLU, SPLIT>, g, b, 0, s, what, P); break;
#endif
    default: throw std::runtime_error("cuda::matmul: bad row tile");
  }
}

// One mm_kernel launch of format f; `what` prefixes a launch error.
template <bool GLU>
void launch_format(const KernelP& P, Fmt f, int rt, bool split, int64_t blocks, cudaStream_t s, const char* what) {
  if (blocks > int64_t(0x7fffffff)) throw std::runtime_error("cuda::matmul: too many blocks");
  const dim3 g{unsigned(blocks)};
  if (split) {
    switch (f) {
      case Fmt::A4: launch_fs<Fmt::A4, GLU, true>(P, rt, g, s, what); break;
      case Fmt::A8: launch_fs<Fmt::A8, GLU, true>(P, rt, g, s, what); break;
      case Fmt::D32: launch_fs<Fmt::D32, GLU, true>(P, rt, g, s, what); break;
      case Fmt::D16: launch_fs<Fmt::D16, GLU, true>(P, rt, g, s, what); break;
      case Fmt::DB16: launch_fs<Fmt::DB16, GLU, true>(P, rt, g, s, what); break;
    }
  } else {
    switch (f) {
      case Fmt::A4: launch_fs<Fmt::A4, GLU, false>(P, rt, g, s, what); break;
      case Fmt::A8: launch_fs<Fmt::A8, GLU, false>(P, rt, g, s, what); break;
      case Fmt::D32: launch_fs<Fmt::D32, GLU, false>(P, rt, g, s, what); break;
      case Fmt::D16: launch_fs<Fmt::D16, GLU, false>(P, rt, g, s, what); break;
      case Fmt::DB16: launch_fs<Fmt::DB16, GLU, false>(P, rt, g, s, what); break;
    }
  }
}

KernelP base_params(const float* x, int64_t ldx, int64_t n, int64_t in, Fmt f, int group, int rt) {
  KernelP P;
  P.x = x;
  P.ldx = ldx;
  P.n = n;
  P.nchunks = in / epc(f);
  P.cshift = is_affine(f) ? log2i(group / epc(f)) : 0;
  P.nrt = (n + rt - 1) / rt;
  return P;
}

// One launch for jobs[0..count) (all of format f).
void launch_jobs(const float* x, int64_t ldx, int64_t n, const MatmulJob* jobs, int count, Fmt f, cudaStream_t s) {
  for (int i = 1; i < count; ++i)
    if (is_affine(f) && jobs[i].w.group != jobs[0].w.group) {  // different group: split the launch
      launch_jobs(x, ldx, n, jobs, i, f, s);
      launch_jobs(x, ldx, n, jobs + i, count - i, f, s);
      return;
    }
  const int rt = row_tile(n);
  KernelP P = base_params(x, ldx, n, jobs[0].w.in, f, jobs[0].w.group, rt);
  P.njobs = count;
  int64_t total_rows = 0;
  for (int i = 0; i < count; ++i) total_rows += jobs[i].w.out;
  const bool split = split_k(total_rows);
  const int64_t per_tile = rows_per_tile(rt, split);
  int64_t tiles = 0;
  for (int i = 0; i < count; ++i) {
    const MatmulJob& J = jobs[i];
    if (!J.y || J.ldy < J.w.out) throw std::runtime_error("cuda::matmul: job without y or ldy < out");
    P.job[i].w = weight_p(J.w, f, "cuda::matmul");
    P.job[i].bias = J.bias;
    P.job[i].y = J.y;
    P.job[i].ldy = J.ldy;
    P.job[i].accumulate = J.accumulate ? 1 : 0;
    P.job[i].tile0 = tiles;
    tiles += (J.w.out + per_tile - 1) / per_tile;
  }
  launch_format<false>(P, f, rt, split, tiles * P.nrt, s, "cuda::matmul launch");
}

}  // namespace

bool can_fuse_norm(const MatmulJob* jobs, int n_jobs, int64_t n, MathMode mode) {
  if (mode != MathMode::Fast || n < 1 || n_jobs < 1) return false;
  for (int i = 0; i < n_jobs; ++i)
    if (!mma_supported(jobs[i].w) || !mma_same_format(jobs[i].w, jobs[0].w)) return false;
  return true;
}

bool can_merge_partials(const MatmulJob* jobs, int n_jobs, int64_t n, MathMode mode, int head_dim) {
  return n == 1 && head_dim > 0 && head_dim % 8 == 0 && can_fuse_norm(jobs, n_jobs, n, mode) && mma_merges_partials(jobs[0].w);
}

bool can_rope_epilogue(const DevWeight& q, const DevWeight& k, const DevWeight& v, int head_dim, int rot_dim, MathMode mode) {
  return mode == MathMode::Fast && head_dim > 0 && head_dim % 16 == 0 && rot_dim == head_dim && mma_format_supported(q) &&
         mma_same_format(q, k) && mma_same_format(q, v) && q.out % head_dim == 0 && k.out % head_dim == 0 &&
         v.out % head_dim == 0;
}

bool can_fuse_glu_norm(const DevWeight& gate, const DevWeight& up, int64_t n, MathMode mode) {
  const MatmulJob gu[2] = {{gate, nullptr, nullptr, gate.out, false}, {up, nullptr, nullptr, up.out, false}};
  return can_fuse_norm(gu, 2, n, mode);
}

void matmul(const float* x, int64_t ldx, int64_t n, const MatmulJob* jobs, int n_jobs, cudaStream_t s, MathMode mode,
            const RowNorm* norm, const RopeOut* rope, const AttnPartials* partials) {
  if (n_jobs < 1 || n_jobs > 4) throw std::runtime_error("cuda::matmul: 1..4 jobs");
  if (partials && !partials->o) partials = nullptr;  // nothing deferred: x is the attention's whole output
  if (n <= 0) return;
  const int64_t in = jobs[0].w.in;
  for (int i = 0; i < n_jobs; ++i)
    if (jobs[i].w.in != in) throw std::runtime_error("cuda::matmul: jobs differ in `in`");
  check_x(x, ldx, in, "cuda::matmul");
  for (int i = 0; i < n_jobs; ++i)
    if (jobs[i].rope != 0 && !rope) throw std::runtime_error("cuda::matmul: a RoPE epilogue job without its tables");
  if (partials) {
    if (norm || n != 1 || !can_fuse_norm(jobs, n_jobs, n, mode) || partials->head_dim % 8 != 0 ||
        in != int64_t(partials->n_heads) * partials->head_dim)
      throw std::runtime_error("cuda::matmul: this launch cannot merge attention partials");
    return mma_matmul(x, ldx, n, jobs, n_jobs, s, nullptr, rope, partials);
  }
  if (norm || rope) {
    if (!can_fuse_norm(jobs, n_jobs, n, mode))
      throw std::runtime_error("cuda::matmul: this launch cannot fuse a norm or a RoPE epilogue");
    return mma_matmul(x, ldx, n, jobs, n_jobs, s, norm, rope);
  }
  // Jobs of one format and path share a launch; a run of another starts a new one.
  const auto tensor_cores = [&](const DevWeight& w) { return mode == MathMode::Fast && mma_supported(w); };
  int i = 0;
  while (i < n_jobs) {
    const Fmt f = fmt_of(jobs[i].w, "cuda::matmul");
    const bool tc = tensor_cores(jobs[i].w);
    int j = i + 1;
    while (j < n_jobs && tensor_cores(jobs[j].w) == tc &&
           (tc ? mma_same_format(jobs[j].w, jobs[i].w) : fmt_of(jobs[j].w, "cuda::matmul") == f))
      ++j;
    if (tc) mma_matmul(x, ldx, n, jobs + i, j - i, s, nullptr, nullptr);
    else launch_jobs(x, ldx, n, jobs + i, j - i, f, s);
    i = j;
  }
}

__global__ void glu_kernel(float* __restrict__ gate, const float* __restrict__ up, int64_t n, int act) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) gate[i] = __fmul_rn(glu_act(gate[i], act), up[i]);
}

void glu(float* gate, const float* up, int64_t n, int act, cudaStream_t s) {
  if (act != 0 && act != 1) throw std::runtime_error("cuda::glu: act must be 0 (silu) or 1 (gelu_tanh)");
  if (n <= 0) return;
  launch(glu_kernel, dim3(unsigned((n + 255) / 256)), dim3(256), 0, s, "cuda::glu launch", gate, up, n, act);
}

void matmul_glu(const float* x, int64_t n, const DevWeight& gate, const DevWeight& up, int act, float* out,
                cudaStream_t s, MathMode mode, const RowNorm* norm) {
  const Fmt f = fmt_of(gate, "cuda::matmul_glu");
  if (fmt_of(up, "cuda::matmul_glu") != f || up.out != gate.out || up.in != gate.in || up.group != gate.group ||
      up.dtype != gate.dtype)
    throw std::runtime_error("cuda::matmul_glu: gate and up differ in shape or format");
  if (act != 0 && act != 1) throw std::runtime_error("cuda::matmul_glu: act must be 0 (silu) or 1 (gelu_tanh)");
  if (n <= 0) return;
  check_x(x, gate.in, gate.in, "cuda::matmul_glu");
  if (norm && !can_fuse_glu_norm(gate, up, n, mode))
    throw std::runtime_error("cuda::matmul_glu: this launch cannot fuse a norm");
  if (mode == MathMode::Fast && mma_supported(gate)) return mma_glu(x, n, gate, up, act, out, s, norm);
  const int rt = row_tile(n);
  KernelP P = base_params(x, gate.in, n, gate.in, f, gate.group, rt);
  P.njobs = 2;
  P.act = act;
  P.job[0].w = weight_p(gate, f, "cuda::matmul_glu");
  P.job[0].y = out;
  P.job[0].ldy = gate.out;
  P.job[1].w = weight_p(up, f, "cuda::matmul_glu");
  const bool split = split_k(2 * gate.out);
  const int64_t per_tile = rows_per_tile(rt, split) / 2;  // two weight rows (gate, up) per output column
  const int64_t tiles = (gate.out + per_tile - 1) / per_tile;
  launch_format<true>(P, f, rt, split, tiles * P.nrt, s, "cuda::matmul_glu launch");
}

}  // namespace rapid::cuda
