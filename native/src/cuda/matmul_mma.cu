// Fast-precision matmul of MLX affine 4/8-bit weights on tensor cores (mma.sync m16n8k16, bf16 in, f32
// accumulate). A warp owns 16 weight rows (GLU: 16 gate + 16 up rows); the weights stay exact: a group of G inputs
// is one chain of G/16 mma steps over the raw codes (bf16 128 + q for 4-bit, q for 8-bit, both exact) against
// bf16(x), and the group's affine terms are applied in f32 afterwards: acc = fma(s, P, acc);
// acc = fma(b - off·s, Σ bf16(x), acc). Two kernels share that arithmetic: the gemv kernel (one row: decode at
// batch 1; all of x is converted once per block into shared memory, the input norm fused, codes kept in flight in a
// register ring) and, for more rows, a prepare pass (x, or rms_norm(x)·w, converted once into a per-stream buffer)
// followed by the direct kernel. Both are specialized on the scales dtype, walk their groups with the codes of the
// next ones in flight (a register ring) and issue their first code loads before waiting on the previous kernel (PDL).
//
// Batch invariance: per output element (row, token) the sequence is fixed — the groups of each of the KS K parts
// (contiguous, [ng·k/KS, ng·(k+1)/KS)) in order, each an mma chain from zero (a tensor-core dot product of one row
// and one column, which other columns do not touch), then the parts added as a fixed pairwise tree. KS is chosen
// from the weight shapes alone; which kernel runs, the chunking and the token tile a row falls in change nothing.
//
// mma.sync m16n8k16 fragments (g = lane / 4, t = lane % 4): A a0 (row g, k 2t..2t+1), a1 (row g+8, same k),
// a2 (row g, k 2t+8..2t+9), a3 (row g+8, same k); B b0 (k 2t..2t+1, col g), b1 (k 2t+8..2t+9, col g);
// C c0/c1 (row g, cols 2t, 2t+1), c2/c3 (row g+8, same cols). The k order inside one step is free as long as
// A and B agree, so thread t's four k slots hold elements of ITS OWN quarter of the group (G/4 contiguous
// inputs): each thread reads its weights and x as contiguous vectors and no shuffle is needed.
//
// RoPE epilogue (MatmulJob::rope): a q/k weight uploaded with its rows in rope_pair_rows order puts both rows of
// each rotate-half pair in one thread (C rows g and g + 8), so the launch rotates them (after the bias, with
// rope_kv_write's arithmetic) and writes q to its unpermuted rows and k (and v) straight into the KV pool.
//
// Tiled weights (the decoder's Fast upload): codes in tile_codes' order and scales with biases in tile_scales', so a
// warp reads a group of its 16 rows as contiguous words and a thread its group's scale terms in one load; the group
// walk then only advances pointers (GroupCursor). One row on sm_90 with tiled weights may instead take the bulk
// kernel: the gemv kernel's warps and arithmetic, with the codes and scales streamed into shared memory by bulk (TMA)
// copies, most of them issued before pdl_wait. Many rows (17 or more) on sm_90 with tiled weights take the cluster
// kernel instead of the direct one: the same arithmetic, with a block's warps sharing their token tile's activations
// in shared memory and the K parts of a thread-block cluster added through distributed shared memory.
//
// Attention partials (MmaParams::am, one row: the o projection at batch 1): x is the merge of the token's key partitions,
// which the attention left unmerged. The bulk kernel's MERGE instance merges them as it stages x (attn_partials.cuh:
// bitwise the x the attention's own merge writes); other kernels read x, which attention_merge writes first.
//
// Tuning knobs (read once; scheduling only, results are bitwise the same): RAPID_CUDA_MM_STAGED (0 sends one row
// through prepare + direct too; 1, the default, through the gemv kernel), RAPID_CUDA_MM_BULK (0, 1, 2: when one row
// takes the bulk kernel, see bulk_mode), RAPID_CUDA_MM_WARPS (the warps a launch aims for when choosing KS: a
// process-wide constant, so every n of a weight still gets the same split), RAPID_CUDA_MM_NT (most token subtiles of
// 8 per direct-kernel block), RAPID_CUDA_MM_SETTLED (0: a bulk launch reads the y it accumulates into after pdl_wait
// even when the job says no launch just before writes it), RAPID_CUDA_MM_SPREAD (0: one-row launches of at most one
// block per multiprocessor let the block scheduler pair their blocks up, see spread_blocks), RAPID_CUDA_MM_CLUSTER,
// RAPID_CUDA_MM_CLUSTER_MIN, RAPID_CUDA_MM_CLUSTER_NT and RAPID_CUDA_MM_CLUSTER_GLU_NT (the cluster kernel: off, from
// how many rows, most token subtiles per block; see cluster_min_rows and cluster_subtiles).
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>
#include "cuda/attn_partials.cuh"
#include "cuda/bulk_copy.cuh"
#include "cuda/cluster.cuh"
#include "cuda/device_math.cuh"
#include "cuda/kv_elems.cuh"
#include "cuda/launch.cuh"
#include "cuda/matmul_mma.h"
#include "cuda/mma.cuh"

namespace rapid::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTargetWarps = 2048;  // K is split over a block's warps until a launch has about this many warps
static_assert(kThreads == kNormThreads, "the fused norm reduces a row exactly as rms_norm_kernel does");

struct MmaJob {
  const uint32_t* data = nullptr;  // [out, wpr] packed codes, or the tiled layout (tiled: tile_codes)
  const void* scales = nullptr;    // [out, ng] of sdt
  const void* biases = nullptr;    // [out, ng] of sdt
  const float* bias = nullptr;     // [out] or null
  float* y = nullptr;              // [n, ldy]
  int64_t ldy = 0, out = 0;
  int64_t tile0 = 0;               // first block row tile of this job
  int accumulate = 0;              // 1: y += ..., 2: the same with y settled (MatmulJob::y_settled)
  int tiled = 0;
  int rope = 0;                    // MatmulJob::rope
};

struct MmaParams {
  const float* x = nullptr;  // [n, ldx]
  int64_t ldx = 0, n = 0;
  int64_t ng = 0;            // groups per weight row
  int64_t wpr = 0;           // uint32 words per weight row
  int64_t ntt = 0;           // token tiles (8·NT tokens each)
  int ks = 1;                // warps sharing one row tile, each a K range (1, 2, 4 or 8)
  const uint32_t* pfrag = nullptr;  // direct kernel: prepared B fragments [ng][npad][4][G/2] u32
  const float* psum = nullptr;      // direct kernel: prepared group sums [ng][npad]
  int64_t npad = 0;                 // prepared token rows (a multiple of 8)
  int sdt = 0;               // scales/biases dtype: 0 F32, 1 F16, 2 BF16
  int njobs = 0;
  int act = 0;               // GLU: 0 silu, 1 gelu_tanh
  const float* norm_w = nullptr;  // [in] or null: the kernel reads rms_norm(x)·norm_w instead of x (NT = 1 only)
  float eps = 0.0f;
  const float* rope_cos = nullptr;  // RoPE epilogue: [n, rope_hd / 2] each
  const float* rope_sin = nullptr;
  const int32_t* rope_slot = nullptr;  // [n] KV pool rows (< 0: not stored)
  int rope_hd = 0;
  KvDtype rope_kv = KvDtype::F32;   // the pool's element type (RopeOut::kv): F32, F16 or BF16
  MmaJob job[4];             // GLU: job[0] gate (y = out), job[1] up
  AttnPartials am;           // am.o set: x (one row) is the merge of these attention partials
};

// The element pairs of k-step s inside a thread's quarter of a group: slots (2t, 2t+1) hold elements
// (lo0, hi0), slots (2t+8, 2t+9) hold (lo1, hi1). 4-bit: word w = s/2 holds 8 codes, nibble i = element 8w+i;
// pair p is (8w+p, 8w+p+4), which one mask takes from the word. 8-bit: word s holds elements 4s..4s+3.
template <int BITS>
struct Slots {
  __device__ static constexpr int lo0(int s) { return BITS == 4 ? 8 * (s >> 1) + 2 * (s & 1) : 4 * s; }
  __device__ static constexpr int hi0(int s) { return BITS == 4 ? lo0(s) + 4 : 4 * s + 1; }
  __device__ static constexpr int lo1(int s) { return BITS == 4 ? lo0(s) + 1 : 4 * s + 2; }
  __device__ static constexpr int hi1(int s) { return BITS == 4 ? lo0(s) + 5 : 4 * s + 3; }
};

// (a & m) | c as one LOP3: ptxas splits it into two when m and c are both immediates.
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t m, uint32_t c) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(m), "r"(c));
  return r;
}

// The A registers of step s for one weight row from its words: (lo0, hi0) and (lo1, hi1) as bf16 pairs.
// 4-bit codes become 128 + q (exact: the code under bf16 128's exponent); 8-bit codes q (exact in bf16).
// ONE_LOP: the 4-bit mask-and-exponent as one instruction (kernels of up to 4 token subtiles; with 8 the two mask
// registers caused spills and a 13% slower head launch at 64 tokens when last measured).
template <int BITS, int WPT, bool ONE_LOP = false>
__device__ __forceinline__ void a_pairs(const uint32_t (&w)[WPT], int s, uint32_t& p0, uint32_t& p1) {
  if constexpr (BITS == 4) {
    const uint32_t u = w[s >> 1];
    const int sh = 8 * (s & 1);  // pair p = 2(s&1) sits at shift 4p
    if constexpr (ONE_LOP) {
      p0 = and_or(u >> sh, 0x000F000Fu, 0x43004300u);
      p1 = and_or(u >> (sh + 4), 0x000F000Fu, 0x43004300u);
    } else {
      p0 = code_pair_128(u, sh);
      p1 = code_pair_128(u, sh + 4);
    }
  } else {
    const uint32_t u = w[s];
    const float f0 = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440u)) - 8388608.0f;
    const float f1 = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7441u)) - 8388608.0f;
    const float f2 = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7442u)) - 8388608.0f;
    const float f3 = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7443u)) - 8388608.0f;
    p0 = pack_bf16(f0, f1);
    p1 = pack_bf16(f2, f3);
  }
}

// A scales/biases element's raw bits as a float (SDT: 0 F32, 1 F16, 2 BF16).
template <int SDT>
__device__ __forceinline__ float raw_to_float(uint32_t r) {
  if constexpr (SDT == 0) return __uint_as_float(r);
  else if constexpr (SDT == 1) return f16_bits_to_float(uint16_t(r));
  else return __uint_as_float(r << 16);
}

// One group's raw data for the warp's weight tiles (rows g and g+8 of each): raw scale / bias bits, or (packed:
// 16-bit dtypes, fewer registers in flight) scale | bias << 16 in sa / sb.
template <int WPT, int NW>
struct GroupData {
  uint32_t wa[NW][WPT], wb[NW][WPT];
  uint32_t sa[NW], ba[NW], sb[NW], bb[NW];
};

// Activations in mma form: per (group, token) the B fragments of its four quarters, [4][2S] u32 (bf16 pairs in
// the Slots order), and the group sum of the rounded values (x0 + x1) + (x2 + x3), x_q the quarter's in-order sum.
// One token (the gemv kernel) stages them per block in shared memory; more tokens read them from a prepared buffer.
__host__ __device__ constexpr int frag_words(int group) { return group / 2; }  // u32 per (group, token)
__host__ __device__ constexpr size_t stage_bytes(int group, int64_t groups) {  // one token's
  return size_t(groups) * (size_t(frag_words(group)) * 4 + 4);
}

// The fused norm's weights of one quarter (E = G / 4 floats), as float4s.
template <int G>
struct NormQuarter {
  float4 w[G / 16];
};

