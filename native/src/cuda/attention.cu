// Paged GQA attention and the KV-slot write. One thread block per (token, KV head[, head group], key
// partition): the block streams its keys through shared memory in chunks of 32 (cp.async, 2-4 stages in
// flight), so each K/V row is read once for all the query heads that share it. Split-K ("flash decoding"):
// a token with more keys than one partition is cut into up to kMaxParts partitions whose (max, sum,
// unnormalized output) land in a per-stream scratch buffer; the block that finishes the token's last
// partition (a counter per token and block row) merges them in partition order. How a token is partitioned
// depends only on its own key count, the partition size and the layer's window; every reduction has a fixed
// order (dot: 4 strided partial sums over d, fixed shuffle trees, chunks in key order, partitions in index
// order), so a token's result is independent of T and of its neighbours. Launches of few tokens (decode) split
// a KV head's query group over more blocks: parallelism only, a head's arithmetic is the same in any block. A
// one-token launch copies its older keys before waiting on the previous kernel (only the token's own K/V row is
// written in its step), so the copies overlap the q/k/v launch; RAPID_CUDA_ATTN_EARLY=0 waits first. A one-token
// launch may also leave its partitions unmerged (AttnPartials): the o projection merges them as it stages its input,
// with the same arithmetic (attn_partials.cuh), and the counter and the last block's merge leave the chain.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>
#include "cuda/attn_partials.cuh"
#include "cuda/cuda_kernels.h"
#include "cuda/device_math.cuh"
#include "cuda/kv_elems.cuh"
#include "cuda/launch.cuh"
#include "cuda/stream_scratch.h"

