// The attention inner kernel: G query heads sharing one KV head × a chunk of consecutive query
// tokens of one sequence, against that sequence's keys read through its block table.
// S = Q·Kᵀ·scale, causal (+ bidirectional blocks, + sliding window) mask, softmax, O = P·V — flash-style
// tiles over the keys (online softmax), so each key is loaded once per query chunk and memory stays flat. AVX2+FMA or portable scalar, chosen once per process.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>
#include "kv/kv_dtype.h"

namespace rapid {

struct AttnTile {
  int hd = 0, group = 1, n_heads = 0;
  float scale = 1;
  int window = 0;                  // 0 = full causal
  const float* q = nullptr;        // query (t, g) at q[t*n_heads*hd + g*hd]
  float* out = nullptr;            // same layout as q
  int64_t n_q = 0;                 // query tokens in the chunk
  int64_t qpos0 = 0;               // KV index of the first query token
  KvDtype dtype = KvDtype::F32;    // stored type; non-f32 rows are converted to f32 as they are read
  const uint8_t* k_base = nullptr; // layer K + kv_head*hd elements
  const uint8_t* v_base = nullptr; // layer V + kv_head*hd elements
  const uint16_t* ks_base = nullptr, *vs_base = nullptr;  // int8: layer scales + kv_head (else null)
  size_t block_stride = 0, token_stride = 0;  // in elements
  const int32_t* block_table = nullptr;
  int block_size = 16;
  // Bidirectional blocks: pairs [start, end) of KV indices (sorted, disjoint); a query inside one
  // also sees the block's later keys (Gemma 3 image tokens). The window still applies.
  const int32_t* bidir = nullptr;  // [2 * n_bidir], offsets relative to bidir_base
  int64_t n_bidir = 0;
  int64_t bidir_base = 0;
};

// Keys per tile of the online softmax, at fixed absolute positions (multiples of it): part of every
// row's arithmetic, so changing it changes results (never per call). 256 f32 keys of 64-128 dims and
// their scores for ~256 rows stay in L2.
constexpr int64_t kAttnKeyTile = 256;

struct AttnScratch {
  std::vector<float> qt;     // [M, hd] gathered queries, M = n_q * group
  std::vector<float> kt;     // [hd, Nkp] one tile's keys transposed, zero padded to Nkp (<= kAttnKeyTile)
  std::vector<float> s;      // [M, Nkp] scores → probabilities of one key tile
  std::vector<float> o;      // [M, hd] running outputs (unnormalised) before scattering to heads
  std::vector<float> ot;     // [M, hd] one key tile's P·V
  std::vector<float> mx, sum, alpha;  // [M] running max, running Σexp, this tile's rescale of the old
  std::vector<int64_t> ra, rb;        // [M] each row's keys in the current tile, tile-local [ra, rb]
  std::vector<int64_t> qlo, qhi;      // [n_q] visible key range of each query token (absolute)
  std::vector<const void*> vrow;      // [kAttnKeyTile] value rows of the tile (stored or converted)
  std::vector<float> kr;     // [hd] one key converted to f32 (16-bit / int8 caches)
  std::vector<float> vc;     // [kAttnKeyTile, hd] values converted to f32 (16-bit / int8, portable path)
  std::vector<float> vs;     // [kAttnKeyTile] int8 value scales as f32 (SIMD path)
};

void attention_tile(const AttnTile& t, AttnScratch& scratch);

}  // namespace rapid