// The inputs of one quarter (E of a group's inputs) of one token, as floats: x, or rms_norm(x)·w (bitwise as
// rms_norm_kernel writes it: (x · inv) · w); zeros when !live. SMEM: x is a shared-memory copy. ahead: the quarter's
// norm weights when use_ahead (loaded by norm_ahead), else read here.
template <int G, bool SMEM = false>
__device__ __forceinline__ void load_quarter(const float* x, const float* norm_w, float inv, int64_t col, bool live,
                                             float (&v)[G / 4], const NormQuarter<G>& ahead = {}, bool use_ahead = false) {
  constexpr int E = G / 4;
  if (!live) {
#pragma unroll
    for (int i = 0; i < E; ++i) v[i] = 0.0f;
    return;
  }
  const float4* xp = reinterpret_cast<const float4*>(x + col);  // x in shared memory when SMEM
#pragma unroll
  for (int i = 0; i < E / 4; ++i) {
    const float4 t = SMEM ? xp[i] : __ldg(xp + i);
    v[4 * i] = t.x, v[4 * i + 1] = t.y, v[4 * i + 2] = t.z, v[4 * i + 3] = t.w;
  }
  if (norm_w) {
    const float4* wp = reinterpret_cast<const float4*>(norm_w + col);
#pragma unroll
    for (int i = 0; i < E / 4; ++i) {
      const float4 w = use_ahead ? ahead.w[i] : __ldg(wp + i);
      v[4 * i] = __fmul_rn(__fmul_rn(v[4 * i], inv), w.x);
      v[4 * i + 1] = __fmul_rn(__fmul_rn(v[4 * i + 1], inv), w.y);
      v[4 * i + 2] = __fmul_rn(__fmul_rn(v[4 * i + 2], inv), w.z);
      v[4 * i + 3] = __fmul_rn(__fmul_rn(v[4 * i + 3], inv), w.w);
    }
  }
}

// The fused norm's weights of the thread's first staged item (item threadIdx.x of stage_x), read before pdl_wait
// (weights are never written): otherwise their L2 read follows the x reduction on every launch's critical path.
template <int G>
__device__ __forceinline__ void norm_ahead(const MmaParams& P, NormQuarter<G>& a) {
  if (!P.norm_w || int64_t(threadIdx.x) >= P.ng * 4) return;
  const float4* wp = reinterpret_cast<const float4*>(P.norm_w + int64_t(threadIdx.x) * (G / 4));
#pragma unroll
  for (int i = 0; i < G / 16; ++i) a.w[i] = __ldg(wp + i);
}

// Rounds a quarter to bf16 and writes its fragments to frag[0..2S) (16-byte aligned); returns the group sum,
// reduced over the 4 lanes of the quad (lane tq = quarter tq; every lane of the warp must call this).
template <int BITS, int G>
__device__ __forceinline__ float store_quarter(const float (&v)[G / 4], bool store, uint32_t* frag) {
  constexpr int E = G / 4, S = G / 16;
  using SL = Slots<BITS>;
  float r[E];
  float xs = 0.0f;
#pragma unroll
  for (int i = 0; i < E; ++i) {
    r[i] = __bfloat162float(__float2bfloat16_rn(v[i]));
    xs = __fadd_rn(xs, r[i]);
  }
  xs = __fadd_rn(xs, __shfl_xor_sync(0xffffffffu, xs, 1));
  xs = __fadd_rn(xs, __shfl_xor_sync(0xffffffffu, xs, 2));
  if (store) {
    uint32_t w[2 * S];
#pragma unroll
    for (int s = 0; s < S; ++s) {
      w[2 * s] = pack_bf16(r[SL::lo0(s)], r[SL::hi0(s)]);
      w[2 * s + 1] = pack_bf16(r[SL::lo1(s)], r[SL::hi1(s)]);
    }
    uint4* dst = reinterpret_cast<uint4*>(frag);
#pragma unroll
    for (int i = 0; i < S / 2; ++i) dst[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
  }
  return xs;
}

// Zeroes a warp's accumulators (or partial products) [NW][NT][4].
template <int NW, int NT>
__device__ __forceinline__ void zero_acc(float (&a)[NW][NT][4]) {
#pragma unroll
  for (int w = 0; w < NW; ++w)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) a[w][nt][i] = 0.0f;
}

// Weight w of group d: the A registers of each mma step (afr[s]) and the affine terms of rows g and g + 8 (scale, and
// bias less the code offset: Σ (s·q + b)·x = s·Σ (off + q)·x + (b - off·s)·Σ x). ONE_LOP: see a_pairs.
template <int BITS, int G, int NW, int SDT, bool ONE_LOP>
__device__ __forceinline__ void group_terms(const GroupData<G * BITS / 128, NW>& d, int w, uint32_t (&afr)[G / 16][4],
                                            float& sa, float& sb, float& ba, float& bb) {
  constexpr int WPT = G * BITS / 128;
  constexpr float kOff = BITS == 4 ? 128.0f : 0.0f;
  constexpr bool PACKED = SDT != 0;
#pragma unroll
  for (int s = 0; s < G / 16; ++s) {
    a_pairs<BITS, WPT, ONE_LOP>(d.wa[w], s, afr[s][0], afr[s][2]);
    a_pairs<BITS, WPT, ONE_LOP>(d.wb[w], s, afr[s][1], afr[s][3]);
  }
  sa = raw_to_float<SDT>(PACKED ? d.sa[w] & 0xFFFFu : d.sa[w]);
  sb = raw_to_float<SDT>(PACKED ? d.sb[w] & 0xFFFFu : d.sb[w]);
  ba = __fmaf_rn(-kOff, sa, raw_to_float<SDT>(PACKED ? d.sa[w] >> 16 : d.ba[w]));
  bb = __fmaf_rn(-kOff, sb, raw_to_float<SDT>(PACKED ? d.sb[w] >> 16 : d.bb[w]));
}

// acc[w][nt] += one group of the warp's tiles against NT token subtiles. fg: the group's fragment rows
// [tokens][4][2S] u32, sg: its sums [tokens]; the subtile nt reads rows tr0 + 8·nt + (0..7), clamped to rows
// < rmax when CLAMP (a clamped column is a token past n: its outputs are never stored, and columns never mix;
// without CLAMP every row read exists: the prepared buffer is padded to whole token tiles).
// SDT: the scales dtype (16-bit ones come packed, scale | bias << 16, as load_group_rows leaves them).
template <int BITS, int G, int NT, int NW, int SDT, bool CLAMP = true>
__device__ __forceinline__ void group_mma(const GroupData<G * BITS / 128, NW>& d, const uint32_t* fg,
                                          const float* sg, int64_t tr0, int64_t rmax, int gq, int tq,
                                          float (&acc)[NW][NT][4]) {
  constexpr int S = G / 16;
  uint32_t bfr[NT][2 * S];
  float2 X[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {  // all of the group's activation loads first
    const int64_t row = CLAMP ? min(tr0 + nt * 8 + gq, rmax - 1) : tr0 + nt * 8 + gq;
    const uint4* fp = reinterpret_cast<const uint4*>(fg + (row * 4 + tq) * (2 * S));
#pragma unroll
    for (int i = 0; i < S / 2; ++i) {
      const uint4 v = fp[i];
      bfr[nt][4 * i] = v.x, bfr[nt][4 * i + 1] = v.y, bfr[nt][4 * i + 2] = v.z, bfr[nt][4 * i + 3] = v.w;
    }
    const int64_t c0 = tr0 + nt * 8 + 2 * tq;  // C columns 2t, 2t+1
    X[nt] = CLAMP ? make_float2(sg[min(c0, rmax - 1)], sg[min(c0 + 1, rmax - 1)]) : make_float2(sg[c0], sg[c0 + 1]);
  }
#pragma unroll
  for (int w = 0; w < NW; ++w) {
    uint32_t afr[S][4];
    float sa, sb, ba, bb;
    group_terms<BITS, G, NW, SDT, NT <= 4>(d, w, afr, sa, sb, ba, bb);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int s = 0; s < S; ++s) mma_bf16(p, afr[s], bfr[nt][2 * s], bfr[nt][2 * s + 1]);
      float* a = acc[w][nt];
      a[0] = __fmaf_rn(ba, X[nt].x, __fmaf_rn(sa, p[0], a[0]));
      a[1] = __fmaf_rn(ba, X[nt].y, __fmaf_rn(sa, p[1], a[1]));
      a[2] = __fmaf_rn(bb, X[nt].x, __fmaf_rn(sb, p[2], a[2]));
      a[3] = __fmaf_rn(bb, X[nt].y, __fmaf_rn(sb, p[3], a[3]));
    }
  }
}

// Groups one warp keeps in flight, as registers allow (code words per thread per group: 2 for 4-bit g64).
__host__ __device__ constexpr int reg_units(int bits, int group, bool glu, bool few) {
  const int words = group * bits / 128 * (glu ? 2 : 1);
  return few ? (words <= 2 ? 8 : words <= 4 ? 4 : 2) : (words <= 2 ? 4 : words <= 4 ? 2 : 1);
}
// A warp's place in its launch (tile_at): a 16-row subtile and K part k = groups [ng·k/ks, ng·(k+1)/ks) in order.
struct Tile {
  int warp, lane, gq, tq, kpart;
  int64_t row0, out, ra, rb, gbeg, gend;
  bool rows_live;  // warp-uniform; a dead warp still meets every barrier
};

// The warp's tile: row subtile rsub of block row bt (per row subtiles to a block row; a job's tile0 counts block
// rows), K part kpart of P.ks; J[0] the tile's job (GLU: gate), J[1] up under GLU.
template <bool GLU, int NW>
__device__ __forceinline__ Tile tile_at(const MmaParams& P, int64_t bt, int per, int rsub, int kpart,
                                        const MmaJob* (&J)[NW]) {
  Tile T;
  T.warp = int(threadIdx.x) >> 5;
  T.lane = int(threadIdx.x) & 31;
  T.gq = T.lane >> 2;
  T.tq = T.lane & 3;
  T.kpart = kpart;
  int j = 0;
  if constexpr (!GLU)
    while (j + 1 < P.njobs && bt >= P.job[j + 1].tile0) ++j;
  J[0] = &P.job[j];
  if constexpr (GLU) J[NW - 1] = &P.job[1];
  T.out = J[0]->out;
  T.row0 = ((bt - J[0]->tile0) * per + rsub) * 16;
  T.rows_live = T.row0 < T.out;
  // Rows past the end load a valid row (never written): no branch in the loads.
  T.ra = min(T.row0 + T.gq, T.out - 1);
  T.rb = min(T.row0 + T.gq + 8, T.out - 1);
  T.gbeg = P.ng * kpart / P.ks;
  T.gend = P.ng * (kpart + 1) / P.ks;
  return T;
}

// Block bt of a KW-warp launch: warp w is row subtile w / ks, K part w % ks.
template <bool GLU, int NW, int KW = kWarps>
__device__ __forceinline__ Tile tile_jobs(const MmaParams& P, int64_t bt, const MmaJob* (&J)[NW]) {
  const int warp = int(threadIdx.x) >> 5;
  return tile_at<GLU, NW>(P, bt, KW / P.ks, warp / P.ks, warp % P.ks, J);
}

// A one-row launch's epilogue inputs that the launch just before it does not write: the bias of rows g and g + 8,
// for a RoPE epilogue the step's cos / sin of the thread's pair and token 0's KV slot (uploaded before the step's first
// kernel), and a settled accumulating job's y (MatmulJob::y_settled). The bulk kernel reads them before pdl_wait, so
// the end of its critical path waits on no load; only the lanes that write outputs at n = 1 (quarter 0 of a part-0
// warp) read them.
struct EpiIn {
  float ba = 0.0f, bb = 0.0f, cs = 0.0f, sn = 0.0f;
  float ya = 0.0f, yb = 0.0f;
  int32_t slot = -1;
};

// RoPE pair index j (within its head) of tile row r, and the head h: q/k rows in rope_pair_rows order.
__device__ __forceinline__ int rope_pair(const MmaParams& P, int64_t r, int64_t& h) {
  h = r / P.rope_hd;
  const int64_t w = r - h * P.rope_hd;
  return int((w >> 4) * 8 + (w & 7));
}

__device__ __forceinline__ EpiIn epilogue_inputs(const MmaParams& P, const Tile& T, const MmaJob& Y) {
  EpiIn e;
  const int64_t r = T.row0 + T.gq;
  if (T.kpart != 0 || T.tq != 0 || r >= T.out) return e;
  if (Y.bias) {
    e.ba = __ldg(Y.bias + r);
    e.bb = r + 8 < T.out ? __ldg(Y.bias + r + 8) : 0.0f;
  }
  if (Y.rope == 1 || Y.rope == 2) {
    int64_t h;
    const int j = rope_pair(P, r, h);
    e.cs = __ldg(P.rope_cos + j);
    e.sn = __ldg(P.rope_sin + j);
  }
  if (Y.rope == 2 || Y.rope == 3) e.slot = __ldg(P.rope_slot);
  if (Y.accumulate == 2) {
    e.ya = Y.y[r];
    e.yb = r + 8 < T.out ? Y.y[r + 8] : 0.0f;
  }
  return e;
}

