// Segment attention kernels (segment_attention.h). One block per (query tile of 64, head), walking its segment's
// keys in tiles with an online softmax. Fast: 4 warps of 16 query rows; S = Q·Kᵀ and O += P·V on mma.sync
// m16n8k16 (bf16 operands, f32 sums); the S accumulators are the P operand's registers, so a row's max, sum and
// rescale stay in the quad of lanes that hold it; V tiles are staged [key][dim] like K, read by ldmatrix.trans.
// Exact: 8 warps of 8 queries; lane j scores key j of a 32-key tile against the query (broadcast by shuffles),
// then every lane adds the 32 weighted values of its dims.
#include "cuda/segment_attention.h"
#include <cuda_bf16.h>
#include <cmath>
#include <stdexcept>
#include <string>
#include "cuda/cuda_kernels.h"
#include "cuda/device_math.cuh"
#include "cuda/mma.cuh"

namespace rapid::cuda {
namespace {

constexpr int kQT = kSegQueryTile;  // queries per block
constexpr int kKT = 64;             // keys per tile (Fast)

// One launch's operands (segment_attention's, with group = heads / kv_heads).
struct AttnArgs {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  int64_t ldq, ldkv, ldo;
  int group, hd;
  float scale;  // Fast: scale * log2(e), for exp2
  const SegTile* tiles;
};

// Rows [0, 64) x dims [0, HDP) of a [tokens, ld] f32 head slice into bf16 pairs; zero outside [r_end) x [hd).
template <int HDP, int PITCH>
__device__ __forceinline__ void stage_rows(__nv_bfloat16 (*dst)[PITCH], const float* src, int64_t ld, int64_t r0,
                                           int64_t r_end, int hd) {
  for (int i = threadIdx.x; i < kKT * HDP / 2; i += blockDim.x) {
    const int r = i / (HDP / 2), d = (i % (HDP / 2)) * 2;
    const int64_t row = r0 + r;
    const float* p = src + row * ld + d;
    const bool live = row < r_end;
    const float a = live && d < hd ? p[0] : 0.f, b = live && d + 1 < hd ? p[1] : 0.f;
    *reinterpret_cast<uint32_t*>(&dst[r][d]) = pack_bf16(a, b);
  }
}

// Four 8x8 bf16 matrices, transposed: lane l gives the address of row l % 8 of matrix l / 8 and receives, of each,
// (row 2 (l % 4), col l / 4) and (row 2 (l % 4) + 1, col l / 4): an mma B fragment of a [k][n] tile.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

template <int HDP>
__global__ void __launch_bounds__(128) seg_attn_mma(const AttnArgs a) {
  constexpr int NKS = HDP / 16, NDT = HDP / 8;
  const float* __restrict__ q = a.q;
  const float* __restrict__ k = a.k;
  const float* __restrict__ v = a.v;
  const int64_t ldq = a.ldq, ldkv = a.ldkv, ldo = a.ldo;
  const int hd = a.hd;
  __shared__ __align__(16) __nv_bfloat16 Ks[kKT][HDP + 8];  // Q staging, then a key tile [key][dim]
  // A value tile [key][dim], staged like K and read by ldmatrix.trans (pitch HDP + 8: conflict-free rows).
  __shared__ __align__(16) __nv_bfloat16 Vs[kKT][HDP + 8];
  const SegTile T = a.tiles[blockIdx.x];
  const int64_t hoff = int64_t(blockIdx.y) * hd, kvoff = int64_t(blockIdx.y / a.group) * hd;  // GQA
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;

  stage_rows<HDP, HDP + 8>(Ks, q + hoff, ldq, T.q0, T.end, hd);
  __syncthreads();
  uint32_t qa[NKS][4];
  {
    const int r = warp * 16 + g;
#pragma unroll
    for (int ks = 0; ks < NKS; ++ks) {
      qa[ks][0] = *reinterpret_cast<const uint32_t*>(&Ks[r][ks * 16 + 2 * t]);
      qa[ks][1] = *reinterpret_cast<const uint32_t*>(&Ks[r + 8][ks * 16 + 2 * t]);
      qa[ks][2] = *reinterpret_cast<const uint32_t*>(&Ks[r][ks * 16 + 8 + 2 * t]);
      qa[ks][3] = *reinterpret_cast<const uint32_t*>(&Ks[r + 8][ks * 16 + 8 + 2 * t]);
    }
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g + 8 of this warp
  float o[NDT][4] = {};

  for (int64_t k0 = T.start; k0 < T.end; k0 += kKT) {
    __syncthreads();  // the previous tile (or Q) is read by every warp
    stage_rows<HDP, HDP + 8>(Ks, k + kvoff, ldkv, k0, T.end, hd);
    stage_rows<HDP, HDP + 8>(Vs, v + kvoff, ldkv, k0, T.end, hd);
    __syncthreads();

    float s[kKT / 8][4] = {};
#pragma unroll
    for (int ks = 0; ks < NKS; ++ks)
#pragma unroll
      for (int j = 0; j < kKT / 8; ++j) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&Ks[j * 8 + g][ks * 16 + 2 * t]);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&Ks[j * 8 + g][ks * 16 + 8 + 2 * t]);
        mma_bf16(s[j], qa[ks], b0, b1);
      }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kKT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool live = k0 + j * 8 + 2 * t + (e & 1) < T.end;
        s[j][e] = live ? s[j][e] * a.scale : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
      }
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float mn = fmaxf(m[h], mx[h]);  // finite: the tile's first key is in the segment
      alpha[h] = exp2f(m[h] - mn);
      m[h] = mn;
      l[h] *= alpha[h];
    }
