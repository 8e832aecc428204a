// Segment attention kernels (segment_attention.h). One block per (query tile, head), walking its segment's keys in
// tiles of 64 with an online softmax. Fast: q, k and v are first rounded to bf16 into head-major padded rows
// (one pass), then 4 or 8 warps of 16 query rows compute S = Q·Kᵀ and O += P·V on mma.sync m16n8k16 (bf16
// operands, f32 sums) while cp.async stages the next key/value tile (two stages); the S accumulators are the P
// operand's registers, so a row's max, sum and rescale stay in the quad of lanes that hold it; K fragments come by
// ldmatrix, V tiles (staged [key][dim] like K) by ldmatrix.trans. A row's arithmetic does not depend on the tile
// size or the warps beside it. Exact: 8 warps of 8 queries; lane j scores key j of a 32-key tile against the query
// (broadcast by shuffles), then every lane adds the 32 weighted values of its dims.
#include "cuda/segment_attention.h"
#include <cuda_bf16.h>
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include "cuda/cuda_kernels.h"
#include "cuda/device_math.cuh"
#include "cuda/mma.cuh"

namespace rapid::cuda {
namespace {

constexpr int kExactQT = 64;  // queries per Exact block (8 warps of 8)
constexpr int kKT = 64;       // keys per Fast tile
constexpr int kTail = 128;    // zero rows after the bf16 copies: a tile may run past the last token

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

// The bf16 copies: [heads][rows][HDP] for q, [kv_heads][rows][HDP] for k and v, rows = tokens + kTail.
struct Bf16Heads {
  const __nv_bfloat16* q;
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
  int64_t rows;
};

int padded_dim(int hd) { return hd <= 64 ? 64 : hd <= 80 ? 80 : hd <= 96 ? 96 : 128; }

// dst[h][t][0, HDP) = bf16(src[t*ld + h*hd + d]) for t < tokens, d < hd; zero elsewhere (pad dims, tail rows).
// One thread per 8 dims (16 bytes out); src is f32 [tokens, ld], heads of hd floats side by side.
__global__ void round_heads_bf16(const float* __restrict__ src, int64_t ld, int heads, int hd, int hdp, int64_t tokens,
                                 int64_t rows, __nv_bfloat16* __restrict__ dst) {
  const int chunks = hdp / 8;
  const int64_t n = int64_t(heads) * rows * chunks;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % chunks);
    const int64_t rt = i / chunks, t = rt % rows;
    const int h = int(rt / rows), d0 = c * 8;
    float v[8];
    const float* p = src + t * ld + int64_t(h) * hd + d0;
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = t < tokens && d0 + j < hd ? p[j] : 0.f;
    *reinterpret_cast<uint4*>(dst + i * 8) =
        make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
  }
}

// Dynamic shared memory of seg_attn_mma<HDP>: K and V, two stages of kKT rows each, pitch HDP + 8 (conflict-free
// ldmatrix rows). Q is staged through the K stages first (up to 128 rows).
template <int HDP>
constexpr int mma_smem_bytes() {
  return 2 * 2 * kKT * (HDP + 8) * 2;
}