// A RoPE epilogue's outputs of one thread: rows (g, g + 8) of its tile, tokens tA and tA + 1 (v: c0, c1 row g; c2,
// c3 row g + 8). q/k rows are in rope_pair_rows order, so the two rows are pair j of a head: rotated (after the
// bias, as rope_kv_write rotates the stored q/k) and written at rows (j, j + half) of the head; v rows as they are.
// Queries go to token rows of y, keys and values to KV pool rows slot[t]. PRE: n = 1 with the inputs in e.
template <bool PRE>
__device__ __forceinline__ void rope_epilogue(const MmaParams& P, const Tile& T, const MmaJob& Y, int64_t tA,
                                              const float (&v)[4], const EpiIn& e) {
  const int64_t r = T.row0 + T.gq;
  if (r >= T.out) return;
  const int half = P.rope_hd / 2;
  int64_t h;
  const int j = rope_pair(P, r, h);
  const float ba = PRE ? e.ba : Y.bias ? __ldg(Y.bias + r) : 0.0f;
  const float bb = PRE ? e.bb : Y.bias ? __ldg(Y.bias + r + 8) : 0.0f;
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const int64_t t = tA + c;
    if (t >= P.n) continue;
    const float a = Y.bias ? __fadd_rn(v[c], ba) : v[c], b = Y.bias ? __fadd_rn(v[2 + c], bb) : v[2 + c];
    const int64_t row = Y.rope == 1 ? t : PRE ? int64_t(e.slot) : int64_t(P.rope_slot[t]);
    if (row < 0) continue;
    // Queries are f32 rows of y; keys and values go into the pool as its type (kv_write's conversion).
    auto put = [&](int64_t col, float x) {
      const int64_t i = row * Y.ldy + col;
      if (Y.rope == 1 || P.rope_kv == KvDtype::F32) Y.y[i] = x;
      else if (P.rope_kv == KvDtype::F16) KvF16::store(Y.y, i, x);
      else KvBF16::store(Y.y, i, x);
    };
    if (Y.rope == 3) {
      put(r, a);
      put(r + 8, b);
    } else {
      const float cs = PRE ? e.cs : P.rope_cos[t * half + j], sn = PRE ? e.sn : P.rope_sin[t * half + j];
      const float2 o = rotate(a, b, cs, sn);
      put(h * P.rope_hd + j, o.x);
      put(h * P.rope_hd + j + half, o.y);
    }
  }
}

// Writes one token subtile's summed outputs of the thread (rows g and g + 8 of its tile, tokens tA and tA + 1): the bias,
// the RoPE epilogue, accumulation into y or the GLU product. PRE (the bulk kernel, n = 1): epi holds the inputs.
template <int NW, bool GLU, bool PRE>
__device__ __forceinline__ void store_subtile(const MmaParams& P, const Tile& T, const MmaJob& Y, int64_t tA,
                                              const float (&v)[NW][4], const EpiIn& epi) {
  if constexpr (!GLU) {
    if (Y.rope) {
      rope_epilogue<PRE>(P, T, Y, tA, v[0], epi);
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t r = i < 2 ? T.row0 + T.gq : T.row0 + T.gq + 8, t = tA + (i & 1);
    if (r >= T.out || t >= P.n) continue;
    float* yp = Y.y + t * Y.ldy + r;
    if constexpr (GLU) {
      *yp = __fmul_rn(glu_act(v[0][i], P.act), v[NW - 1][i]);
    } else {
      float val = v[0][i];
      if (Y.bias) val = __fadd_rn(val, PRE ? (i == 0 ? epi.ba : epi.bb) : __ldg(Y.bias + r));
      // A settled job's y was read before pdl_wait (one row: only token 0, i = 0 and 2, is written).
      const float base = PRE && Y.accumulate == 2 ? (i == 0 ? epi.ya : epi.yb) : Y.accumulate ? *yp : 0.0f;
      *yp = Y.accumulate ? __fadd_rn(base, val) : val;
    }
  }
}

// The sum of the K parts part[0..ks) as the fixed pairwise tree every kernel uses (ks a power of two <= kWarps).
__device__ __forceinline__ float pairwise_parts(float (&part)[kWarps], int ks) {
#pragma unroll
  for (int step = 1; step < kWarps; step *= 2)
#pragma unroll
    for (int k = 0; k + step < kWarps; k += 2 * step)
      if (k + step < ks) part[k] = __fadd_rn(part[k], part[k + step]);
  return part[0];
}

// Adds the K parts (fixed pairwise tree, by the part-0 warp) and writes token subtile nt's outputs. PRE (the bulk
// kernel, n = 1): epi holds the epilogue inputs, read before pdl_wait.
template <int NT, int NW, bool GLU, bool PRE = false>
__device__ __forceinline__ void epilogue(const MmaParams& P, const Tile& T, const MmaJob& Y, int64_t tok0,
                                         const float (&acc)[NW][NT][4], float (*red)[NW][32][4],
                                         const EpiIn& epi = EpiIn{}) {
  const int ks = P.ks;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    float v[NW][4];
#pragma unroll
    for (int w = 0; w < NW; ++w)
#pragma unroll
      for (int i = 0; i < 4; ++i) v[w][i] = acc[w][nt][i];
    if (ks > 1) {
      __syncthreads();  // the previous subtile's readers are done with red
#pragma unroll
      for (int w = 0; w < NW; ++w)
#pragma unroll
        for (int i = 0; i < 4; ++i) red[T.warp][w][T.lane][i] = v[w][i];
      __syncthreads();
      if (T.kpart != 0) continue;
      float part[kWarps];
#pragma unroll
      for (int w = 0; w < NW; ++w)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int k = 0; k < kWarps; ++k) part[k] = k < ks ? red[T.warp + k][w][T.lane][i] : 0.0f;
          v[w][i] = pairwise_parts(part, ks);
        }
    }
    store_subtile<NW, GLU, PRE>(P, T, Y, tok0 + nt * 8 + 2 * T.tq, v, epi);
  }
}

// The raw scale/bias words of a group, its dtype a constant (no per-load switch).
template <int SDT>
__device__ __forceinline__ uint32_t load_raw_t(const void* p, int32_t i) {
  if constexpr (SDT == 0) return __ldg(static_cast<const uint32_t*>(p) + i);
  else return uint32_t(__ldg(static_cast<const unsigned short*>(p) + i));
}

// One thread's row pointers: codes of rows ra / rb at its quarter, scale indices. Tiled weights use ca (the lane's a
// and b words of group 0) and sc (its scale/bias quadruple of group 0, tile_scales) only.
template <int NW>
struct RowPtrs {
  const uint32_t* ca[NW];
  const uint32_t* cb[NW];  // row-major
  const void* sc[NW];
  const void* bi[NW];      // row-major
  int32_t sia, sib;        // row-major: scale/bias element offsets of rows ra / rb
  bool tiled;
};

// Row-major weights' group g (tiled ones: GroupCursor).
template <int BITS, int G, int NW, int SDT>
__device__ __forceinline__ void load_group_rows(const RowPtrs<NW>& R, int32_t g, GroupData<G * BITS / 128, NW>& d) {
  constexpr int WPT = G * BITS / 128;
#pragma unroll
  for (int w = 0; w < NW; ++w) {
    load_words<WPT>(R.ca[w] + g * (G * BITS / 32), d.wa[w]);
    load_words<WPT>(R.cb[w] + g * (G * BITS / 32), d.wb[w]);
    const uint32_t sa = load_raw_t<SDT>(R.sc[w], R.sia + g), sb = load_raw_t<SDT>(R.sc[w], R.sib + g);
    const uint32_t ba = load_raw_t<SDT>(R.bi[w], R.sia + g), bb = load_raw_t<SDT>(R.bi[w], R.sib + g);
    if constexpr (SDT == 0) {
      d.sa[w] = sa, d.sb[w] = sb, d.ba[w] = ba, d.bb[w] = bb;
    } else {
      d.sa[w] = __byte_perm(sa, ba, 0x5410), d.sb[w] = __byte_perm(sb, bb, 0x5410);
    }
  }
}

// The thread's row pointers of tile T (rows ra / rb of each job at its quarter). Tiled codes (one layout for every job
// of a launch): the 16-row tile's group g holds lane L's a and b words at ((tile·ng + g)·32 + L)·2·WPT, so a warp reads
// a group as 32·2·WPT contiguous words (the padded rows of a last partial tile are loaded, never stored).
template <int BITS, int G, int NW>
__device__ __forceinline__ RowPtrs<NW> row_ptrs(const MmaParams& P, const Tile& T, const MmaJob* const (&J)[NW]) {
  constexpr int WPT = G * BITS / 128;
  RowPtrs<NW> R{};
  const bool tiled = J[0]->tiled != 0;
  R.tiled = tiled;
#pragma unroll
  for (int w = 0; w < NW; ++w) {
    if (tiled) {
      R.ca[w] = J[w]->data + ((T.row0 >> 4) * P.ng * 32 + T.lane) * (2 * WPT);
      // tile_scales: 32 elements per (tile, group), this thread's four at 4·gq
      R.sc[w] = static_cast<const char*>(J[w]->scales) + ((T.row0 >> 4) * P.ng * 8 + T.gq) * 4 * (P.sdt == 0 ? 4 : 2);
    } else {
      R.ca[w] = J[w]->data + T.ra * P.wpr + T.tq * WPT;
      R.cb[w] = J[w]->data + T.rb * P.wpr + T.tq * WPT;
      R.sc[w] = J[w]->scales;
      R.bi[w] = J[w]->biases;
    }
  }
  R.sia = int32_t(T.ra * P.ng);
  R.sib = int32_t(T.rb * P.ng);
  return R;
}

// Bytes from one group's tiled scale/bias quadruples to the next (tile_scales: 32 elements per tile and group).
template <int SDT>
constexpr int kQuadGroupBytes = 32 * (SDT == 0 ? 4 : 2);

// A thread's tiled scale/bias quadruple of one group and weight w (s(a), b(a), s(b), b(b)) into d: f32 as the four raw
// words, 16-bit dtypes as two already packed words (scale | bias << 16), as group_mma takes them. SMEM: q is in shared
// memory (the bulk kernel's copy), else global.
template <int SDT, bool SMEM, int WPT, int NW>
__device__ __forceinline__ void take_quad(const char* q, GroupData<WPT, NW>& d, int w) {
  using V = std::conditional_t<SDT == 0, uint4, uint2>;
  const V* p = reinterpret_cast<const V*>(q);
  V v;
  if constexpr (SMEM) v = *p;
  else v = __ldg(p);
  if constexpr (SDT == 0) d.sa[w] = v.x, d.ba[w] = v.y, d.sb[w] = v.z, d.bb[w] = v.w;
  else d.sa[w] = v.x, d.sb[w] = v.y;
}

// A thread's walk over its groups' codes and scales: load(u, d) reads the group u after the cursor's position,
// advance(k) moves it k groups on. Tiled weights (the fast path) keep pointers that advance by whole batches, so
// every load is a pointer plus a constant (no per-group index arithmetic) and a lane's a/b words are one load;
// row-major ones index from the tile's row pointers.
template <int BITS, int G, int NW, int SDT, bool TILED>
struct GroupCursor {
  static constexpr int WPT = G * BITS / 128;
  RowPtrs<NW> R;
  int32_t g;  // row-major: the group at the cursor (tiled: R.ca / R.sc already point there)

  __device__ __forceinline__ GroupCursor(const RowPtrs<NW>& r, int64_t g0) : R(r), g(int32_t(g0)) {
    if constexpr (TILED) advance(g);
  }
  __device__ __forceinline__ void load(int u, GroupData<WPT, NW>& d) const {
    if constexpr (TILED) {
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        const uint32_t* p = R.ca[w] + u * (64 * WPT);
        if constexpr (WPT <= 2) {  // the lane's a and b words are adjacent: one load
          uint32_t ab[2 * WPT];
          load_words<2 * WPT>(p, ab);
#pragma unroll
          for (int i = 0; i < WPT; ++i) d.wa[w][i] = ab[i], d.wb[w][i] = ab[WPT + i];
        } else {
          load_words<WPT>(p, d.wa[w]);
          load_words<WPT>(p + WPT, d.wb[w]);
        }
        take_quad<SDT, false>(static_cast<const char*>(R.sc[w]) + u * kQuadGroupBytes<SDT>, d, w);
      }
    } else {
      load_group_rows<BITS, G, NW, SDT>(R, g + u, d);
    }
  }
  __device__ __forceinline__ void advance(int k) {
    if constexpr (TILED) {
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        R.ca[w] += k * (64 * WPT);
        R.sc[w] = static_cast<const char*>(R.sc[w]) + k * kQuadGroupBytes<SDT>;
      }
    } else {
      g += k;
    }
  }
};

