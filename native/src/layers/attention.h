// Causal GQA attention over the paged KV pool. Each batch row (a sequence's new tokens) first writes
// its K/V into slots contextLen..contextLen+n-1 of its blocks; then each new token attends over the
// row's whole context, read through the row's block table.
#pragma once
#include <cstdint>
#include <vector>
#include "cpu/threadpool.h"
#include "kv/kv_pool.h"

namespace rapid {

// One row of the batch as the layers see it.
struct SeqSpan {
  int64_t start = 0;                    // first token index in the batch
  int64_t n = 0;                        // new tokens this step
  int64_t context_len = 0;              // tokens already in KV before this step
  const int32_t* block_table = nullptr;  // [n_blocks] block ids, in order
  int64_t n_blocks = 0;
  const int32_t* bidir = nullptr;       // [2 * n_bidir] pairs [start, end) of span offsets attending both ways
  int64_t n_bidir = 0;
};

struct AttnShape {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 1.0f;  // multiplies q·k
  int window = 0;      // sliding window W (keep keys with k > q - W); 0 = full causal
};

// k, v [T, n_kv_heads, head_dim] → pool slots of `layer` for every span.
void write_kv(KvPool& kv, int layer, const float* k, const float* v, const std::vector<SeqSpan>& spans);

// q [T, n_heads, head_dim] → out [T, n_heads, head_dim]. Parallel over (row, head, token chunk).
void paged_attention(ThreadPool& pool, KvPool& kv, int layer, const float* q, float* out,
                     const std::vector<SeqSpan>& spans, const AttnShape& s);

}  // namespace rapid