namespace rapid::cuda {

namespace {

constexpr int kThreads = 128;  // 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = kAttnChunk;         // keys per chunk: one key per lane in the score/softmax phase
constexpr int kMaxH = 8;                   // most heads one thread accumulates in the P·V phase
constexpr int kMaxParts = kAttnMaxParts;  // most key partitions of one token (split-K); one warp lane each in the merge
static_assert(kChunk == 32 && kMaxParts == 32);
// Split launches aim for at most this many blocks per multiprocessor: kFillWaves, or kManyFillWaves once the tokens'
// head rows alone give half the multiprocessors a block. H200, 32-key partitions: 64 sequences ran 1-4% faster with
// 2 than 8 (prompt 128 and 1024), while 1 and 8 sequences at prompt 1024 ran 5-10% slower.
constexpr int kFillWaves = 8;
constexpr int kManyFillWaves = 2;
constexpr int kMinBlocks = 32;        // blocks per key partition that few-token launches aim for (heads split)
// Keys per partition unless RAPID_CUDA_ATTN_SPLIT / the setter says otherwise. 32 over 64: more blocks share a short
// context's keys (H200, prompt 128: 3B +5% at 1 and 8 sequences, 0.5B +5% / +3%).
constexpr int kDefaultPartKeys = 32;
// Per-stream split-K scratch. Fixed, so it never moves under a captured graph; launches with more tokens
// than it holds are cut into token tiles (a token's arithmetic does not depend on its tile).
constexpr size_t kScratchBytes = size_t(64) << 20;
// Its last bytes hold the per-(token, block row) partition counters: zeroed at allocation, and every merge
// leaves its counter at zero again.
constexpr size_t kCounterBytes = size_t(4) << 20;

struct AttnParams {
  const float* q;      // [T, n_heads, hd]
  float* out;          // [T, n_heads, hd]
  AttnTokens tok;
  const unsigned char* kpool;  // [num_blocks * block_size, width] of the KvCache's type
  const unsigned char* vpool;
  const uint32_t* kscale;      // int8: the [slots, n_kv] f16 scales as 32-bit words (kv_scale_word)
  const uint32_t* vscale;
  int n_kv;
  int n_heads, group, heads_per_block, n_hgroups, hd, width, window;
  float scale;
  int64_t t0;          // first token of this launch's tile: block x handles token t0 + blockIdx.x
  int part_keys;       // keys per partition (multiple of kChunk); 0 = every token in one pass
  float* part_o;       // [tile, n_heads, kMaxParts, hd] unnormalized partial outputs (part_keys > 0)
  float2* part_ml;     // [tile, n_heads, kMaxParts] (max, sum) of each partition's scores
  int* done;           // [tile, gridDim.y] partitions finished per (token, block row); 0 between launches
  int early;           // 1: the launch's one token is the step's only writer of its sequence's keys (T = 1)
  int defer;           // 1: a token in several partitions leaves them unmerged (T = 1: AttnPartials)
};

__host__ __device__ inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// The token's visible key range [lo, kv_end).
struct KeyRange {
  int q_pos, lo, end;
  __device__ int count() const { return max(0, end - lo); }
};
__device__ inline KeyRange token_keys(const AttnParams& p, int64_t t) {
  KeyRange r;
  r.q_pos = p.tok.q_pos[t];
  r.end = p.tok.kv_end[t];
  r.lo = p.window > 0 ? max(0, r.q_pos - p.window + 1) : 0;  // keys k > q_pos - window
  return r;
}

// Shared layout: K [S][kChunk][ld], V [S][kChunk][ld] elements of the pool's type (eb bytes each), for int8 then the
// keys' K and V scale words and their shifts [S][kChunk] (u32), then floats Q [Gb][hd], P [Gb][kChunk], M, L, A [Gb];
// S = pipeline stages. ld = hd + 4 keeps rows aligned to 4 elements and the per-lane row reads bank-conflict free.
size_t attn_smem_bytes(int hd, int gb, int stages, int eb, bool scaled) {
  const size_t ld = size_t(hd) + 4;
  const size_t kv = 2 * size_t(stages) * size_t(kChunk) * ld * size_t(eb);
  const size_t sc = scaled ? 3 * size_t(stages) * size_t(kChunk) * sizeof(uint32_t) : 0;
  return kv + sc + (size_t(gb) * size_t(hd) + size_t(gb) * kChunk + 3 * size_t(gb)) * sizeof(float);
}

// Asynchronous N-byte global -> shared copy (N = 4, 8 or 16: four elements of the pool's type).
template <int N>
__device__ __forceinline__ void cp_async_n(void* smem, const void* gmem) {
  if constexpr (N == 16) {
    cp_async16(smem, gmem);
  } else {
    const uint32_t sa = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(sa), "l"(gmem), "n"(N) : "memory");
  }
}

// The same N bytes copied now, read through L2 (a row another kernel just wrote).
template <int N>
__device__ __forceinline__ void copy_now(void* smem, const void* gmem) {
  if constexpr (N == 16) *static_cast<float4*>(smem) = __ldcg(static_cast<const float4*>(gmem));
  else if constexpr (N == 8) *static_cast<uint2*>(smem) = __ldcg(static_cast<const uint2*>(gmem));
  else *static_cast<uint32_t*>(smem) = __ldcg(static_cast<const unsigned int*>(gmem));
}

// Merges one query head from its partitions, by one warp, into out_row [hd] (attn_partials.cuh's arithmetic; lane i
// holds partition i's weight): partials po [kMaxParts][hd / 4], pml [kMaxParts], read through L2 (other blocks wrote
// them).
__device__ void merge_head(const float4* po, const float2* pml, float* out_row, int hd, int parts, int lane) {
  const int hd4 = hd / 4;
  // The first kPre partitions' outputs of the lane's first column go out with the (max, sum) reads: one L2 wait.
  constexpr int kPre = 8;
  float4 pre[kPre];
#pragma unroll
  for (int i = 0; i < kPre; ++i)
    pre[i] = i < parts && lane < hd4 ? __ldcg(po + i * hd4 + lane) : make_float4(0.f, 0.f, 0.f, 0.f);
  const float2 ml = lane < parts ? __ldcg(pml + lane) : make_float2(-INFINITY, 0.0f);
  const float m = warp_max(ml.x);
  const float w = lane < parts ? expf(ml.x - m) : 0.0f;
  float l = 0.0f;
  for (int j = 0; j < parts; ++j) l = fmaf(__shfl_sync(0xffffffffu, ml.y, j), __shfl_sync(0xffffffffu, w, j), l);
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
  float4* o4 = reinterpret_cast<float4*>(out_row);
  for (int c0 = 0; c0 < hd4; c0 += 32) {  // uniform trip counts: every lane joins the shuffles
    const int c = c0 + lane;
    const bool ok = c < hd4;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    auto add = [&](int i, const float4& a) {
      const float wi = __shfl_sync(0xffffffffu, w, i);
      o.x = fmaf(wi, a.x, o.x);
      o.y = fmaf(wi, a.y, o.y);
      o.z = fmaf(wi, a.z, o.z);
      o.w = fmaf(wi, a.w, o.w);
    };
#pragma unroll
    for (int i = 0; i < kPre; ++i)  // partitions in order: the prefetched ones first
      if (i < parts) add(i, c0 == 0 ? pre[i] : ok ? __ldcg(po + i * hd4 + c) : make_float4(0.f, 0.f, 0.f, 0.f));
#pragma unroll 8
    for (int i = kPre; i < parts; ++i)  // unrolled: the partials' L2 reads go out together
      add(i, ok ? __ldcg(po + i * hd4 + c) : make_float4(0.f, 0.f, 0.f, 0.f));
    o.x *= inv_l;
    o.y *= inv_l;
    o.z *= inv_l;
    o.w *= inv_l;
    if (ok) o4[c] = o;
  }
}

// STAGES chunks in flight (cp.async groups): the block-table read and the K/V copy of chunk c + STAGES - 1
// overlap the math of chunk c, which is what decode with short contexts is bound by.
// Grid (tile tokens, KV heads x head groups, Z): block z computes partitions z, z + Z, ... of its token (Z is
// only parallelism; the partitions and their arithmetic do not depend on it). A token in one partition is
// normalized and written to out here; otherwise each partition goes to the scratch and the last block merges.
// Two stages aim at three blocks per multiprocessor: registers are bounded so that they fit.
// KV: the pool's element policy (kv_elems.cuh); keys and values are widened to f32 as they leave shared memory.
template <int MAXH, int STAGES, class KV>
__global__ void __launch_bounds__(kThreads, STAGES == 2 ? 3 : 1) paged_attention_kernel(const AttnParams p) {
  constexpr int EB = KV::kBytes, CP = 4 * EB;  // bytes of an element, of a copy (four elements)
  constexpr bool kScaled = KV::kType == KvDtype::I8;
  extern __shared__ float4 smem4[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(smem4);
  const int hd = p.hd, ld = hd + 4, hd4 = hd / 4, ldb = ld * EB;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t tl = blockIdx.x;  // token within the tile
  const int64_t t = p.t0 + tl;
  const int kvh = int(blockIdx.y) / p.n_hgroups;
  const int g0 = (int(blockIdx.y) % p.n_hgroups) * p.heads_per_block;  // first head of this block in the group
  const int Gb = min(p.heads_per_block, p.group - g0);                  // heads handled here

  TL_MARKS
  TL_MARK(0);
  // Positions and block tables are uploaded before the step's first kernel and no kernel writes them: read before
  // waiting on the previous kernel, so a block without a partition of this token (most of a one-token launch's
  // blocks: Z is sized for the longest context the launch allows) leaves at once.
  const KeyRange kr_tok = token_keys(p, t);
  const KeySplit split = split_keys(kr_tok.count(), p.part_keys);
  if (int(blockIdx.z) >= split.parts) return;  // block-uniform, before any barrier: this token has fewer partitions
  const int32_t* bt = p.tok.block_tables + p.tok.table_off[t];

  unsigned char* Ks = smem;                          // [STAGES][kChunk][ld] elements
  unsigned char* Vs = Ks + STAGES * kChunk * ldb;    // [STAGES][kChunk][ld] elements
  uint32_t* Sk = reinterpret_cast<uint32_t*>(Vs + STAGES * kChunk * ldb);  // int8: [STAGES][kChunk] K scale words
  uint32_t* Sv = Sk + STAGES * kChunk;                                      // V scale words
  int* Sh = reinterpret_cast<int*>(Sv + STAGES * kChunk);                   // each key's scale shift in its words
  float* Qs = kScaled ? reinterpret_cast<float*>(Sh + STAGES * kChunk)
                      : reinterpret_cast<float*>(Vs + STAGES * kChunk * ldb);  // [Gb][hd]
  float* Ps = Qs + p.heads_per_block * hd;           // [Gb][kChunk]
  float* Ms = Ps + p.heads_per_block * kChunk;       // [Gb] running max
  float* Ls = Ms + p.heads_per_block;                // [Gb] running sum
  float* As = Ls + p.heads_per_block;                // [Gb] this chunk's rescale factor

  const int bs = p.tok.block_size;
  // Copy ownership when hd/4 divides the block and block_size is a power of two: thread = (dim column e_fixed,
  // keys j_first, j_first + j_step, ...), so the chunk loop needs no division.
  const int bs_shift = __ffs(bs) - 1;
  const bool fast_idx = (bs & (bs - 1)) == 0 && kThreads % hd4 == 0;
  const int e_fixed = tid % hd4, j_first = tid / hd4, j_step = kThreads / hd4;
  const int hq0 = kvh * p.group + g0;                     // first query head of this block
  const int64_t head0 = int64_t(t) * p.n_heads + hq0;     // its row in q / out
  const float4* q4 = reinterpret_cast<const float4*>(p.q + head0 * hd);

  const int64_t col0 = int64_t(kvh) * hd;
  // P·V ownership: thread = (column of 4 dims, head slot); heads slot, slot + slots, ... (< MAXH of them).
  const int slots = kThreads / hd4;
  const int col = tid % hd4, slot = tid / hd4;
  const bool pv_active = slot < slots;

  // Keys [lo, kv_end) of the current partition; the whole range when the token is not split.
  int lo = 0, kv_end = 0, nchunks = 0;
  auto set_part = [&](int part) {
    lo = kr_tok.lo + part * split.len;
    kv_end = split.parts == 1 ? kr_tok.end : min(kr_tok.end, lo + split.len);
    nchunks = (max(0, kv_end - lo) + kChunk - 1) / kChunk;
  };
  int skip = -1;  // a key the copies leave out (its row is written by the kernel before: copied after pdl_wait)

  // Always commits a group (empty past the last chunk) so the wait count below is uniform.
  auto load_chunk = [&](int c, int buf) {
    if (c >= nchunks) {
      cp_async_commit();
      return;
    }
    const int k0 = lo + c * kChunk;
    const int nk = min(kChunk, kv_end - k0);
    unsigned char* kd = Ks + buf * kChunk * ldb;
    unsigned char* vd = Vs + buf * kChunk * ldb;
    // int8: the thread copying a key's first column also copies its K and V scale words.
    auto copy_scales = [&](int j, int64_t slot_idx) {
      if constexpr (kScaled) {
        const int64_t si = slot_idx * p.n_kv + kvh;
        cp_async_n<4>(Sk + buf * kChunk + j, p.kscale + kv_scale_word(si));
        cp_async_n<4>(Sv + buf * kChunk + j, p.vscale + kv_scale_word(si));
        Sh[buf * kChunk + j] = kv_scale_shift(si);
      }
    };
    if (fast_idx) {  // the address math of every copy is most of a short chunk's instructions: shifts, no divides
      for (int j = j_first; j < nk; j += j_step) {
        const int key = k0 + j;
        if (key == skip) continue;
        const int64_t slot_idx = (int64_t(bt[key >> bs_shift]) << bs_shift) + (key & (bs - 1));
        const int64_t src = (slot_idx * p.width + col0 + 4 * e_fixed) * EB;
        cp_async_n<CP>(kd + j * ldb + e_fixed * CP, p.kpool + src);
        cp_async_n<CP>(vd + j * ldb + e_fixed * CP, p.vpool + src);
        if (e_fixed == 0) copy_scales(j, slot_idx);
      }
    } else {
      for (int i = tid; i < nk * hd4; i += kThreads) {
        const int j = i / hd4, e = i - j * hd4;
        const int key = k0 + j;
        if (key == skip) continue;
        const int64_t slot_idx = int64_t(bt[key / bs]) * bs + key % bs;
        const int64_t src = (slot_idx * p.width + col0 + 4 * e) * EB;
        cp_async_n<CP>(kd + j * ldb + e * CP, p.kpool + src);
        cp_async_n<CP>(vd + j * ldb + e * CP, p.vpool + src);
        if (e == 0) copy_scales(j, slot_idx);
      }
    }
    cp_async_commit();
  };

  // A one-token launch (decode at batch 1): every key but the token's own was written by earlier steps, so the first
  // partition's first chunks are copied before pdl_wait and only the newest key's row after it.
  const bool early = p.early != 0;
  set_part(int(blockIdx.z));
  if (early) {
    skip = kr_tok.q_pos;
#pragma unroll
    for (int c = 0; c < STAGES - 1; ++c) load_chunk(c, c);
    skip = -1;
  }
  pdl_wait();  // q and this layer's newest keys come from the kernels before
  pdl_trigger();
  TL_MARK(1);
  for (int i = tid; i < Gb * hd4; i += kThreads) reinterpret_cast<float4*>(Qs)[i] = q4[i];
  if (early) {
    // The newest key into its place in the early chunks (its copy was left out), visible after the chunk's barrier.
    const int j = kr_tok.q_pos - lo;
    if (j >= 0 && j < min(kv_end - lo, (STAGES - 1) * kChunk) && tid < hd4) {
      const int key = kr_tok.q_pos;
      const int64_t slot_idx = int64_t(bt[key / bs]) * bs + key % bs;
      const int64_t src = (slot_idx * p.width + col0 + 4 * tid) * EB;
      const int off = ((j / kChunk) * kChunk + j % kChunk) * ldb + tid * CP;
      copy_now<CP>(Ks + off, p.kpool + src);
      copy_now<CP>(Vs + off, p.vpool + src);
      if constexpr (kScaled) {
        if (tid == 0) {
          const int64_t si = slot_idx * p.n_kv + kvh;
          Sk[j] = __ldcg(p.kscale + kv_scale_word(si));  // chunk j / kChunk, key j % kChunk: flat index j
          Sv[j] = __ldcg(p.vscale + kv_scale_word(si));
          Sh[j] = kv_scale_shift(si);
        }
      }
    }
  }

  for (int part = int(blockIdx.z); part < split.parts; part += int(gridDim.z)) {
    if (part != int(blockIdx.z)) set_part(part);
    __syncthreads();  // the previous partition's readers of Ms/Ls are done
    for (int g = tid; g < Gb; g += kThreads) {
      Ms[g] = -INFINITY;
      Ls[g] = 0.0f;
    }

    float4 acc[MAXH];
#pragma unroll
    for (int h = 0; h < MAXH; ++h) acc[h] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (!early || part != int(blockIdx.z)) {
#pragma unroll
      for (int c = 0; c < STAGES - 1; ++c) load_chunk(c, c);
    }
    for (int c = 0; c < nchunks; ++c) {
      const int buf = c % STAGES;
      // Into the buffer chunk c-1 used, freed by the barrier that ended iteration c-1.
      load_chunk(c + STAGES - 1, (c + STAGES - 1) % STAGES);
      cp_async_wait<STAGES - 1>();  // chunk c has landed (for this thread's copies)
      __syncthreads();
      const int nk = min(kChunk, kv_end - (lo + c * kChunk));

      // Scores and the online-softmax update: warp w owns heads w, w+4, ...; lane j owns key j.
      {
        const bool valid = lane < nk;
        const unsigned char* kr = Ks + (buf * kChunk + lane) * ldb;
        const float ksc = kScaled ? kv_scale_of(Sk[buf * kChunk + lane], Sh[buf * kChunk + lane]) : 1.0f;
        for (int gb = warp; gb < Gb; gb += 4 * kWarps) {
          // Four partial sums per score (dims d % 4), combined in a fixed order: a 4x shorter FMA chain.
          float4 s4[4];
#pragma unroll
          for (int hh = 0; hh < 4; ++hh) s4[hh] = make_float4(0.f, 0.f, 0.f, 0.f);
          // The warp's heads gb, gb + 4, ... below Gb as a constant NH, so the loop carries no per-head branch and its
          // shared-memory reads go out several iterations ahead (decode runs one head per warp: a chain of hd/4 reads).
          auto dot = [&](auto nh) {
            constexpr int NH = decltype(nh)::value;
#pragma unroll(NH == 1 ? 8 : NH == 2 ? 4 : 2)
            for (int e = 0; e < hd4; ++e) {
              const float4 kf = KV::load4(kr + e * CP, ksc);
#pragma unroll
              for (int hh = 0; hh < NH; ++hh) {
                const float4 qf = reinterpret_cast<const float4*>(Qs + (gb + hh * kWarps) * hd)[e];
                s4[hh].x = fmaf(qf.x, kf.x, s4[hh].x);
                s4[hh].y = fmaf(qf.y, kf.y, s4[hh].y);
                s4[hh].z = fmaf(qf.z, kf.z, s4[hh].z);
                s4[hh].w = fmaf(qf.w, kf.w, s4[hh].w);
              }
            }
          };
          const int nh = (Gb - gb + kWarps - 1) / kWarps;  // warp-uniform, >= 1
          if (nh == 1) dot(std::integral_constant<int, 1>{});
          else if (nh == 2) dot(std::integral_constant<int, 2>{});
          else if (nh == 3) dot(std::integral_constant<int, 3>{});
          else dot(std::integral_constant<int, 4>{});
          float s[4];
#pragma unroll
          for (int hh = 0; hh < 4; ++hh) s[hh] = (s4[hh].x + s4[hh].y) + (s4[hh].z + s4[hh].w);
#pragma unroll
          for (int hh = 0; hh < 4; ++hh) {
            const int g = gb + hh * kWarps;
            if (g < Gb) {  // warp-uniform
              const float sc = valid ? s[hh] * p.scale : -INFINITY;
              const float mo = Ms[g];
              const float mn = fmaxf(mo, warp_max(sc));
              const float pj = valid ? expf(sc - mn) : 0.0f;
              const float al = expf(mo - mn);  // 0 on the first chunk (mo = -inf)
              const float ps = warp_sum(pj);
              Ps[g * kChunk + lane] = pj;
              __syncwarp();
              if (lane == 0) {
                Ms[g] = mn;
                Ls[g] = Ls[g] * al + ps;
                As[g] = al;
              }
            }
          }
        }
      }
      __syncthreads();

      // acc = acc * alpha + Σ_j p_j · v_j, keys in order.
      if (pv_active) {
        const unsigned char* vb = Vs + buf * kChunk * ldb + col * CP;
        const uint32_t* svb = Sv + buf * kChunk;
        const int* shb = Sh + buf * kChunk;
#pragma unroll
        for (int h = 0; h < MAXH; ++h) {
          const int g = slot + h * slots;
          if (g < Gb) {
            const float al = As[g];
            acc[h].x *= al;
            acc[h].y *= al;
            acc[h].z *= al;
            acc[h].w *= al;
          }
        }
        // Slots past Gb accumulate head 0's weights into registers never stored: no branch in the loop, so its
        // shared-memory reads go out several keys ahead.
        const float* pr[MAXH];
#pragma unroll
        for (int h = 0; h < MAXH; ++h) pr[h] = Ps + (slot + h * slots < Gb ? slot + h * slots : 0) * kChunk;
#pragma unroll 8
        for (int j = 0; j < nk; ++j) {
          const float4 v = KV::load4(vb + j * ldb, kScaled ? kv_scale_of(svb[j], shb[j]) : 1.0f);
#pragma unroll
          for (int h = 0; h < MAXH; ++h) {
            const float pj = pr[h][j];
            acc[h].x = fmaf(pj, v.x, acc[h].x);
            acc[h].y = fmaf(pj, v.y, acc[h].y);
            acc[h].z = fmaf(pj, v.z, acc[h].z);
            acc[h].w = fmaf(pj, v.w, acc[h].w);
          }
        }
      }
      __syncthreads();
    }
    cp_async_wait<0>();                 // no copy may be pending past this partition (only empty groups remain)
    if (nchunks == 0) __syncthreads();  // Ls initialisation visible to the writers below

    if (pv_active) {
#pragma unroll
      for (int h = 0; h < MAXH; ++h) {
        const int g = slot + h * slots;
        if (g < Gb) {
          if (split.parts == 1) {
            const float l = Ls[g];
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // no visible key: zeros
            float4 o = acc[h];
            o.x *= inv;
            o.y *= inv;
            o.z *= inv;
            o.w *= inv;
            reinterpret_cast<float4*>(p.out + (head0 + g) * hd)[col] = o;
          } else {
            const int64_t prow = (tl * p.n_heads + hq0 + g) * kMaxParts + part;  // [tile, n_heads, kMaxParts]
            reinterpret_cast<float4*>(p.part_o + prow * hd)[col] = acc[h];
            if (col == 0) p.part_ml[prow] = make_float2(Ms[g], Ls[g]);
          }
        }
      }
    }
  }
  TL_MARK(2);
  if (split.parts == 1 || p.defer) {  // written, or left for the o projection to merge
    TL_MARK(4);
    TL_FLUSH(3, 0);
    return;
  }
  // The block that finishes the token's last partition merges its heads (no second launch): the count's release
  // publishes the block's partials, its acquire makes the others' visible, and the merge reads them in partition
  // order, whichever block runs it.
  __shared__ int last;
  __syncthreads();
  if (tid == 0) {
    const int mine = (split.parts - int(blockIdx.z) + int(gridDim.z) - 1) / int(gridDim.z);  // partitions done here
    int* ctr = p.done + tl * int64_t(gridDim.y) + blockIdx.y;
    const int before = atomic_add_acq_rel(ctr, mine);
    last = before + mine == split.parts;
    if (last) *ctr = 0;  // every block of this (token, row) has counted: ready for the next launch
  }
  __syncthreads();
  TL_MARK(3);
  if (!last) {
    TL_FLUSH(3, 0);
    return;
  }
  for (int g = warp; g < Gb; g += kWarps) {
    const int64_t base = (tl * p.n_heads + hq0 + g) * kMaxParts;  // row of partition 0 in [tile, n_heads, kMaxParts]
    merge_head(reinterpret_cast<const float4*>(p.part_o) + base * hd4, p.part_ml + base, p.out + (head0 + g) * hd, hd,
               split.parts, lane);
  }
#ifdef RAPID_CUDA_TIMELINE
  __syncthreads();  // every warp's merge done
#endif
  TL_MARK(4);
  TL_FLUSH(4, 0);
}

using AttnKernel = void (*)(AttnParams);

// The kernel instantiation, allowed `smem` bytes of dynamic shared memory on the current device.
template <int MAXH, int STAGES, class KV>
AttnKernel prepared_kernel(size_t smem) {
  if (!allow_dynamic_smem(reinterpret_cast<const void*>(paged_attention_kernel<MAXH, STAGES, KV>), smem, 16))
    throw std::runtime_error("paged_attention: " + std::to_string(smem) + " bytes of shared memory exceed this GPU's limit");
  return paged_attention_kernel<MAXH, STAGES, KV>;
}

template <class KV>
AttnKernel select_kernel_of(int per_thread, int stages, size_t smem) {
  if (stages == 4) {
    if (per_thread <= 1) return prepared_kernel<1, 4, KV>(smem);
    if (per_thread <= 2) return prepared_kernel<2, 4, KV>(smem);
    if (per_thread <= 4) return prepared_kernel<4, 4, KV>(smem);
    return prepared_kernel<kMaxH, 4, KV>(smem);
  }
  if (per_thread <= 1) return prepared_kernel<1, 2, KV>(smem);
  if (per_thread <= 2) return prepared_kernel<2, 2, KV>(smem);
  if (per_thread <= 4) return prepared_kernel<4, 2, KV>(smem);
  return prepared_kernel<kMaxH, 2, KV>(smem);
}

AttnKernel select_kernel(KvDtype t, int per_thread, int stages, size_t smem) {
  switch (t) {
    case KvDtype::F16: return select_kernel_of<KvF16>(per_thread, stages, smem);
    case KvDtype::BF16: return select_kernel_of<KvBF16>(per_thread, stages, smem);
    case KvDtype::I8: return select_kernel_of<KvI8>(per_thread, stages, smem);
    case KvDtype::F32: break;
  }
  return select_kernel_of<KvF32>(per_thread, stages, smem);
}

// ---- split-K configuration (process-wide; set at model load, read at every launch)

std::atomic<int> g_part_keys{-1};  // -1: not set, use RAPID_CUDA_ATTN_SPLIT

void validate_part_keys(long v, const char* what) {
  if (v < 0 || v > (1 << 20) || v % kChunk != 0)
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(v) +
                                " is not 0 (split off) or a positive multiple of 32 keys per partition");
}

// RAPID_CUDA_ATTN_SPLIT: unset or "1" = on with the default partition size, "0" = off, N = N keys per
// partition (a multiple of 32). Read once.
int env_part_keys() {
  static const int v = [] {
    const char* e = std::getenv("RAPID_CUDA_ATTN_SPLIT");
    if (!e || !*e || std::string(e) == "1") return kDefaultPartKeys;
    char* endp = nullptr;
    const long n = std::strtol(e, &endp, 10);
    if (*endp != '\0')
      throw std::invalid_argument(std::string("RAPID_CUDA_ATTN_SPLIT: \"") + e +
                                  "\" is not 0 (split off), 1 (default) or a multiple of 32 keys per partition");
    validate_part_keys(n, "RAPID_CUDA_ATTN_SPLIT");
    return int(n);
  }();
  return v;
}

int current_part_keys() {
  const int v = g_part_keys.load();
  return v >= 0 ? v : env_part_keys();
}

// Partition blocks per multiprocessor that a split launch of `rows` (token, head row) pairs aims for at most
// (RAPID_CUDA_ATTN_FILL, read once, overrides the default for every launch). Scheduling only: a block loops over the
// partitions it is given.
int fill_waves(int64_t rows) {
  static const long v = env_long("RAPID_CUDA_ATTN_FILL", 0);
  if (v > 0) return int(std::min<long>(v, 64));
  return 2 * rows >= sm_count() ? kManyFillWaves : kFillWaves;
}

// Whether one-token launches copy their older keys before pdl_wait (RAPID_CUDA_ATTN_EARLY, read once; default 1).
// Scheduling only: the same keys reach the same places.
bool attn_early() {
  static const bool v = env_long("RAPID_CUDA_ATTN_EARLY", 1) != 0;
  return v;
}

// The per-stream split-K scratch; its counters (the last kCounterBytes) start at zero.
StreamScratch g_scratch("paged_attention", kScratchBytes, kScratchBytes - kCounterBytes);

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// One block per token: k/v [n, n_kv, hd] f32 into slot[t] of the pools, converted as kv::store_slot converts. int8: a
// warp per (head, K or V) row, which it quantizes whole.
template <class KV, int PerLane = kKvRowPerLane>
__global__ void kv_write_kernel(const float* __restrict__ k, const float* __restrict__ v, const int32_t* slot,
                                const KvCache kv, int n_kv, int hd) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const int64_t sl = slot[t];
  if (sl < 0) return;  // padding token: nothing to store
  const int64_t width = int64_t(n_kv) * hd;
  const float* ks = k + t * width;
  const float* vs = v + t * width;
  if constexpr (KV::kType == KvDtype::I8) {
    const int lane = int(threadIdx.x) & 31;
    for (int r = int(threadIdx.x) >> 5; r < 2 * n_kv; r += int(blockDim.x) >> 5) {
      const int h = r >> 1;
      const float* x = (r & 1 ? vs : ks) + int64_t(h) * hd;
      int8_t* codes = static_cast<int8_t*>(r & 1 ? kv.v : kv.k) + sl * width + int64_t(h) * hd;
      uint16_t* scale = (r & 1 ? kv.vs : kv.ks) + sl * n_kv + h;
      kv_store_i8_row<PerLane>([&](int d) { return x[d]; }, hd, codes, scale, lane);
    }
  } else {
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
      KV::store(kv.k, sl * width + i, ks[i]);
      KV::store(kv.v, sl * width + i, vs[i]);
    }
  }
}