// Loads the first MAXU groups of [gbeg, gend) into cur and leaves C at gbeg + MAXU (the kernels issue these before
// pdl_wait: no kernel writes weights).
template <int MAXU, class Cursor, class Data>
__device__ __forceinline__ void first_groups(Cursor& C, int32_t gbeg, int32_t gend, Data (&cur)[MAXU]) {
#pragma unroll
  for (int u = 0; u < MAXU; ++u)
    if (gbeg + u < gend) C.load(u, cur[u]);
  C.advance(MAXU);
}

// Walks the tile's groups [gbeg, gend) in order with MAXU groups of codes in flight (cur, loaded by first_groups,
// C at gbeg + MAXU): use(cur[u], g) for each, then cur[u] is refilled with group g + MAXU.
template <int MAXU, class Cursor, class Data, class Use>
__device__ __forceinline__ void walk_groups(Cursor& C, int32_t gbeg, int32_t gend, Data (&cur)[MAXU], Use&& use) {
  int32_t g0 = gbeg;
  // Whole batches with a whole batch after them: no per-group conditions, so the compiler can interleave the
  // batch's independent mma chains and hoist its activation reads.
  for (; g0 + 2 * MAXU <= gend; g0 += MAXU) {
#pragma unroll
    for (int u = 0; u < MAXU; ++u) {
      use(cur[u], g0 + u);
      C.load(u, cur[u]);
    }
    C.advance(MAXU);
  }
  for (; g0 < gend; g0 += MAXU) {
#pragma unroll
    for (int u = 0; u < MAXU; ++u) {
      const int32_t g = g0 + u;
      if (g < gend) {
        use(cur[u], g);
        if (g + MAXU < gend) C.load(u, cur[u]);
      }
    }
    C.advance(MAXU);
  }
}

// The group walk of a thread's tile with the cursor its layout takes (tiled or row-major; one per launch).
template <int BITS, int G, int NW, int SDT, int MAXU, class Before, class Use>
__device__ __forceinline__ void tile_walk(const RowPtrs<NW>& R, const Tile& T, Before&& before, Use&& use) {
  constexpr int WPT = G * BITS / 128;
  auto run = [&](auto tiled) {
    GroupCursor<BITS, G, NW, SDT, decltype(tiled)::value> C(R, T.gbeg);
    GroupData<WPT, NW> cur[MAXU];
    if (T.rows_live) first_groups<MAXU>(C, int32_t(T.gbeg), int32_t(T.gend), cur);
    before();
    if (T.rows_live) walk_groups<MAXU>(C, int32_t(T.gbeg), int32_t(T.gend), cur, use);
  };
  if (R.tiled) run(std::true_type{});
  else run(std::false_type{});
}

// Bytes of the gemv kernel's shared memory: with a fused norm x as f32 [ng·G] first, then every group's fragments
// and sum.
__host__ __device__ constexpr size_t gemv_smem(int group, int64_t ng, bool norm) {
  return (norm ? size_t(ng) * size_t(group) * 4 : 0) + stage_bytes(group, ng);
}

// x [K] (f32, shared memory) as the merge of a token's attention partials in `parts` > 1 partitions (a, whose heads are
// 8k wide): each thread merges float4 columns of one head (up to 8 partitions' reads in one L2 wait).
template <int KT>
__device__ __forceinline__ void merge_into_x(const AttnPartials& a, float4* xf4, int64_t K, int parts) {
  const int hd4 = a.head_dim / 4;
  const float2* ml = reinterpret_cast<const float2*>(a.ml);
  const float4* o = reinterpret_cast<const float4*>(a.o);
  auto merge = [&](auto nc, int64_t c) {  // nc columns from c, in one head
    constexpr int NC = decltype(nc)::value;
    const int64_t h = c / hd4;
    float4 v[NC];
    merge_columns4<NC>(ml + h * kAttnMaxParts, o + h * kAttnMaxParts * hd4, hd4, int(c - h * hd4), parts, v);
#pragma unroll
    for (int j = 0; j < NC; ++j) xf4[c + j] = v[j];
  };
  // More columns than threads: pairs (hd4 is even), one L2 wait for both; else one column per thread, the shortest
  // walk. H200 at batch 1, deferring vs not (same run): 3B shape (512 columns, pairs) +1.9%, 0.5B shape (224 columns,
  // single) +2.7%; pairs for both measured 3B +1.7% and 0.5B +0.1%, single columns for both +0.3% and +2.3%.
  if (K / 4 > KT)
    for (int64_t c = 2 * threadIdx.x; c < K / 4; c += 2 * KT) merge(std::integral_constant<int, 2>{}, c);
  else
    for (int64_t c = threadIdx.x; c < K / 4; c += KT) merge(std::integral_constant<int, 1>{}, c);
}

// The gemv kernels' activations: all of x (or rms_norm(x)·w) converted once per block into shared memory at smem
// (gemv_smem bytes): frag [ng][4][2S] u32, sums [ng]. Ends with a block barrier (every thread must call it).
// KT: the block's threads (kThreads, or fewer for the bulk kernel's 4-warp GLU blocks). MERGE with merge_parts > 1:
// x is the merge of P.am's attention partials in that many partitions, staged through x [K] as a normed x is.
template <int BITS, int G, int A, int KT = kThreads, bool MERGE = false>
__device__ __forceinline__ void stage_x(const MmaParams& P, uint4* smem, uint32_t*& frag, float*& sums,
                                        const NormQuarter<G>& ahead = {}, bool use_ahead = false, int merge_parts = 0) {
  constexpr int E = G / 4;
  const int64_t ng = P.ng, K = ng * G;
  const bool merged = MERGE && merge_parts > 1;
  float* xf = reinterpret_cast<float*>(smem);                                  // [K] with a norm or merge, else empty
  frag = reinterpret_cast<uint32_t*>(xf + (P.norm_w || merged ? K : 0));      // [ng][4][2S]
  sums = reinterpret_cast<float*>(frag + size_t(ng) * frag_words(G));         // [ng]
  float inv = 1.0f;
  const int64_t items = ng * 4;
  auto stage = [&](auto smem_src) {
    constexpr bool SMEM = decltype(smem_src)::value;
    // From global memory a thread loads A items before converting any: a long x (the down projection's) waits on
    // L2 once per A items instead of once per item.
    constexpr int NA = SMEM ? 1 : A;
    for (int64_t base = 0; base < items; base += NA * KT) {  // uniform trip count: the quads' shuffles
      float v[NA][E];
#pragma unroll
      for (int a = 0; a < NA; ++a) {
        const int64_t it = base + a * KT + threadIdx.x;
        // The first pass's first item is threadIdx.x: its norm weights may have been read ahead (norm_ahead).
        load_quarter<G, SMEM>(SMEM ? xf : P.x, P.norm_w, inv, it * E, it < items, v[a], ahead,
                              use_ahead && base == 0 && a == 0);
      }
#pragma unroll
      for (int a = 0; a < NA; ++a) {
        const int64_t it = base + a * KT + threadIdx.x;
        const bool live = it < items;
        const float xs = store_quarter<BITS, G>(v[a], live, frag + size_t(it) * frag_words(G) / 4);
        if (live && (it & 3) == 0) sums[it >> 2] = xs;
      }
    }
  };
  if (P.norm_w) {
    // One read of x: each thread's strided elements (rms_norm_kernel's order, so 1/rms is bitwise the same) go to
    // shared memory as they are summed; the staging then reads them there. NL·V loads go out before any is used, so
    // x of up to NL·kNormThreads elements waits on L2 once. With fewer threads (KT < kNormThreads) each sums V of
    // rms_norm_kernel's threads: element i belongs to thread i % kNormThreads, summed in order of i.
    constexpr int NL = 8, V = kNormThreads / KT;
    double ss[V];
#pragma unroll
    for (int w = 0; w < V; ++w) ss[w] = 0;
    for (int64_t i0 = threadIdx.x; i0 < K; i0 += NL * kNormThreads) {
      float v[NL][V];
#pragma unroll
      for (int u = 0; u < NL; ++u)
#pragma unroll
        for (int w = 0; w < V; ++w) {
          const int64_t i = i0 + int64_t(u) * kNormThreads + w * KT;
          v[u][w] = i < K ? P.x[i] : 0.0f;
        }
#pragma unroll
      for (int u = 0; u < NL; ++u)
#pragma unroll
        for (int w = 0; w < V; ++w) {
          const int64_t i = i0 + int64_t(u) * kNormThreads + w * KT;
          if (i < K) {
            xf[i] = v[u][w];
            ss[w] = fma(double(v[u][w]), double(v[u][w]), ss[w]);
          }
        }
    }
    inv = row_inv_rms_parts<KT, V>(ss, K, P.eps);  // its barriers also publish xf
    stage(std::true_type{});
  } else if (merged) {
    merge_into_x<KT>(P.am, reinterpret_cast<float4*>(xf), K, merge_parts);
    __syncthreads();
    stage(std::true_type{});
  } else {
    stage(std::false_type{});
  }
  __syncthreads();
}

// n = 1 (decode at batch 1). Block b = one row tile of kWarps / ks warp tiles. Each warp keeps MAXU groups of
// codes in flight (a ring: a group's registers are refilled with the group MAXU ahead as soon as it is used).
// The first loads go out before pdl_wait (weights are never written), so they overlap the previous kernel; then
// the whole of x (or rms_norm(x)·w) is converted once into shared memory and the warps run without barriers.
template <int BITS, int G, bool GLU, int SDT>
// Two blocks per SM (128 registers): three (80 registers, half the codes in flight) measured no faster on the H200.
__global__ void __launch_bounds__(kThreads, 2) mma_gemv_kernel(const __grid_constant__ MmaParams P) {
  constexpr int NW = GLU ? 2 : 1, WPT = G * BITS / 128;
  constexpr int MAXU = reg_units(BITS, G, GLU, true);
  extern __shared__ uint4 smem4[];
  __shared__ float red[kWarps][NW][32][4];
  const MmaJob* J[NW];
  const Tile T = tile_jobs<GLU>(P, int64_t(blockIdx.x), J);
  const RowPtrs<NW> R = row_ptrs<BITS, G, NW>(P, T, J);
  uint32_t* frag = nullptr;
  float* sums = nullptr;
  float acc[NW][1][4];
  zero_acc(acc);
  tile_walk<BITS, G, NW, SDT, MAXU>(
      R, T,
      [&] {
        pdl_wait();
        pdl_trigger();
        stage_x<BITS, G, 1>(P, smem4, frag, sums);  // one item at a time: loading ahead here is unmeasured
      },
      [&](const GroupData<WPT, NW>& d, int32_t g) {
        group_mma<BITS, G, 1, NW, SDT>(d, frag + g * frag_words(G), sums + g, 0, 1, T.gq, T.tq, acc);
      });
  epilogue<1, NW, GLU>(P, T, *J[0], 0, acc, red);  // y read here: holding it across the walk cost spills
}

// The bulk kernel's ring: R slots per warp of C groups each. A slot holds about 2 KB of codes and a warp has 4 slots;
// GLU slots hold about 4 KB, as many fewer as keeps the same groups in flight (2 where a group is at most 2 KB): the
// same bytes in half the copies (a copy per weight and slot). A one-token GLU launch issues its multiprocessors' many
// small copies fastest that way (H200, 3B shape at batch 1: +2%, same-run A/B); 4 KB slots for every launch cost the
// 0.5B shape 1.5%.
__host__ __device__ constexpr int bulk_group_bytes(int bits, int group, bool glu) {
  return 32 * 2 * (group * bits / 128) * 4 * (glu ? 2 : 1);  // one group of the warp's tile(s)
}
__host__ __device__ constexpr int bulk_chunk(int bits, int group, bool glu) {
  const int bytes = bulk_group_bytes(bits, group, glu), target = glu ? 4096 : 2048;
  return bytes >= target ? 1 : target / bytes;
}
__host__ __device__ constexpr int bulk_slots(int bits, int group, bool glu) {
  const int bytes = bulk_group_bytes(bits, group, glu), ring = 4 * (bytes >= 2048 ? 1 : 2048 / bytes);  // groups
  return ring / bulk_chunk(bits, group, glu);
}
static_assert(bulk_slots(4, 64, true) == 2 && bulk_chunk(4, 64, true) == 4, "4-bit g64 GLU: two 4 KB slots");
static_assert(bulk_slots(4, 64, false) == 4 && bulk_chunk(4, 64, false) == 4, "4-bit g64: four 2 KB slots");
static_assert(bulk_slots(8, 128, true) == 4 && bulk_chunk(8, 128, true) == 1, "a 4 KB GLU group: four one-group slots");