#pragma unroll
    for (int j = 0; j < kKT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(s[j][e] - m[e >> 1]);
        l[e >> 1] += s[j][e];
      }
#pragma unroll
    for (int nd = 0; nd < NDT; ++nd) {
      o[nd][0] *= alpha[0];
      o[nd][1] *= alpha[0];
      o[nd][2] *= alpha[1];
      o[nd][3] *= alpha[1];
    }
#pragma unroll
    for (int kk = 0; kk < kKT / 16; ++kk) {
      const uint32_t pa[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                              pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      // Matrices: keys 0-7 / 8-15 of this step x dims of tile nd, then of nd + 1: b0, b1 of nd, b0, b1 of nd + 1.
      const int mq = lane >> 3;
#pragma unroll
      for (int nd = 0; nd < NDT; nd += 2) {  // NDT is even for every HDP
        uint32_t b[4];
        ldmatrix_x4_trans(b, &Vs[kk * 16 + (lane & 7) + (mq & 1) * 8][(nd + (mq >> 1)) * 8]);
        mma_bf16(o[nd], pa, b[0], b[1]);
        mma_bf16(o[nd + 1], pa, b[2], b[3]);
      }
    }
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    const int64_t r = T.q0 + warp * 16 + g + 8 * h;
    if (r >= T.end) continue;
    const float inv = 1.0f / l[h];
    float* dst = a.out + r * ldo + hoff;
#pragma unroll
    for (int nd = 0; nd < NDT; ++nd) {
      const int d = nd * 8 + 2 * t;
      if (d < hd) dst[d] = o[nd][2 * h] * inv;
      if (d + 1 < hd) dst[d + 1] = o[nd][2 * h + 1] * inv;
    }
  }
}

constexpr int kXKT = 32, kXQ = kQT / 8;  // Exact: keys per tile, queries per warp

template <int DD>
__global__ void __launch_bounds__(256) seg_attn_f32(const AttnArgs a) {
  constexpr int HD = 32 * DD;
  const float* __restrict__ q = a.q;
  const float* __restrict__ k = a.k;
  const float* __restrict__ v = a.v;
  float* __restrict__ out = a.out;
  const int64_t ldq = a.ldq, ldkv = a.ldkv, ldo = a.ldo;
  const int hd = a.hd;
  const float scale = a.scale;
  __shared__ float Ks[kXKT][HD + 1];  // +1: lane j reads row j without bank conflicts
  __shared__ float Vs[kXKT][HD];
  const SegTile T = a.tiles[blockIdx.x];
  const int64_t hoff = int64_t(blockIdx.y) * hd, kvoff = int64_t(blockIdx.y / a.group) * hd;  // GQA
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r0 = T.q0 + int64_t(warp) * kXQ;
  float qr[kXQ][DD], o[kXQ][DD] = {}, m[kXQ], l[kXQ];  // lane holds dims lane + 32 dd
#pragma unroll
  for (int i = 0; i < kXQ; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int dd = 0; dd < DD; ++dd) {
      const int d = lane + 32 * dd;
      qr[i][dd] = r0 + i < T.end && d < hd ? q[(r0 + i) * ldq + hoff + d] : 0.f;
    }
  }
  for (int64_t k0 = T.start; k0 < T.end; k0 += kXKT) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < kXKT * HD; idx += blockDim.x) {
      const int j = idx / HD, d = idx % HD;
      const int64_t key = k0 + j;
      const bool live = key < T.end && d < hd;
      Ks[j][d] = live ? k[key * ldkv + kvoff + d] : 0.f;
      Vs[j][d] = live ? v[key * ldkv + kvoff + d] : 0.f;
    }
    __syncthreads();
    const bool valid = k0 + lane < T.end;