template <int HDP, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) seg_attn_mma(const AttnArgs a, const Bf16Heads b) {
  constexpr int NKS = HDP / 16, NDT = HDP / 8, CH = HDP / 8, PITCH = HDP + 8, THREADS = WARPS * 32;
  static_assert(16 * WARPS <= 2 * kKT, "Q staging fits the two K stages");
  extern __shared__ __align__(16) unsigned char smem[];
  using Row = __nv_bfloat16[PITCH];
  Row* Ks = reinterpret_cast<Row*>(smem);  // [2 * kKT]: stage s at rows [s kKT, (s + 1) kKT)
  Row* Vs = Ks + 2 * kKT;                  // [2 * kKT]
  const SegTile T = a.tiles[blockIdx.x];
  const int head = blockIdx.y;
  const __nv_bfloat16* kb = b.k + int64_t(head / a.group) * b.rows * HDP;  // GQA
  const __nv_bfloat16* vb = b.v + int64_t(head / a.group) * b.rows * HDP;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  // A warp whose 16 rows all lie past the segment end only keeps the block's barriers.
  const bool busy = T.q0 + warp * 16 < T.end;

  {  // Q rows [q0, q0 + 16 WARPS) of this head
    const __nv_bfloat16* qb = b.q + (int64_t(head) * b.rows + T.q0) * HDP;
    for (int i = threadIdx.x; i < 16 * WARPS * CH; i += THREADS) cp_async16(&Ks[i / CH][(i % CH) * 8], qb + i * 8);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
  }
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
  __syncthreads();  // Q read by every warp before stage 0 overwrites it

  // Rows [k0, k0 + kKT) of k and v into stage st (rows past the segment are finite and masked; past the last token,
  // the zero tail).
  auto stage = [&](int st, int64_t k0) {
    for (int i = threadIdx.x; i < kKT * CH; i += THREADS) {
      const int r = i / CH, c = (i % CH) * 8;
      cp_async16(&Ks[st * kKT + r][c], kb + (k0 + r) * HDP + c);
      cp_async16(&Vs[st * kKT + r][c], vb + (k0 + r) * HDP + c);
    }
    cp_async_commit();
  };

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g + 8 of this warp
  float o[NDT][4] = {};
  const int n_tiles = (T.end - T.start + kKT - 1) / kKT;
  stage(0, T.start);
  for (int it = 0; it < n_tiles; ++it) {
    const int64_t k0 = T.start + int64_t(it) * kKT;
    if (it + 1 < n_tiles) {
      stage((it + 1) & 1, k0 + kKT);  // its stage was last read in iteration it - 1, before that one's end barrier
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const Row* K = Ks + (it & 1) * kKT;
    const Row* V = Vs + (it & 1) * kKT;
    if (busy) {
      float s[kKT / 8][4] = {};
      const int mq = lane >> 3;
#pragma unroll
      for (int ks = 0; ks < NKS; ++ks)
#pragma unroll
        for (int j = 0; j < kKT / 8; j += 2) {
          // Matrices: keys of tile j, dims ks*16 + [0, 8) and + [8, 16), then the same of tile j + 1.
          uint32_t r[4];
          ldmatrix_x4(r, &K[(j + (mq >> 1)) * 8 + (lane & 7)][ks * 16 + (mq & 1) * 8]);
          mma_bf16(s[j], qa[ks], r[0], r[1]);
          mma_bf16(s[j + 1], qa[ks], r[2], r[3]);
        }
      float mx[2] = {-INFINITY, -INFINITY};
      const bool partial = k0 + kKT > T.end;
#pragma unroll
      for (int j = 0; j < kKT / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool live = !partial || k0 + j * 8 + 2 * t + (e & 1) < T.end;
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
#pragma unroll
        for (int nd = 0; nd < NDT; nd += 2) {  // NDT is even for every HDP
          uint32_t r[4];
          ldmatrix_x4_trans(r, &V[kk * 16 + (lane & 7) + (mq & 1) * 8][(nd + (mq >> 1)) * 8]);
          mma_bf16(o[nd], pa, r[0], r[1]);
          mma_bf16(o[nd + 1], pa, r[2], r[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with stage it & 1 before iteration it + 1 refills it
  }
  if (!busy) return;

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    const int64_t r = T.q0 + warp * 16 + g + 8 * h;
    if (r >= T.end) continue;
    const float inv = 1.0f / l[h];
    float* dst = a.out + r * a.ldo + int64_t(head) * a.hd;
#pragma unroll
    for (int nd = 0; nd < NDT; ++nd) {
      const int d = nd * 8 + 2 * t;
      if (d < a.hd) dst[d] = o[nd][2 * h] * inv;
      if (d + 1 < a.hd) dst[d + 1] = o[nd][2 * h + 1] * inv;
    }
  }
}

template <int HDP, int WARPS>
void launch_mma(dim3 grid, const AttnArgs& a, const Bf16Heads& b, cudaStream_t s) {
  constexpr int bytes = mma_smem_bytes<HDP>();
  if constexpr (bytes > 48 * 1024) {  // above the default limit: opt in (idempotent, cheap)
    check(cudaFuncSetAttribute(seg_attn_mma<HDP, WARPS>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
          "segment_attention shared memory");
  }
  seg_attn_mma<HDP, WARPS><<<grid, WARPS * 32, bytes, s>>>(a, b);
}

template <int WARPS>
void launch_mma_hd(dim3 grid, const AttnArgs& a, const Bf16Heads& b, int hdp, cudaStream_t s) {
  switch (hdp) {
    case 64: return launch_mma<64, WARPS>(grid, a, b, s);
    case 80: return launch_mma<80, WARPS>(grid, a, b, s);
    case 96: return launch_mma<96, WARPS>(grid, a, b, s);
    default: return launch_mma<128, WARPS>(grid, a, b, s);
  }
}

constexpr int kXKT = 32, kXQ = kExactQT / 8;  // Exact: keys per tile, queries per warp

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

std::vector<SegTile> seg_tiles(const std::vector<int64_t>& cu, int query_tile) {
  std::vector<SegTile> tiles;
  for (size_t s = 0; s + 1 < cu.size(); ++s)
    for (int64_t q0 = cu[s]; q0 < cu[s + 1]; q0 += query_tile)
      tiles.push_back({int32_t(q0), int32_t(cu[s]), int32_t(cu[s + 1]), 0});
  return tiles;
}

SegPlan seg_plan(const std::vector<int64_t>& cu, bool fast) {
  SegPlan p{seg_tiles(cu, 64), 64};
  if (!fast) return p;
  // 128-query blocks read each key tile once for twice the queries; worth it unless short segments (Qwen's
  // 64-token windows) would leave more than 1/8 of the warps idle.
  SegPlan wide{seg_tiles(cu, 128), 128};
  if (wide.tiles.size() * 2 * 8 <= p.tiles.size() * 9) return wide;
  return p;
}

size_t segment_attention_scratch_bytes(int64_t tokens, int heads, int kv_heads, int head_dim, bool fast) {
  if (!fast || tokens <= 0) return 0;
  return size_t(heads + 2 * kv_heads) * size_t(tokens + kTail) * size_t(padded_dim(head_dim)) * 2;
}

void segment_attention(const float* q, int64_t ldq, const float* k, const float* v, int64_t ldkv, float* out,
                       int64_t ldo, int64_t tokens, int heads, int kv_heads, int head_dim, float scale,
                       const SegTile* tiles, int n_tiles, int query_tile, bool fast, void* scratch, cudaStream_t s) {
  if (n_tiles <= 0 || heads <= 0 || tokens <= 0) return;
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
    if (query_tile != 64 && query_tile != 128)
      throw std::invalid_argument("CUDA segment attention: query tile " + std::to_string(query_tile));
    const int hdp = padded_dim(head_dim);
    const int64_t rows = tokens + kTail;
    auto* qb = static_cast<__nv_bfloat16*>(scratch);
    __nv_bfloat16* kb = qb + int64_t(heads) * rows * hdp;
    __nv_bfloat16* vb = kb + int64_t(kv_heads) * rows * hdp;
    auto round = [&](const float* src, int64_t ld, int nh, __nv_bfloat16* dst) {
      const int64_t chunks = int64_t(nh) * rows * (hdp / 8);
      round_heads_bf16<<<unsigned(std::min<int64_t>((chunks + 255) / 256, 8192)), 256, 0, s>>>(
          src, ld, nh, head_dim, hdp, tokens, rows, dst);
    };
    round(q, ldq, heads, qb);
    round(k, ldkv, kv_heads, kb);
    round(v, ldkv, kv_heads, vb);
    a.scale = scale * 1.4426950408889634f;  // exp(x) = exp2(x log2 e)
    const Bf16Heads b{qb, kb, vb, rows};
    if (query_tile == 128) launch_mma_hd<8>(grid, a, b, hdp, s);
    else launch_mma_hd<4>(grid, a, b, hdp, s);
  } else {
    if (query_tile != kExactQT)
      throw std::invalid_argument("CUDA segment attention: Exact takes query tiles of " + std::to_string(kExactQT));
    if (head_dim <= 64) seg_attn_f32<2><<<grid, 256, 0, s>>>(a);
    else seg_attn_f32<4><<<grid, 256, 0, s>>>(a);
  }
  check(cudaGetLastError(), "segment_attention launch");
}

}  // namespace rapid::cuda