// The bulk kernel's shared memory after the staged activations (gemv_smem bytes, rounded to 128): the barriers
// (kWarps·R ring slots, then one per tile of the block), each tile's scale/bias quadruples ([NW][ng][8][4] of the
// scales dtype, tile_scales' order), then each warp's ring of R slots, a slot [NW][C groups][32 lanes][2·WPT] u32
// (tile_codes' order).
struct BulkLayout {
  size_t bars, scales, ring, total;
  size_t tile_bytes;   // one tile's scales and biases of one weight: ng · 32 elements
  size_t tile_stride;  // tile_bytes rounded to 16
  size_t group_bytes;  // one 16-row tile's codes of one group of one weight: 32 · 2·WPT u32
  size_t slot_bytes;   // NW · C · group_bytes
};
__host__ __device__ constexpr size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
__host__ __device__ inline BulkLayout bulk_layout(int bits, int group, int64_t ng, bool norm, bool glu, int ks, int esz,
                                                  int kw = kWarps) {
  BulkLayout L{};
  const int nw = glu ? 2 : 1, tiles = kw / ks;
  L.tile_bytes = size_t(32) * size_t(ng) * size_t(esz);
  L.tile_stride = round_up(L.tile_bytes, 16);
  L.group_bytes = size_t(32) * 2 * size_t(group * bits / 128) * 4;
  L.slot_bytes = size_t(nw) * size_t(bulk_chunk(bits, group, glu)) * L.group_bytes;
  L.bars = round_up(gemv_smem(group, ng, norm), 128);
  L.scales = round_up(L.bars + sizeof(uint64_t) * size_t(kw * bulk_slots(bits, group, glu) + tiles), 128);
  L.ring = round_up(L.scales + size_t(tiles) * size_t(nw) * L.tile_stride, 128);
  L.total = L.ring + size_t(kw) * bulk_slots(bits, group, glu) * L.slot_bytes;
  return L;
}

// n = 1 on sm_90 with tiled weights (codes and scales): the gemv kernel's blocks, warps and arithmetic (bitwise the
// same outputs), but the codes and scales reach shared memory through bulk copies (bulk_copy.cuh). Each warp's lane 0
// streams the warp's K part through a ring of R slots of C groups, and lane 0 of each tile's part-0 warp copies the
// tile's scales and biases; the first R chunks and the scales go out before pdl_wait, so up to R·C groups per warp
// arrive while the previous kernel finishes. A slot is refilled as soon as its warp has read it.
// KW: warps per block (kWarps; 4 for a GLU launch whose kWarps-warp blocks outnumber the multiprocessors). MERGE: x is
// the merge of P.am's attention partials (its own instance, so the others keep their registers).
template <int BITS, int G, bool GLU, int SDT, int KW, bool MERGE = false>
__global__ void __launch_bounds__(KW * 32, 16 / KW) mma_bulk_kernel(const __grid_constant__ MmaParams P) {
  constexpr int NW = GLU ? 2 : 1, WPT = G * BITS / 128, R = bulk_slots(BITS, G, GLU), C = bulk_chunk(BITS, G, GLU);
  constexpr int ESZ = SDT == 0 ? 4 : 2;
  constexpr uint32_t GB = 32 * 2 * WPT * 4;  // bytes of one group of one weight's tile
  extern __shared__ uint4 smem4[];
  __shared__ float red[KW][NW][32][4];
  TL_MARKS
  TL_MARK(0);
  const MmaJob* J[NW];
  const Tile T = tile_jobs<GLU, NW, KW>(P, int64_t(blockIdx.x), J);
  const int ng = int(P.ng), rsub = T.warp / P.ks, gbeg = int(T.gbeg), gend = int(T.gend);
  const BulkLayout L = bulk_layout(BITS, G, ng, P.norm_w != nullptr || MERGE, GLU, P.ks, ESZ, KW);
  char* base = reinterpret_cast<char*>(smem4);
  uint64_t* bars = reinterpret_cast<uint64_t*>(base + L.bars);  // [KW][R], then [tiles]
  uint64_t* ring_bar = bars + T.warp * R;
  uint64_t* tile_bar = bars + KW * R + rsub;
  const uint32_t tstride = uint32_t(L.tile_stride);
  char* tscales = base + L.scales + size_t(rsub) * NW * tstride;  // [NW][ng][8][4]
  char* ring = base + L.ring + size_t(T.warp) * R * (NW * C * GB);
  const int nch = (gend - gbeg + C - 1) / C;
  const bool issuer = T.lane == 0 && T.rows_live;
  // Chunk c (groups gbeg + c·C ...) of every weight into slot c % R.
  auto issue = [&](int c) {
    const int g0 = gbeg + c * C, cnt = min(C, gend - g0);
    uint64_t* bar = ring_bar + (c % R);
    char* slot = ring + (c % R) * (NW * C * GB);
    mbar_expect_tx(bar, uint32_t(cnt) * GB * NW);
#pragma unroll
    for (int w = 0; w < NW; ++w)
      bulk_copy(slot + w * C * GB, J[w]->data + ((T.row0 >> 4) * ng + g0) * (64 * WPT), uint32_t(cnt) * GB, bar);
  };
  if (issuer) {
    for (int i = 0; i < R; ++i) mbar_init(ring_bar + i);
    if (T.kpart == 0) mbar_init(tile_bar);
    mbar_init_fence();
    if (T.kpart == 0) {
      mbar_expect_tx(tile_bar, uint32_t(L.tile_bytes * NW));
      const size_t off = size_t(T.row0 >> 4) * L.tile_bytes;
#pragma unroll
      for (int w = 0; w < NW; ++w)
        bulk_copy(tscales + w * tstride, static_cast<const char*>(J[w]->scales) + off, uint32_t(L.tile_bytes), tile_bar);
    }
    for (int c = 0; c < min(R, nch); ++c) issue(c);
  }
  const EpiIn epi = GLU ? EpiIn{} : epilogue_inputs(P, T, *J[0]);
  NormQuarter<G> ahead{};
  norm_ahead<G>(P, ahead);
  pdl_wait();
  pdl_trigger();
  TL_MARK(1);

  uint32_t* frag = nullptr;
  float* sums = nullptr;
  // Its closing barrier also publishes the barrier initializations.
  stage_x<BITS, G, 2, KW * 32, MERGE>(P, smem4, frag, sums, ahead, P.norm_w != nullptr,
                                      MERGE ? deferred_parts(P.am) : 0);
  TL_MARK(2);

  float acc[NW][1][4];
  zero_acc(acc);
  if (T.rows_live) {
    mbar_wait(tile_bar, 0);
    // This thread's scale/bias quadruple (rows gq and gq + 8 of the tile) of group 0, per weight at w·tstride.
    const char* sq = tscales + T.gq * 4 * ESZ;
    for (int c = 0; c < nch; ++c) {
      mbar_wait(ring_bar + (c % R), uint32_t((c / R) & 1));
      const int g0 = gbeg + c * C, cnt = min(C, gend - g0);
      const char* slot = ring + (c % R) * (NW * C * GB) + T.lane * (2 * WPT * 4);
      // Group u of the slot into acc (the groups' mma chains are independent; only acc orders them).
      auto take = [&](int u) {
        const int g = g0 + u;
        GroupData<WPT, NW> d;
#pragma unroll
        for (int w = 0; w < NW; ++w) {
          const uint32_t* src = reinterpret_cast<const uint32_t*>(slot + (w * C + u) * GB);
          if constexpr (WPT == 1) {
            const uint2 v = *reinterpret_cast<const uint2*>(src);
            d.wa[w][0] = v.x, d.wb[w][0] = v.y;
          } else {
#pragma unroll
            for (int i = 0; i < 2 * WPT; i += 4) {
              const uint4 v = *reinterpret_cast<const uint4*>(src + i);
              const uint32_t q[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
              for (int k = 0; k < 4; ++k) {
                if (i + k < WPT) d.wa[w][i + k] = q[k];
                else d.wb[w][i + k - WPT] = q[k];
              }
            }
          }
          take_quad<SDT, true>(sq + w * int(tstride) + g * kQuadGroupBytes<SDT>, d, w);
        }
        group_mma<BITS, G, 1, NW, SDT>(d, frag + g * frag_words(G), sums + g, 0, 1, T.gq, T.tq, acc);
      };
      // A whole slot has no per-group branch, so the compiler can interleave its groups' mma chains (one chain per
      // basic block left each group's loads, unpacking and four dependent mma steps to run back to back).
      if (cnt == C) {
#pragma unroll
        for (int u = 0; u < C; ++u) take(u);
      } else {
#pragma unroll
        for (int u = 0; u < C; ++u)
          if (u < cnt) take(u);
      }
      __syncwarp();  // every lane has read the slot
      if (issuer && c + R < nch) {
        fence_proxy_async();
        issue(c + R);
      }
    }
  }
  TL_MARK(3);
  epilogue<1, NW, GLU, true>(P, T, *J[0], 0, acc, red, epi);
  TL_MARK(4);
  TL_FLUSH(GLU ? 2 : 1, P.ng);
}

// Prepares x [n, ldx] (optionally rms_norm(x)·w) in mma form for the direct kernel: one block per token,
// frag [ng][npad][4][2S] u32 and sums [ng][npad]. Rows of tokens past n are never read into kept outputs.
template <int BITS, int G>
__global__ void __launch_bounds__(kThreads) prep_kernel(const float* x, int64_t ldx, int64_t ng, int64_t npad,
                                                        const float* norm_w, float eps, uint32_t* frag, float* sums) {
  constexpr int E = G / 4;
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const float* xr = x + t * ldx;
  const float inv = norm_w ? row_inv_rms_of(xr, ng * G, eps) : 1.0f;
  const int64_t items = ng * 4;
  for (int64_t base = 0; base < items; base += kThreads) {  // uniform trip count: the quads' shuffles
    const int64_t it = base + threadIdx.x;
    const bool live = it < items;
    const int64_t g = it >> 2;
    const int tq = int(it & 3);
    float v[E];
    load_quarter<G>(xr, norm_w, inv, g * G + tq * E, live, v);
    const float xs = store_quarter<BITS, G>(v, live, frag + ((g * npad + t) * 4 + tq) * frag_words(G) / 4);
    if (live && tq == 0) sums[g * npad + t] = xs;
  }
}

// n > 1: NT token subtiles per block, activations read from the prepared buffer (padded to whole token tiles).
// Block b: row tile b / ntt, token tile b % ntt. Each warp walks its K part with MAXU groups of codes in flight.
template <int BITS, int G, int NT, bool GLU, int SDT>
__global__ void __launch_bounds__(kThreads) mma_direct_kernel(const __grid_constant__ MmaParams P) {
  constexpr int NW = GLU ? 2 : 1, WPT = G * BITS / 128;
  constexpr int MAXU = reg_units(BITS, G, GLU, false);
  __shared__ float red[kWarps][NW][32][4];
  const int64_t bt = int64_t(blockIdx.x) / P.ntt, tt = int64_t(blockIdx.x) % P.ntt;
  const MmaJob* J[NW];
  const Tile T = tile_jobs<GLU>(P, bt, J);
  const RowPtrs<NW> R = row_ptrs<BITS, G, NW>(P, T, J);
  const int64_t tok0 = tt * (8 * NT);
  float acc[NW][NT][4];
  zero_acc(acc);
  const size_t gstride = size_t(P.npad) * frag_words(G);  // u32 per group of the prepared buffer
  // The first codes go out before pdl_wait: weights are never written, x is (by the prepare pass).
  tile_walk<BITS, G, NW, SDT, MAXU>(
      R, T,
      [] {
        pdl_wait();
        pdl_trigger();
      },
      [&](const GroupData<WPT, NW>& d, int32_t g) {
        group_mma<BITS, G, NT, NW, SDT, false>(d, P.pfrag + size_t(g) * gstride, P.psum + int64_t(g) * P.npad, tok0,
                                               P.npad, T.gq, T.tq, acc);
      });
  epilogue<NT, NW, GLU>(P, T, *J[0], tok0, acc, red);
}

// acc[w][nt] += one group of the warp's tiles against NT token subtiles whose fragments are in shared memory (the
// cluster kernel's slot: fg [8·NT tokens][4][2S] u32, sg [8·NT] sums): group_mma's arithmetic (bitwise the same
// sums: each (weight, subtile) chain still adds its k-steps in order from zero), but step s of four chains is issued
// before step s + 1 of any, each B pair loaded from shared memory just before its mma, so independent mma hide each
// other's latency within 128 registers.
template <int BITS, int G, int NT, int NW, int SDT>
__device__ __forceinline__ void group_mma_staged(const GroupData<G * BITS / 128, NW>& d, const uint32_t* fg,
                                                 const float* sg, int gq, int tq, float (&acc)[NW][NT][4]) {
  constexpr int S = G / 16;
  uint32_t afr[NW][S][4];
  float sa[NW], sb[NW], ba[NW], bb[NW];
#pragma unroll
  for (int w = 0; w < NW; ++w) group_terms<BITS, G, NW, SDT, NT <= 4>(d, w, afr[w], sa[w], sb[w], ba[w], bb[w]);
  const uint32_t* fq = fg + (gq * 4 + tq) * (2 * S);  // this thread's row of subtile 0; subtile nt is 8·4·2S further
  // CH subtiles at a time: NW·CH chains in flight (four), their partial products in 16 registers.
  constexpr int CH = NT < 4 / NW ? NT : 4 / NW;
#pragma unroll
  for (int c0 = 0; c0 < NT; c0 += CH) {
    float p[NW][CH][4];
    zero_acc(p);
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        const uint2 b = *reinterpret_cast<const uint2*>(fq + (c0 + c) * (8 * 4 * 2 * S) + 2 * s);
#pragma unroll
        for (int w = 0; w < NW; ++w) mma_bf16(p[w][c], afr[w][s], b.x, b.y);
      }
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const float2 X = *reinterpret_cast<const float2*>(sg + (c0 + c) * 8 + 2 * tq);
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        float* a = acc[w][c0 + c];
        a[0] = __fmaf_rn(ba[w], X.x, __fmaf_rn(sa[w], p[w][c][0], a[0]));
        a[1] = __fmaf_rn(ba[w], X.y, __fmaf_rn(sa[w], p[w][c][1], a[1]));
        a[2] = __fmaf_rn(bb[w], X.x, __fmaf_rn(sb[w], p[w][c][2], a[2]));
        a[3] = __fmaf_rn(bb[w], X.y, __fmaf_rn(sb[w], p[w][c][3], a[3]));
      }
    }
  }
}