// Deferred partials (AttnPartials) merged into out [n_heads, hd]: block h merges head h with merge_head, as the
// attention launch would have; a token in one partition was written by the attention itself.
__global__ void merge_partials_kernel(const AttnPartials a, float* out) {
  pdl_wait();
  pdl_trigger();
  const int parts = deferred_parts(a);
  if (parts <= 1) return;
  const int64_t base = int64_t(blockIdx.x) * kMaxParts;
  merge_head(reinterpret_cast<const float4*>(a.o) + base * (a.head_dim / 4), reinterpret_cast<const float2*>(a.ml) + base,
             out + int64_t(blockIdx.x) * a.head_dim, a.head_dim, parts, int(threadIdx.x));
}

// Whether one-token split launches leave their partitions for the o projection to merge (RAPID_CUDA_ATTN_DEFER, read
// once; default 1). Scheduling only: both merges compute the same bits.
bool attn_defer() {
  static const bool v = env_long("RAPID_CUDA_ATTN_DEFER", 1) != 0;
  return v;
}

}  // namespace

void attention_merge(const AttnPartials& a, float* out, cudaStream_t s) {
  if (!a.o) return;
  launch(merge_partials_kernel, dim3(unsigned(a.n_heads)), dim3(32), 0, s, "attention_merge launch", a, out);
}

