#include "layers/attention.h"
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include "kv/kv_convert.h"
#include "layers/attention_tile.h"

namespace rapid {

void write_kv(KvPool& kv, int layer, const float* k, const float* v, const std::vector<SeqSpan>& spans) {
  const KvPool::View kvv = kv.view(layer);
  const int bs = kv.block_size();
  const int hd = kvv.head_dim;
  for (const SeqSpan& sp : spans)
    for (int64_t i = 0; i < sp.n; ++i) {
      const int64_t slot = sp.context_len + i;
      const size_t off = size_t(sp.block_table[slot / bs]) * kvv.block_stride + size_t(slot % bs) * kvv.token_stride;
      const int64_t src = (sp.start + i) * int64_t(kvv.token_stride);  // [n_kv_heads, hd] of token i
      const size_t si = off / size_t(hd);                               // first scale of the slot (int8)
      kv::store_slot(kvv.dtype, k + src, kvv.k + off * kvv.elem_bytes, kvv.ks ? kvv.ks + si : nullptr, kvv.n_kv_heads, hd);
      kv::store_slot(kvv.dtype, v + src, kvv.v + off * kvv.elem_bytes, kvv.vs ? kvv.vs + si : nullptr, kvv.n_kv_heads, hd);
    }
}

namespace {
struct WorkItem {
  int span;
  int kv_head;
  int64_t t0, t1;  // query token range within the span
};
}  // namespace

void paged_attention(ThreadPool& pool, KvPool& kv, int layer, const float* q, float* out,
                     const std::vector<SeqSpan>& spans, const AttnShape& s) {
  const int hd = s.head_dim;
  const int group = s.n_heads / s.n_kv_heads;  // query heads per KV head, processed together
  const int bs = kv.block_size();
  // Work items: (row, KV head, query chunk). A row's results do not depend on its chunk (attention_tile
  // tiles the keys at fixed positions), so chunks are sized for the caches: ~kAttnKeyTile query rows.
  const int64_t chunk = std::max<int64_t>(1, kAttnKeyTile / group);
  std::vector<WorkItem> items;
  for (size_t r = 0; r < spans.size(); ++r) {
    const SeqSpan& sp = spans[r];
    for (int h = 0; h < s.n_kv_heads; ++h)
      for (int64_t t = 0; t < sp.n; t += chunk) items.push_back({int(r), h, t, std::min(sp.n, t + chunk)});
  }
  // Causal chunks late in a long prompt cost the most: hand them out first, through an atomic
  // counter, so a descheduled thread (shared machine) delays one item, not a fixed share.
  auto cost = [&](const WorkItem& w) { return (w.t1 - w.t0) * (spans[size_t(w.span)].context_len + w.t1); };
  std::stable_sort(items.begin(), items.end(), [&](const WorkItem& a, const WorkItem& b) { return cost(a) > cost(b); });

  const KvPool::View kvv = kv.view(layer);
  std::atomic<int64_t> next{0};
  const int64_t n_items = int64_t(items.size());
  pool.run([&](int, int) {
    AttnScratch scratch;
    for (int64_t it = next.fetch_add(1, std::memory_order_relaxed); it < n_items;
         it = next.fetch_add(1, std::memory_order_relaxed)) {
      const WorkItem& w = items[size_t(it)];
      const SeqSpan& sp = spans[size_t(w.span)];
      AttnTile tile;
      tile.hd = hd;
      tile.group = group;
      tile.n_heads = s.n_heads;
      tile.scale = s.scale;
      tile.window = s.window;
      tile.q = q + (sp.start + w.t0) * s.n_heads * hd + int64_t(w.kv_head) * group * hd;
      tile.out = out + (sp.start + w.t0) * s.n_heads * hd + int64_t(w.kv_head) * group * hd;
      tile.n_q = w.t1 - w.t0;
      tile.qpos0 = sp.context_len + w.t0;
      tile.dtype = kvv.dtype;
      tile.k_base = kvv.k + size_t(w.kv_head) * size_t(hd) * kvv.elem_bytes;
      tile.v_base = kvv.v + size_t(w.kv_head) * size_t(hd) * kvv.elem_bytes;
      tile.ks_base = kvv.ks ? kvv.ks + w.kv_head : nullptr;
      tile.vs_base = kvv.vs ? kvv.vs + w.kv_head : nullptr;
      tile.block_stride = kvv.block_stride;
      tile.token_stride = kvv.token_stride;
      tile.block_table = sp.block_table;
      tile.block_size = bs;
      tile.bidir = sp.bidir;
      tile.n_bidir = sp.n_bidir;
      tile.bidir_base = sp.context_len;
      attention_tile(tile, scratch);
    }
  });
}

}  // namespace rapid