// The cluster kernel's activation batches: groups per batch (a multiple of the register ring's MAXU, about 8 KB of
// fragments) and the shared memory of its two batch slots or, after the walk, of the block's partial sums.
__host__ __device__ constexpr int cluster_batch(int bits, int group, int nt, bool glu) {
  const int maxu = reg_units(bits, group, glu, false), per = 16 * nt * group;  // fragment bytes per group
  return maxu * (8192 / (maxu * per) > 1 ? 8192 / (maxu * per) : 1);
}
__host__ __device__ constexpr size_t cluster_slot_bytes(int bits, int group, int nt, bool glu) {
  return size_t(cluster_batch(bits, group, nt, glu)) * size_t(8 * nt) * size_t(frag_words(group) * 4 + 4);
}
__host__ __device__ constexpr size_t cluster_smem(int bits, int group, int nt, bool glu) {
  const size_t ring = 2 * cluster_slot_bytes(bits, group, nt, glu);
  const size_t parts = size_t(kWarps) * (glu ? 2 : 1) * size_t(nt) * 32 * 16;
  return ring > parts ? ring : parts;
}

// n > 1 on sm_90 with tiled weights: the direct kernel's arithmetic (bitwise the same outputs), but a block is 8 row
// subtiles (128 rows; GLU: 128 of gate and of up) of ONE K part and one token tile, so its warps share the tile's
// activations, which bulk copies stream into shared memory in batches (the direct kernel's warps each read their own
// from L2: at 64 tokens 8x the weight bytes, and its 8 K-part warps per block left 1 block per multiprocessor
// registers). The ks blocks of a cluster (blockIdx.x = ((row block)·ntt + token tile)·ks + rank) are the ks K parts
// of the same rows and tokens; each writes its partial sums to shared memory and they are added through
// distributed shared memory in the fixed pairwise tree, each (warp, subtile) by one of the blocks. Two blocks per
// multiprocessor (128 registers) except for eight-subtile GLU launches.
template <int BITS, int G, int NT, bool GLU, int SDT>
__global__ void __launch_bounds__(kThreads, GLU && NT >= 8 ? 1 : 2) mma_cluster_kernel(const __grid_constant__ MmaParams P) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int NW = GLU ? 2 : 1, WPT = G * BITS / 128, FW = frag_words(G), TOK = 8 * NT;
  constexpr int MAXU = reg_units(BITS, G, GLU, false), AB = cluster_batch(BITS, G, NT, GLU);
  constexpr uint32_t FB = TOK * FW * 4, SB = TOK * 4;  // bytes of one group's fragments / sums in a slot
  constexpr size_t SLOT = cluster_slot_bytes(BITS, G, NT, GLU);
  extern __shared__ uint4 smem4[];
  __shared__ uint64_t full[2];
  char* base = reinterpret_cast<char*>(smem4);
  const int ks = P.ks, rank = int(cluster_rank());
  const int64_t cb = int64_t(blockIdx.x) / ks, bt = cb / P.ntt, tt = cb % P.ntt, tok0 = tt * TOK;
  // This warp's tile: row subtile = warp, K part = rank (tile0 of each job counts 128-row blocks).
  const MmaJob* J[NW];
  const Tile T = tile_at<GLU, NW>(P, bt, kWarps, int(threadIdx.x) >> 5, rank, J);
  const int gbeg = int(T.gbeg), gend = int(T.gend), nb = (gend - gbeg + AB - 1) / AB;
  const RowPtrs<NW> R = row_ptrs<BITS, G, NW>(P, T, J);
  // Batch b (groups gbeg + b·AB ...) into slot b % 2: per group its token tile's fragments and sums, a copy each,
  // issued by the lanes of warp 0.
  auto issue = [&](int b) {
    const int g0 = gbeg + b * AB, cnt = min(AB, gend - g0);
    uint64_t* bar = full + (b & 1);
    char* slot = base + (b & 1) * SLOT;
    if (T.lane == 0) mbar_expect_tx(bar, uint32_t(cnt) * (FB + SB));
    __syncwarp();
    for (int u = T.lane; u < cnt; u += 32) {
      const int64_t g = g0 + u;
      bulk_copy(slot + size_t(u) * FB, P.pfrag + (size_t(g) * size_t(P.npad) + size_t(tok0)) * FW, FB, bar);
      bulk_copy(slot + size_t(AB) * FB + size_t(u) * SB, P.psum + g * P.npad + tok0, SB, bar);
    }
  };
  GroupCursor<BITS, G, NW, SDT, true> C(R, gbeg);
  GroupData<WPT, NW> cur[MAXU];
  if (T.rows_live) first_groups<MAXU>(C, gbeg, gend, cur);  // weights are never written: before pdl_wait
  if (threadIdx.x == 0) {
    mbar_init(full);
    mbar_init(full + 1);
    mbar_init_fence();
  }
  __syncthreads();
  pdl_wait();
  pdl_trigger();
  if (T.warp == 0)
    for (int b = 0; b < min(2, nb); ++b) issue(b);
  float acc[NW][NT][4];
  zero_acc(acc);
  for (int b = 0; b < nb; ++b) {
    mbar_wait(full + (b & 1), uint32_t((b >> 1) & 1));
    const char* slot = base + (b & 1) * SLOT;
    const uint32_t* sf = reinterpret_cast<const uint32_t*>(slot);
    const float* ss = reinterpret_cast<const float*>(slot + size_t(AB) * FB);
    const int g0 = gbeg + b * AB;
    if (T.rows_live) {
      // AB is a multiple of MAXU, so group g0 + i sits in register slot i % MAXU.
#pragma unroll
      for (int i0 = 0; i0 < AB; i0 += MAXU) {
#pragma unroll
        for (int u = 0; u < MAXU; ++u) {
          const int g = g0 + i0 + u;
          if (g < gend) {
            group_mma_staged<BITS, G, NT, NW, SDT>(cur[u], sf + (i0 + u) * (FB / 4), ss + (i0 + u) * TOK, T.gq, T.tq,
                                                   acc);
            if (g + MAXU < gend) C.load(u, cur[u]);
          }
        }
        C.advance(MAXU);
      }
    }
    __syncthreads();  // the slot is read: refill it
    if (T.warp == 0 && b + 2 < nb) {
      fence_proxy_async();
      issue(b + 2);
    }
  }
  if (ks == 1) {  // nothing to add: the epilogue stores (rows past the job's, a dead warp's too, are skipped)
    epilogue<NT, NW, GLU>(P, T, *J[0], tok0, acc, nullptr);
    return;
  }
  // The slots are free (the last batch's barrier): partial sums [warp][w][nt][lane] float4s.
  float4* part = reinterpret_cast<float4*>(base);
#pragma unroll
  for (int w = 0; w < NW; ++w)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      part[((T.warp * NW + w) * NT + nt) * 32 + T.lane] =
          make_float4(acc[w][nt][0], acc[w][nt][1], acc[w][nt][2], acc[w][nt][3]);
  cluster_sync();
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if ((T.warp * NT + nt) % ks != rank || !T.rows_live) continue;
    float v[NW][4];
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      float q[kWarps][4];  // part k's four outputs, from block k of the cluster
#pragma unroll
      for (int k = 0; k < kWarps; ++k) {
        const float4 r = k < ks ? peer_load4(part + ((T.warp * NW + w) * NT + nt) * 32 + T.lane, uint32_t(k))
                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        q[k][0] = r.x, q[k][1] = r.y, q[k][2] = r.z, q[k][3] = r.w;
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float pa[kWarps];
#pragma unroll
        for (int k = 0; k < kWarps; ++k) pa[k] = q[k][i];
        v[w][i] = pairwise_parts(pa, ks);
      }
    }
    store_subtile<NW, GLU, false>(P, T, *J[0], tok0 + nt * 8 + 2 * T.tq, v, EpiIn{});
  }
  cluster_sync();  // no block leaves while a peer still reads its partial sums
#endif
}

// ---- host side ----

int sdt_code(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::BF16: return 2;
    default: throw std::runtime_error(std::string("cuda::matmul (fast): unsupported scales dtype ") + dtype_name(t));
  }
}

// Warps a launch aims for (RAPID_CUDA_MM_WARPS, read once, overrides kTargetWarps for tuning: a process-wide
// constant, so every n of a weight still gets the same split).
int64_t target_warps() {
  static const int64_t v = [] {
    return int64_t(std::max<long>(env_long("RAPID_CUDA_MM_WARPS", kTargetWarps), 1));
  }();
  return v;
}

// The K split: a function of the launch's weight tiles and K alone (never of n).
int choose_ks(int64_t tiles16, int64_t ng) {
  int ks = 1;
  while (ks < kWarps && tiles16 * ks < target_warps()) ks *= 2;
  while (ks > 1 && ks > ng) ks /= 2;
  return ks;
}

// Blocks of a one-job launch of `out` rows: kw / ks 16-row tiles per block.
int64_t row_blocks(int64_t out, int ks, int kw = kWarps) {
  const int64_t rows = int64_t(16) * (kw / ks);
  return (out + rows - 1) / rows;
}

// A GLU launch's K split: choose_ks, halved while the launch has more blocks than multiprocessors and a warp's K part
// would still fit its bulk ring (every code prefetched before pdl_wait). Then no multiprocessor holds two GLU blocks,
// so each has room for a block of the down projection after it to start its prefetch early (H200, Qwen2.5-0.5B
// shape: 76 blocks from 152, +2% at batch 1 and 64). A function of the weight's shape and the device (never of n).
int choose_glu_ks(int64_t rows, int64_t ng, int bits, int group) {
  const int64_t tiles16 = (rows + 15) / 16, ring = int64_t(bulk_slots(bits, group, true)) * bulk_chunk(bits, group, true);
  int ks = choose_ks(2 * tiles16, ng);
  while (ks > 1 && row_blocks(rows, ks) > sm_count() && (ng + ks / 2 - 1) / (ks / 2) <= ring) ks /= 2;
  return ks;
}