void paged_attention(const float* q, float* out, int64_t T, const AttnTokens& tok, const KvCache& kv, int n_heads,
                     int n_kv_heads, int head_dim, float scale, int window, cudaStream_t s, AttnPartials* defer) {
  if (defer) *defer = AttnPartials{};
  if (T <= 0) return;
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
    throw std::runtime_error("paged_attention: n_heads " + std::to_string(n_heads) + " is not a multiple of n_kv_heads " +
                             std::to_string(n_kv_heads));
  // 256 bounds the double-buffered K/V chunks (4 * 32 * (hd + 4) floats) to the 227 KB of shared memory.
  if (head_dim <= 0 || head_dim % 4 != 0 || head_dim > 256)
    throw std::runtime_error("paged_attention: head_dim " + std::to_string(head_dim) +
                             " must be a positive multiple of 4 up to 256");
  if (!aligned16(q) || !aligned16(out) || !aligned16(kv.k) || !aligned16(kv.v))
    throw std::runtime_error("paged_attention: q, out and the pools must be 16-byte aligned");
  const bool scaled = kv.dtype == KvDtype::I8;
  if (scaled && (!kv.ks || !kv.vs || reinterpret_cast<uintptr_t>(kv.ks) % 4 || reinterpret_cast<uintptr_t>(kv.vs) % 4))
    throw std::runtime_error("paged_attention: an int8 KV cache needs its scales, 4-byte aligned");
  if (tok.block_size <= 0) throw std::runtime_error("paged_attention: block_size must be positive");
  AttnParams p;
  p.q = q;
  p.out = out;
  p.tok = tok;
  p.kpool = static_cast<const unsigned char*>(kv.k);
  p.vpool = static_cast<const unsigned char*>(kv.v);
  p.kscale = reinterpret_cast<const uint32_t*>(kv.ks);
  p.vscale = reinterpret_cast<const uint32_t*>(kv.vs);
  p.n_kv = n_kv_heads;
  p.n_heads = n_heads;
  p.group = n_heads / n_kv_heads;
  p.hd = head_dim;
  p.width = n_kv_heads * head_dim;
  p.window = window;
  p.scale = scale;
  // One token: its own key is the only one this step writes (a batch of one sequence's tokens writes several).
  p.early = T == 1 && attn_early() ? 1 : 0;
  p.defer = 0;
  // Heads per block: all of the group when the P·V accumulators fit (MAXH per thread), else split
  // the group over several blocks (each still reads the keys once). Few tokens (decode) split it further,
  // towards kMinBlocks blocks per partition: a head's arithmetic does not depend on the heads beside it.
  const int slots = kThreads / (head_dim / 4);
  p.n_hgroups = (p.group + kMaxH * slots - 1) / (kMaxH * slots);
  const int64_t want = (kMinBlocks + T * n_kv_heads - 1) / (T * n_kv_heads);
  p.n_hgroups = int(std::clamp<int64_t>(want, p.n_hgroups, p.group));
  p.heads_per_block = (p.group + p.n_hgroups - 1) / p.n_hgroups;
  p.n_hgroups = (p.group + p.heads_per_block - 1) / p.heads_per_block;  // no block without a head
  const int per_thread = (p.heads_per_block + slots - 1) / slots;
  const unsigned gy = unsigned(n_kv_heads * p.n_hgroups);

  // Split-K unless off, or the layer's window keeps every token within one partition. (Bidirectional spans
  // can see a few keys past the window; they then run in one pass, in every batch alike.)
  const int pk = current_part_keys();
  const bool split = !(pk <= 0 || (window > 0 && window <= pk));
  // Partitions of a token with the most keys the launch allows (the bound; a token past it still gets all its
  // partitions, its blocks loop).
  int64_t bound = tok.max_keys;
  if (window > 0) bound = bound > 0 ? std::min<int64_t>(bound, window) : window;
  const int parts = !split ? 1 : bound > 0 ? int(std::clamp<int64_t>((bound + pk - 1) / pk, 1, kMaxParts)) : kMaxParts;
  // Four K/V stages in flight where they fit next to Q (head_dim <= 128) and a block walks more than two chunks: one
  // block per multiprocessor, best while the blocks with work fit twice over on the GPU (few sequences). Otherwise
  // two stages: half the shared memory, so the blocks fit beside the q/k/v matmul's and start while it runs (H200,
  // prompt 128, batch 1: attention 7.4 us from 9.5 with four stages, 3B +5.6%), and many blocks finish in fewer waves.
  const int64_t busy = T * int64_t(gy) * parts;
  const int64_t walk = bound <= 0 ? INT64_MAX : split ? split_keys(int(std::min<int64_t>(bound, 1 << 30)), pk).len : bound;
  const int stages = head_dim <= 128 && walk > 2 * kChunk && (!split || busy <= 2 * int64_t(sm_count())) ? 4 : 2;
  const size_t smem = attn_smem_bytes(head_dim, p.heads_per_block, stages, int(kv_elem_bytes(kv.dtype)), scaled);
  const AttnKernel kernel = select_kernel(kv.dtype, per_thread, stages, smem);
  if (!split) {
    p.t0 = 0;
    p.part_keys = 0;
    p.part_o = nullptr;
    p.part_ml = nullptr;
    launch(kernel, dim3(unsigned(T), gy, 1), dim3(kThreads), smem, s, "paged_attention launch", p);
    return;
  }
  // Partition blocks per (token, head row): one per partition of the bound, fewer for many tokens, which fill
  // the GPU with fewer blocks each (they loop): idle blocks of tokens with short contexts cost more than the
  // loop. Z and the stages only shape the launch, never a token's arithmetic.
  const int64_t fill = int64_t(fill_waves(T * gy)) * sm_count();
  const int gz0 = int(std::clamp<int64_t>((fill + T * gy - 1) / (T * gy), 1, parts));
  const int per = ceil_div(parts, gz0), gz = ceil_div(parts, per);  // every block walks `per` partitions (the last fewer)
  // Token tiles that fit the scratch: [tile, n_heads, kMaxParts, hd] outputs, [tile, n_heads, kMaxParts] (m, l),
  // and the [tile, gy] partition counters in the scratch's last kCounterBytes.
  const size_t per_token = size_t(n_heads) * kMaxParts * (size_t(head_dim) * sizeof(float) + sizeof(float2));
  const int64_t tile = std::min(int64_t((kScratchBytes - kCounterBytes) / per_token), int64_t(kCounterBytes / (gy * sizeof(int))));
  if (tile < 1) throw std::runtime_error("paged_attention: n_heads " + std::to_string(n_heads) + " too large for the split-K scratch");
  char* scratch = static_cast<char*>(g_scratch.get(s));
  p.part_keys = pk;
  p.part_o = reinterpret_cast<float*>(scratch);
  p.part_ml = reinterpret_cast<float2*>(scratch + size_t(tile) * n_heads * kMaxParts * head_dim * sizeof(float));
  p.done = reinterpret_cast<int*>(scratch + kScratchBytes - kCounterBytes);
  // One token, one tile, at most 8 partitions (what the o projection's staging holds in flight): its partials at rows
  // [h][0..32) of the scratch.
  if (defer && T == 1 && parts <= 8 && attn_defer()) {
    p.defer = 1;
    *defer = AttnPartials{p.part_o, reinterpret_cast<const float*>(p.part_ml), tok.q_pos, tok.kv_end, pk, window, n_heads,
                          head_dim};
  }
  for (int64_t t0 = 0; t0 < T; t0 += tile) {
    const unsigned n = unsigned(std::min(tile, T - t0));
    p.t0 = t0;
    launch(kernel, dim3(n, gy, unsigned(gz)), dim3(kThreads), smem, s, "paged_attention launch", p);
  }
}