#pragma unroll
    for (int i = 0; i < kXQ; ++i) {
      if (r0 + i >= T.end) break;  // warp-uniform
      float s = 0.f;
#pragma unroll
      for (int dd = 0; dd < DD; ++dd)
#pragma unroll
        for (int e = 0; e < 32; ++e) s = fmaf(__shfl_sync(0xffffffffu, qr[i][dd], e), Ks[lane][32 * dd + e], s);
      s = valid ? s * scale : -INFINITY;
      const float mn = fmaxf(m[i], warp_max(s));
      const float alpha = expf(m[i] - mn);
      const float p = valid ? expf(s - mn) : 0.f;
      m[i] = mn;
      l[i] = l[i] * alpha + warp_sum(p);
#pragma unroll
      for (int dd = 0; dd < DD; ++dd) o[i][dd] *= alpha;
#pragma unroll 8
      for (int j = 0; j < kXKT; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
        for (int dd = 0; dd < DD; ++dd) o[i][dd] = fmaf(pj, Vs[j][lane + 32 * dd], o[i][dd]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kXQ; ++i) {
    if (r0 + i >= T.end) break;
#pragma unroll
    for (int dd = 0; dd < DD; ++dd) {
      const int d = lane + 32 * dd;
      if (d < hd) out[(r0 + i) * ldo + hoff + d] = o[i][dd] / l[i];
    }
  }
}

}  // namespace

std::vector<SegTile> seg_tiles(const std::vector<int64_t>& cu) {
  std::vector<SegTile> tiles;
  for (size_t s = 0; s + 1 < cu.size(); ++s)
    for (int64_t q0 = cu[s]; q0 < cu[s + 1]; q0 += kQT)
      tiles.push_back({int32_t(q0), int32_t(cu[s]), int32_t(cu[s + 1]), 0});
  return tiles;
}

void segment_attention(const float* q, int64_t ldq, const float* k, const float* v, int64_t ldkv, float* out,
                       int64_t ldo, int heads, int kv_heads, int head_dim, float scale, const SegTile* tiles,
                       int n_tiles, bool fast, cudaStream_t s) {
  if (n_tiles <= 0 || heads <= 0) return;
  if (kv_heads < 1 || heads % kv_heads != 0)
    throw std::invalid_argument("CUDA segment attention: " + std::to_string(heads) + " heads are not a multiple of " +
                                std::to_string(kv_heads) + " kv heads");
  const int group = heads / kv_heads;
  if (head_dim < 1 || head_dim > 128)
    throw std::invalid_argument("CUDA segment attention: head_dim " + std::to_string(head_dim) +
                                " is outside the supported 1..128");
  const dim3 grid{unsigned(n_tiles), unsigned(heads)};
  AttnArgs a{q, k, v, out, ldq, ldkv, ldo, group, head_dim, scale, tiles};
  if (fast) {
    a.scale = scale * 1.4426950408889634f;  // exp(x) = exp2(x log2 e)
    if (head_dim <= 64) seg_attn_mma<64><<<grid, 128, 0, s>>>(a);
    else if (head_dim <= 80) seg_attn_mma<80><<<grid, 128, 0, s>>>(a);
    else if (head_dim <= 96) seg_attn_mma<96><<<grid, 128, 0, s>>>(a);
    else seg_attn_mma<128><<<grid, 128, 0, s>>>(a);
  } else {
    if (head_dim <= 64) seg_attn_f32<2><<<grid, 256, 0, s>>>(a);
    else seg_attn_f32<4><<<grid, 256, 0, s>>>(a);
  }
  check(cudaGetLastError(), "segment_attention launch");
}

}  // namespace rapid::cuda