// Whether bulk launches read a settled accumulating job's y before pdl_wait (RAPID_CUDA_MM_SETTLED, read once;
// default 1). Scheduling only: the same values are added.
bool settled_reads() {
  static const bool v = env_long("RAPID_CUDA_MM_SETTLED", 1) != 0;
  return v;
}

// A token-subtile setting from the environment (`name`, read by the caller once): 1, 2, 4 or 8.
int subtile_cap(const char* name, long fallback) {
  const long v = env_long(name, fallback);
  return v >= 8 ? 8 : v >= 4 ? 4 : v >= 2 ? 2 : 1;
}

// The token subtiles of 8 that cover n tokens, up to 8.
int subtiles_for(int64_t n) { return n <= 8 ? 1 : n <= 16 ? 2 : n <= 32 ? 4 : 8; }

// Most token subtiles per block: 4 (8 measured slower at 64 tokens on the H200: fewer blocks, more registers).
// RAPID_CUDA_MM_NT (1, 2, 4 or 8, read once) overrides it; scheduling only.
int max_subtiles() {
  static const int v = subtile_cap("RAPID_CUDA_MM_NT", 4);
  return v;
}

// Token subtiles per block of the direct kernel; GLU's two accumulator sets stop at 4 (registers).
int token_subtiles(int64_t n, bool glu) {
  return std::min({max_subtiles(), glu ? 4 : 8, subtiles_for(n)});
}

// ---- the per-stream prepared-activation buffer: grown only outside captures (graphs hold its address)

struct PrepBuffer {
  int device;
  cudaStream_t stream;
  void* ptr;
  size_t bytes;
};
std::mutex g_prep_mu;
std::vector<PrepBuffer> g_prep;

// Bytes of a launch's prepared activations (fragments, 256-aligned sums) for any tiling of `rows` (at most 64
// rows of padding) and any group size (>= 32); the buffer reserved for the largest launch covers every smaller one.
size_t prep_bytes(int64_t rows, int64_t in) {
  const int64_t npad = (rows + 63) / 64 * 64;
  return size_t(npad) * size_t(in) * 2 + 256 + size_t(npad) * size_t(in / 32) * 4;
}

void* prep_buffer(cudaStream_t s, size_t bytes) {
  int dev = 0;
  check(cudaGetDevice(&dev), "cuda::matmul (fast): cudaGetDevice");
  std::lock_guard<std::mutex> lock(g_prep_mu);
  PrepBuffer* e = nullptr;
  for (PrepBuffer& b : g_prep)
    if (b.device == dev && b.stream == s) e = &b;
  if (e && e->bytes >= bytes) return e->ptr;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(s, &cap), "cuda::matmul (fast): capture status");
  if (cap != cudaStreamCaptureStatusNone)
    throw std::runtime_error("cuda::matmul (fast): the prepared-activation buffer must be reserved before a capture");
  if (e) {
    check(cudaStreamSynchronize(s), "cuda::matmul (fast): sync before regrow");
    cudaFree(e->ptr);
    e->ptr = nullptr;
    e->bytes = 0;
  } else {
    g_prep.push_back({dev, s, nullptr, 0});
    e = &g_prep.back();
  }
  check(cudaMalloc(&e->ptr, bytes), "cuda::matmul (fast): cudaMalloc prepared activations");
  e->bytes = bytes;
  return e->ptr;
}

// The most rows the gemv kernel takes (1: decode at batch 1, measured on the H200; 2..8 rows ran faster as
// prepare + direct, also with a gemv kernel staging up to 8 tokens). Both kernels do the same arithmetic, so this is
// scheduling only: RAPID_CUDA_MM_STAGED (0 or 1, read once) overrides it for tuning.
int64_t gemv_max() {
  static const int64_t v = [] {
    return int64_t(std::clamp<long>(env_long("RAPID_CUDA_MM_STAGED", 1), 0, 1));
  }();
  return v;
}

// Whether a one-row launch of at most one block per multiprocessor asks for more than half a multiprocessor's shared
// memory, so that no two of its blocks share one (RAPID_CUDA_MM_SPREAD, read once; default 1; scheduling only). The
// block scheduler otherwise pairs them up while other multiprocessors get none: in the H200 decode chain at batch 1
// about 9 in 10 of the Qwen2.5-3B down projection's 128 blocks shared a multiprocessor, and these launches are bound by
// their multiprocessors' work. Spread: 3B +4.4%, 0.5B +0.5% at batch 1 (same run). In those shapes a block of the next
// launch still fits beside one, so its loads still start early; a larger next block would wait for this one to end.
bool spread_blocks() {
  static const bool v = env_long("RAPID_CUDA_MM_SPREAD", 1) != 0;
  return v;
}

// Launches a one-row kernel (gemv or bulk: a block per row tile, `smem` dynamic bytes on top of their static
// partial-sum tree and norm reduction); false, with nothing launched, when that exceeds the device's shared memory.
bool launch_one_row(void (*kernel)(MmaParams), bool glu, const MmaParams& P, cudaStream_t s, int64_t row_tiles,
                    size_t smem, int warps = kWarps) {
  const size_t stat = sizeof(float) * size_t(warps) * (glu ? 2 : 1) * 32 * 4 + sizeof(double) * kWarps + 16;
  if (spread_blocks() && row_tiles <= sm_count()) {
    // Two blocks of (dynamic + static + the 1 KB the driver reserves) bytes each then exceed one multiprocessor.
    const size_t half = smem_per_sm() / 2 + 16;
    if (smem + stat + 1024 < half) smem = half - stat - 1024;
  }
  if (!allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem, stat)) return false;
  launch(kernel, dim3{unsigned(row_tiles)}, dim3{unsigned(warps * 32)}, smem, s, "cuda::matmul (fast) launch", P);
  return true;
}

// Warps per block of a one-row GLU bulk launch whose kWarps-warp blocks outnumber the multiprocessors
// (RAPID_CUDA_MM_GLU_WARPS: 4, the default, or 8; read once). Scheduling only: the K split, so the arithmetic, stays.
// Twice the blocks of half the warps let the scheduler even out the warps per multiprocessor: on the H200 the
// Qwen2.5-3B GLU (172 blocks of 8 warps over 132) measured +0.4% to +0.6% at batch 1 in three same-run A/Bs.
int glu_block_warps() {
  static const int v = env_long("RAPID_CUDA_MM_GLU_WARPS", 4) == 8 ? kWarps : 4;
  return v;
}

// When n = 1 launches take the bulk kernel (RAPID_CUDA_MM_BULK, read once; scheduling only, the arithmetic is the gemv
// kernel's): 0 never, 1 (the default) always, 2 when the launch has at most one block per multiprocessor. The bulk
// kernel holds its codes in shared memory, not registers, so the next launch's blocks fit beside it and start their
// loads early. Measured on the H200 in the decode chain: 3B shape at batch 1 +2% (582 vs 570 tok/s) over mode 2,
// which sends the 3B q/k/v and GLU launches (more blocks than multiprocessors) through the gemv kernel; 0.5B even.
int bulk_mode() {
  static const int v = [] {
    return int(std::clamp<long>(env_long("RAPID_CUDA_MM_BULK", 1), 0, 2));
  }();
  return v;
}

// The bulk kernel of one format: n = 1 on a device with bulk copies, every job tiled (codes and scales, whole padded
// tiles) with 16-byte aligned scales; false (nothing launched) otherwise or when shared memory is short.
template <int BITS, int G, bool GLU, int SDT>
bool launch_bulk_t(MmaParams& P, cudaStream_t s, int64_t row_tiles) {
  const int mode = bulk_mode();
  if (mode == 0 || (mode == 2 && row_tiles > sm_count()) || !bulk_copy_supported()) return false;
  const int njobs = GLU ? 2 : P.njobs;
  for (int i = 0; i < njobs; ++i) {
    const MmaJob& j = P.job[i];
    if (!j.tiled || reinterpret_cast<uintptr_t>(j.scales) % 16 != 0) return false;
  }
  const bool merge = !GLU && P.am.o;
  const BulkLayout L = bulk_layout(BITS, G, P.ng, P.norm_w != nullptr || merge, GLU, P.ks, SDT == 0 ? 4 : 2);
  if (P.ng > (int64_t(1) << 24) || L.tile_bytes * (GLU ? 2 : 1) > 0xfffff) return false;
  if constexpr (!GLU)
    if (merge) return launch_one_row(mma_bulk_kernel<BITS, G, GLU, SDT, kWarps, true>, GLU, P, s, row_tiles, L.total);
  if constexpr (GLU) {
    constexpr int KW = 4;
    if (glu_block_warps() == KW && P.ks <= KW && row_tiles > sm_count()) {
      const int64_t blocks = row_blocks(P.job[0].out, P.ks, KW);
      const BulkLayout L4 = bulk_layout(BITS, G, P.ng, P.norm_w != nullptr, GLU, P.ks, SDT == 0 ? 4 : 2, KW);
      if (launch_one_row(mma_bulk_kernel<BITS, G, GLU, SDT, KW>, GLU, P, s, blocks, L4.total, KW)) return true;
    }
  }
  return launch_one_row(mma_bulk_kernel<BITS, G, GLU, SDT, kWarps>, GLU, P, s, row_tiles, L.total);
}

// The gemv kernel of one format for the launch's scales dtype; false when x does not fit in shared memory.
template <int BITS, int G, bool GLU, int SDT>
bool launch_gemv_t(const MmaParams& P, cudaStream_t s, int64_t row_tiles) {
  const size_t smem = gemv_smem(G, P.ng, P.norm_w != nullptr);
  return launch_one_row(mma_gemv_kernel<BITS, G, GLU, SDT>, GLU, P, s, row_tiles, smem);
}

template <int BITS, int G, bool GLU, int SDT>
void launch_direct(const MmaParams& P, cudaStream_t s, dim3 grid, int nt) {
  const dim3 block{unsigned(kThreads)};
  const char* what = "cuda::matmul (fast) launch";
  switch (nt) {
    case 1: launch(mma_direct_kernel<BITS, G, 1, GLU, SDT>, grid, block, 0, s, what, P); break;
    case 2: launch(mma_direct_kernel<BITS, G, 2, GLU, SDT>, grid, block, 0, s, what, P); break;
    case 4: launch(mma_direct_kernel<BITS, G, 4, GLU, SDT>, grid, block, 0, s, what, P); break;
    default: launch(mma_direct_kernel<BITS, G, 8, GLU, SDT>, grid, block, 0, s, what, P); break;
  }
}

// Whether launches of more than one row take the cluster kernel (RAPID_CUDA_MM_CLUSTER, read once; default 1; 0 sends
// them to the direct kernel). Scheduling only: both do the same arithmetic.
bool cluster_mode() {
  static const bool v = env_long("RAPID_CUDA_MM_CLUSTER", 1) != 0;
  return v;
}

// Token subtiles per block of the cluster kernel: up to RAPID_CUDA_MM_CLUSTER_NT, GLU up to
// RAPID_CUDA_MM_CLUSTER_GLU_NT (1, 2, 4 or 8, read once; defaults 8 and 4: GLU's two accumulator sets). Scheduling only.
// Fewer subtiles while the launch (`blocks` row blocks and K parts per token tile) would give fewer than half the
// multiprocessors a block: H200, 64 tokens, 8 subtiles ran the Qwen2.5-3B shape 8% faster than 4 (its projections make
// 128 blocks), the 0.5B shape 8% slower (56).
int cluster_subtiles(int64_t n, bool glu, int64_t blocks) {
  static const int cap = subtile_cap("RAPID_CUDA_MM_CLUSTER_NT", 8), glu_cap = subtile_cap("RAPID_CUDA_MM_CLUSTER_GLU_NT", 4);
  int nt = std::min(glu ? glu_cap : cap, subtiles_for(n));
  while (nt > 1 && 2 * blocks * ((n + 8 * nt - 1) / (8 * nt)) < sm_count()) nt /= 2;
  return nt;
}

// The fewest rows a launch needs to take the cluster kernel (RAPID_CUDA_MM_CLUSTER_MIN, read once; default 17). In the
// H200 decode chain (Qwen2.5-3B / 0.5B shapes) the direct kernel ran 15% / 13% faster at 8 sequences and about even
// at 16 (-5% / +2%); the cluster kernel ran +17% / +12% or more at 32 and +19% / +19% at 64 (same-run A/Bs).
int64_t cluster_min_rows() {
  static const int64_t v = std::max<long>(env_long("RAPID_CUDA_MM_CLUSTER_MIN", 17), 2);
  return v;
}