void set_attention_split(int partition_keys) {
  if (partition_keys != -1) validate_part_keys(partition_keys, "set_attention_split");
  g_part_keys.store(partition_keys);
}

void paged_attention_reserve(cudaStream_t s) { g_scratch.get(s); }

void paged_attention_release(cudaStream_t s) { g_scratch.release(s); }

void kv_write(const float* k, const float* v, int64_t n, const int32_t* slot, const KvCache& kv, int n_kv_heads,
              int head_dim, cudaStream_t s) {
  if (n <= 0) return;
  // int8 rows wider than 256 (Gemma 4's full layers, read by wide_attention) take twice the values per lane.
  if (kv.dtype == KvDtype::I8 && head_dim > 64 * kKvRowPerLane)
    throw std::runtime_error("kv_write: an int8 KV cache takes head_dim up to " + std::to_string(64 * kKvRowPerLane));
  auto go = [&](auto kernel) {
    launch(kernel, dim3(unsigned(n)), dim3(128), 0, s, "kv_write launch", k, v, slot, kv, n_kv_heads, head_dim);
  };
  switch (kv.dtype) {
    case KvDtype::F32: return go(kv_write_kernel<KvF32>);
    case KvDtype::F16: return go(kv_write_kernel<KvF16>);
    case KvDtype::BF16: return go(kv_write_kernel<KvBF16>);
    case KvDtype::I8:
      return head_dim > 32 * kKvRowPerLane ? go(kv_write_kernel<KvI8, 2 * kKvRowPerLane>) : go(kv_write_kernel<KvI8>);
  }
}

}  // namespace rapid::cuda