// Whether a launch of more than one row can take the cluster kernel: enabled, at least cluster_min_rows() rows, sm_90
// (clusters and bulk copies), a K split that fits a cluster, and every job tiled (codes and scales).
template <bool GLU>
bool cluster_fits(const MmaParams& P) {
  if (!cluster_mode() || P.n < cluster_min_rows() || !bulk_copy_supported() || P.ks > kWarps) return false;
  for (int i = 0; i < (GLU ? 2 : P.njobs); ++i)
    if (!P.job[i].tiled) return false;
  return true;
}

// Lays the launch's jobs out in the cluster kernel's block rows (kWarps row subtiles each): each job's tile0 becomes
// its first block row. Returns the block rows.
template <bool GLU>
int64_t cluster_block_rows(MmaParams& P) {
  int64_t rows = 0;
  for (int i = 0; i < (GLU ? 1 : P.njobs); ++i) {
    P.job[i].tile0 = rows;
    rows += (P.job[i].out + 16 * kWarps - 1) / (16 * kWarps);
  }
  return rows;
}

// The cluster kernel over `block_rows` block rows (cluster_block_rows), nt token subtiles per block.
template <int BITS, int G, bool GLU, int SDT>
void launch_cluster_kernel(const MmaParams& P, cudaStream_t s, int64_t block_rows, int nt) {
  const int64_t blocks = block_rows * P.ntt * P.ks;
  if (blocks > int64_t(0x7fffffff)) throw std::runtime_error("cuda::matmul (fast): too many blocks");
  const size_t smem = cluster_smem(BITS, G, nt, GLU);
  const char* what = "cuda::matmul (fast) cluster launch";
  auto go = [&](auto kernel) {
    if (!allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem, 2 * sizeof(uint64_t)))
      throw std::runtime_error("cuda::matmul (fast): the cluster kernel's shared memory exceeds the device's");
    launch_in(kernel, dim3{unsigned(blocks)}, dim3{unsigned(kThreads)}, smem, s, unsigned(P.ks), what, P);
  };
  switch (nt) {
    case 1: go(mma_cluster_kernel<BITS, G, 1, GLU, SDT>); break;
    case 2: go(mma_cluster_kernel<BITS, G, 2, GLU, SDT>); break;
    case 4: go(mma_cluster_kernel<BITS, G, 4, GLU, SDT>); break;
    default: go(mma_cluster_kernel<BITS, G, 8, GLU, SDT>); break;
  }
}

// One format and scales dtype: the gemv kernel, or the prepare pass and the cluster or direct kernel.
template <int BITS, int G, bool GLU, int SDT>
void launch_t(MmaParams& P, cudaStream_t s, int64_t row_tiles) {
  const dim3 block{unsigned(kThreads)};
  if (P.n <= gemv_max()) {
    P.ntt = 1;
    if (launch_bulk_t<BITS, G, GLU, SDT>(P, s, row_tiles)) return;
  }
  if (P.am.o) {  // the gemv kernel and the prepare pass read x: the partials are merged into it first
    attention_merge(P.am, const_cast<float*>(P.x), s);
    P.am = AttnPartials{};
  }
  if (P.n <= gemv_max() && launch_gemv_t<BITS, G, GLU, SDT>(P, s, row_tiles)) return;
  const bool clustered = cluster_fits<GLU>(P);
  const int64_t block_rows = clustered ? cluster_block_rows<GLU>(P) : 0;
  const int nt = clustered ? cluster_subtiles(P.n, GLU, block_rows * P.ks) : token_subtiles(P.n, GLU);
  P.ntt = (P.n + 8 * nt - 1) / (8 * nt);
  P.npad = P.ntt * 8 * nt;
  const size_t fbytes = size_t(P.ng) * size_t(P.npad) * size_t(frag_words(G)) * 4;  // then the sums, 256-aligned
  char* buf = static_cast<char*>(prep_buffer(s, prep_bytes(P.n, P.ng * G)));
  P.pfrag = reinterpret_cast<const uint32_t*>(buf);
  P.psum = reinterpret_cast<const float*>(buf + (fbytes + 255) / 256 * 256);
  launch(prep_kernel<BITS, G>, dim3{unsigned(P.n)}, block, 0, s, "cuda::matmul (fast) prepare launch", P.x, P.ldx,
         P.ng, P.npad, P.norm_w, P.eps, const_cast<uint32_t*>(P.pfrag), const_cast<float*>(P.psum));
  if (clustered) return launch_cluster_kernel<BITS, G, GLU, SDT>(P, s, block_rows, nt);
  const int64_t blocks = row_tiles * P.ntt;
  if (blocks > int64_t(0x7fffffff)) throw std::runtime_error("cuda::matmul (fast): too many blocks");
  launch_direct<BITS, G, GLU, SDT>(P, s, dim3{unsigned(blocks)}, nt);
}

template <int BITS, int G, bool GLU>
void launch_g(MmaParams& P, cudaStream_t s, int64_t row_tiles) {
  switch (P.sdt) {
    case 0: launch_t<BITS, G, GLU, 0>(P, s, row_tiles); break;
    case 1: launch_t<BITS, G, GLU, 1>(P, s, row_tiles); break;
    default: launch_t<BITS, G, GLU, 2>(P, s, row_tiles); break;
  }
}

template <bool GLU>
void launch(MmaParams& P, int bits, int group, int64_t row_tiles, cudaStream_t s) {
  if (bits == 4) {
    if (group == 32) launch_g<4, 32, GLU>(P, s, row_tiles);
    else if (group == 64) launch_g<4, 64, GLU>(P, s, row_tiles);
    else launch_g<4, 128, GLU>(P, s, row_tiles);
  } else {
    if (group == 32) launch_g<8, 32, GLU>(P, s, row_tiles);
    else if (group == 64) launch_g<8, 64, GLU>(P, s, row_tiles);
    else launch_g<8, 128, GLU>(P, s, row_tiles);
  }
}

MmaJob job_of(const DevWeight& w) {
  MmaJob j;
  j.data = static_cast<const uint32_t*>(w.data);
  j.scales = w.scales;
  j.biases = w.biases;
  j.out = w.out;
  j.tiled = w.tiled ? 1 : 0;
  return j;
}

MmaParams base(const float* x, int64_t ldx, int64_t n, const DevWeight& w) {
  MmaParams P;
  P.x = x;
  P.ldx = ldx;
  P.n = n;
  P.ng = w.in / w.group;
  P.wpr = w.in * w.bits / 32;
  P.sdt = sdt_code(w.dtype);
  return P;
}

void set_norm(MmaParams& P, const RowNorm* norm) {
  if (!norm) return;
  if (!norm->w) throw std::runtime_error("cuda::matmul (fast): a fused norm needs its weight");
  P.norm_w = norm->w;
  P.eps = norm->eps;
}

}  // namespace

bool mma_merges_partials(const DevWeight& w) {
  return bulk_mode() != 0 && bulk_copy_supported() && w.tiled;
}

bool mma_format_supported(const DevWeight& w) {
  return w.kind == WeightKind::Affine && (w.bits == 4 || w.bits == 8) &&
         (w.group == 32 || w.group == 64 || w.group == 128) && w.in % w.group == 0 &&
         (w.dtype == DType::F32 || w.dtype == DType::F16 || w.dtype == DType::BF16) && w.scales && w.biases &&
         w.out * (w.in / w.group) < (int64_t(1) << 31);  // RowPtrs' 32-bit scale offsets
}

bool mma_supported(const DevWeight& w) { return mma_format_supported(w) && reinterpret_cast<uintptr_t>(w.data) % 16 == 0; }

bool mma_same_format(const DevWeight& a, const DevWeight& b) {
  return a.bits == b.bits && a.group == b.group && a.dtype == b.dtype && a.in == b.in && a.tiled == b.tiled;
}



void mma_matmul(const float* x, int64_t ldx, int64_t n, const MatmulJob* jobs, int count, cudaStream_t s,
                const RowNorm* norm, const RopeOut* rope, const AttnPartials* partials) {
  if (count < 1 || count > 4) throw std::runtime_error("cuda::matmul (fast): 1..4 jobs");
  const DevWeight& w0 = jobs[0].w;
  MmaParams P = base(x, ldx, n, w0);
  P.njobs = count;
  set_norm(P, norm);
  if (partials) P.am = *partials;  // matmul checked one row, no norm and whole heads of 8k
  if (rope) {
    if (!rope->cos || !rope->sin || !rope->slot || rope->head_dim <= 0 || rope->head_dim % 16 != 0)
      throw std::runtime_error("cuda::matmul (fast): a RoPE epilogue needs cos, sin, slots and a head_dim multiple of 16");
    P.rope_cos = rope->cos;
    P.rope_sin = rope->sin;
    P.rope_slot = rope->slot;
    P.rope_hd = rope->head_dim;
    if (rope->kv == KvDtype::I8)
      throw std::runtime_error("cuda::matmul (fast): an int8 KV cache is written by rope_kv_write, not a RoPE epilogue");
    P.rope_kv = rope->kv;
  }
  for (int i = 0; i < count; ++i) {
    const MatmulJob& J = jobs[i];
    if (J.rope < 0 || J.rope > 3) throw std::runtime_error("cuda::matmul (fast): RoPE epilogue kind must be 0..3");
    if (J.rope == 0) continue;
    const int rows = J.rope == 3 ? 0 : rope ? rope->head_dim : -1;
    if (!rope || J.accumulate || J.w.out % rope->head_dim != 0 || J.w.rope_rows != rows)
      throw std::runtime_error("cuda::matmul (fast): a RoPE epilogue job needs its tables, no accumulate, whole heads and "
                               "q/k rows in rope_pair_rows order (v rows as they are)");
  }
  int64_t tiles16 = 0;
  for (int i = 0; i < count; ++i) {
    if (!mma_supported(jobs[i].w) || !mma_same_format(jobs[i].w, w0))
      throw std::runtime_error("cuda::matmul (fast): the jobs of one launch must share an affine format");
    tiles16 += (jobs[i].w.out + 15) / 16;
  }
  P.ks = choose_ks(tiles16, P.ng);
  int64_t tiles = 0;
  for (int i = 0; i < count; ++i) {
    const MatmulJob& J = jobs[i];
    if (!J.y || J.ldy < J.w.out) throw std::runtime_error("cuda::matmul (fast): job without y or ldy < out");
    P.job[i] = job_of(J.w);
    P.job[i].bias = J.bias;
    P.job[i].y = J.y;
    P.job[i].ldy = J.ldy;
    P.job[i].accumulate = J.accumulate ? (J.y_settled && settled_reads() ? 2 : 1) : 0;
    P.job[i].rope = J.rope;
    P.job[i].tile0 = tiles;
    tiles += row_blocks(J.w.out, P.ks);
  }
  launch<false>(P, w0.bits, w0.group, tiles, s);
}

void mma_glu(const float* x, int64_t n, const DevWeight& gate, const DevWeight& up, int act, float* out,
             cudaStream_t s, const RowNorm* norm) {
  if (!mma_supported(gate) || !mma_supported(up) || !mma_same_format(gate, up) || gate.out != up.out)
    throw std::runtime_error("cuda::matmul_glu (fast): gate and up must share an affine format and shape");
  MmaParams P = base(x, gate.in, n, gate);
  P.njobs = 2;
  P.act = act;
  set_norm(P, norm);
  P.job[0] = job_of(gate);
  P.job[0].y = out;
  P.job[0].ldy = gate.out;
  P.job[1] = job_of(up);
  P.ks = choose_glu_ks(gate.out, P.ng, gate.bits, gate.group);
  launch<true>(P, gate.bits, gate.group, row_blocks(gate.out, P.ks), s);
}

void matmul_reserve(cudaStream_t s, int64_t rows, int64_t in) {
  // Even one row may need it: the gemv kernel hands rows whose x exceeds shared memory to prepare + direct.
  if (rows > 0) prep_buffer(s, prep_bytes(rows, in));
}

void matmul_release(cudaStream_t s) {
  int dev = 0;
  check(cudaGetDevice(&dev), "cuda::matmul (fast): cudaGetDevice");
  std::lock_guard<std::mutex> lock(g_prep_mu);
  for (size_t i = 0; i < g_prep.size(); ++i)
    if (g_prep[i].device == dev && g_prep[i].stream == s) {
      cudaStreamSynchronize(s);
      cudaFree(g_prep[i].ptr);
      g_prep.erase(g_prep.begin() + std::ptrdiff_t(i));
      return;
    }
}

}  // namespace rapid::cuda
