// DeviceKv (cuda/paged_ops.h): the device KV cache of the CUDA op backend and its per-step metadata (slots, block
// tables, visible-key ends), built on the host from the spans exactly as cuda_decoder.cu builds a step's.
#include "cuda/paged_ops.h"
#include <algorithm>
#include <stdexcept>
#include <string>
#include "cuda/cuda_backend.h"
#include "cuda/wide_attention.h"

namespace rapid::cuda {

namespace {

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// Tokens covered by the spans: [0, end of the last span).
int64_t span_tokens(const std::vector<SeqSpan>& spans) {
  int64_t T = 0;
  for (const SeqSpan& sp : spans) T = std::max(T, sp.start + sp.n);
  return T;
}

void check_blocks(const SeqSpan& sp, int64_t pos, int block_size, int num_blocks) {
  const int64_t b = pos / block_size;
  if (b >= sp.n_blocks || sp.block_table[b] < 0 || sp.block_table[b] >= num_blocks)
    throw std::runtime_error("KV: position " + std::to_string(pos) + " has no valid block in its span's table of " +
                             std::to_string(sp.n_blocks) + " blocks");
}

}  // namespace

DeviceKv::DeviceKv(const KvPool& g)
    : num_blocks_(g.num_blocks()), block_size_(g.block_size()), dtype_(g.dtype()) {
  const size_t slots = size_t(num_blocks_) * size_t(block_size_);
  std::vector<size_t> off;  // per layer: byte offset of its K codes (owning layers only)
  for (int l = 0; l < g.num_layers(); ++l) {
    const KvLayerSpec& sp = g.layer(l);
    layers_.push_back(sp);
    off.push_back(bytes_);
    if (sp.cache_of >= 0) continue;
    const size_t codes = align256(slots * size_t(sp.n_kv_heads) * size_t(sp.head_dim) * kv_elem_bytes(dtype_));
    const size_t scales = align256(slots * size_t(sp.n_kv_heads) * kv_scale_bytes(dtype_));
    bytes_ += 2 * codes + 2 * scales;
  }
  const int64_t free = free_bytes();
  if (int64_t(bytes_) > free - (int64_t(512) << 20))
    throw std::runtime_error("KV cache of " + std::to_string(bytes_ >> 20) + " MiB does not fit in the GPU's free memory (" +
                             std::to_string(free >> 20) + " MiB after the weights); lower --kv-cache-memory");
  check(cudaMalloc(&mem_, std::max<size_t>(bytes_, 1)), "cudaMalloc KV cache");
  // Zeroed so that a never-written slot is harmless (no NaN garbage reaches a softmax).
  check(cudaMemset(mem_, 0, std::max<size_t>(bytes_, 1)), "cudaMemset KV cache");
  // The memset runs on the legacy stream, unordered with the op backend's non-blocking stream: finish it first.
  check(cudaDeviceSynchronize(), "cudaMemset KV cache (sync)");
  cache_.resize(layers_.size());
  char* const mem = static_cast<char*>(mem_);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const KvLayerSpec& sp = layers_[l];
    if (sp.cache_of >= 0) continue;
    const size_t codes = align256(slots * size_t(sp.n_kv_heads) * size_t(sp.head_dim) * kv_elem_bytes(dtype_));
    const bool scaled = kv_scale_bytes(dtype_) > 0;
    const size_t scales = align256(slots * size_t(sp.n_kv_heads) * kv_scale_bytes(dtype_));
    // [K codes | V codes | K scales | V scales] from off[l], as the host pool orders them.
    cache_[l] = KvCache{dtype_, mem + off[l], mem + off[l] + codes,
                        scaled ? reinterpret_cast<uint16_t*>(mem + off[l] + 2 * codes) : nullptr,
                        scaled ? reinterpret_cast<uint16_t*>(mem + off[l] + 2 * codes + scales) : nullptr};
  }
  for (size_t l = 0; l < layers_.size(); ++l) {
    const int src = layers_[l].cache_of;
    if (src < 0) continue;
    if (src >= int(layers_.size()) || layers_[size_t(src)].cache_of >= 0)
      throw std::runtime_error("KV: layer " + std::to_string(l) + " reads layer " + std::to_string(src) +
                               ", which owns no cache");
    cache_[l] = cache_[size_t(src)];
  }
}

DeviceKv::~DeviceKv() {
  for (StepMeta& m : metas_) cudaFree(m.dev);
  if (mem_) cudaFree(mem_);
}

bool DeviceKv::same_spans(const StepMeta& m, const std::vector<SeqSpan>& spans) {
  if (m.keys.size() != spans.size()) return false;
  auto it = m.lists.begin();
  for (size_t i = 0; i < spans.size(); ++i) {
    const SeqSpan& x = spans[i];
    const SpanKey& k = m.keys[i];
    if (x.start != k.start || x.n != k.n || x.context_len != k.context_len || x.n_blocks != k.n_blocks ||
        x.n_bidir != k.n_bidir)
      return false;
    if (!std::equal(x.block_table, x.block_table + x.n_blocks, it)) return false;
    it += x.n_blocks;
    if (!std::equal(x.bidir, x.bidir + 2 * x.n_bidir, it)) return false;
    it += 2 * x.n_bidir;
  }
  return true;
}

const DeviceKv::StepMeta& DeviceKv::step_meta(const std::vector<SeqSpan>& spans, int64_t T, cudaStream_t s) {
  for (const StepMeta& m : metas_)
    if (same_spans(m, spans)) return m;
  // Per token: its pool slot (-1: none), where its span's table starts in the concatenated tables, its position,
  // its visible-key end (q_pos + 1, or the end of the bidirectional block holding it). Indexed, never through
  // pointers into h: appending a span's table may reallocate it (a heap corruption on the second span of a step,
  // found on the H100).
  StepMeta m;
  std::vector<int32_t>& h = m.host;
  h.assign(size_t(4 * T), 0);
  for (int64_t t = 0; t < T; ++t) h[size_t(t)] = -1, h[size_t(3 * T + t)] = 1;  // a token no span covers
  for (const SeqSpan& x : spans) {
    const int32_t off = int32_t(h.size() - size_t(4 * T));
    for (int64_t i = 0; i < x.n; ++i) {
      const int64_t t = x.start + i, pos = x.context_len + i;
      check_blocks(x, pos, block_size_, num_blocks_);
      int64_t end = pos + 1;
      for (int64_t j = 0; j < x.n_bidir; ++j)
        if (i >= x.bidir[2 * j] && i < x.bidir[2 * j + 1]) end = x.context_len + x.bidir[2 * j + 1];
      check_blocks(x, end - 1, block_size_, num_blocks_);
      h[size_t(t)] = int32_t(int64_t(x.block_table[pos / block_size_]) * block_size_ + pos % block_size_);  // slot
      h[size_t(T + t)] = off;                       // table_off
      h[size_t(2 * T + t)] = int32_t(pos);          // q_pos
      h[size_t(3 * T + t)] = int32_t(end);          // kv_end
      m.max_keys = std::max(m.max_keys, end);
    }
    h.insert(h.end(), x.block_table, x.block_table + x.n_blocks);
    m.keys.push_back(SpanKey{x.start, x.n, x.context_len, x.n_blocks, x.n_bidir});
    m.lists.insert(m.lists.end(), x.block_table, x.block_table + x.n_blocks);
    m.lists.insert(m.lists.end(), x.bidir, x.bidir + 2 * x.n_bidir);
  }
  // A miss replaces the oldest entry. Its copy may still be read by queued kernels: it is freed in stream order.
  if (metas_.size() == kStepMetas) {
    check(cudaFreeAsync(metas_.front().dev, s), "cudaFreeAsync (KV metadata)");
    metas_.erase(metas_.begin());
  }
  check(cudaMallocAsync(reinterpret_cast<void**>(&m.dev), h.size() * sizeof(int32_t), s), "cudaMallocAsync (KV metadata)");
  check(cudaMemcpyAsync(m.dev, h.data(), h.size() * sizeof(int32_t), cudaMemcpyHostToDevice, s), "KV metadata upload");
  metas_.push_back(std::move(m));
  return metas_.back();
}

bool DeviceKv::mirrors(const KvPool& g) const {
  if (g.num_blocks() != num_blocks_ || g.block_size() != block_size_ || g.dtype() != dtype_ ||
      g.num_layers() != int(layers_.size()))
    return false;
  for (int l = 0; l < g.num_layers(); ++l) {
    const KvLayerSpec& a = g.layer(l);
    const KvLayerSpec& b = layers_[size_t(l)];
    if (a.n_kv_heads != b.n_kv_heads || a.head_dim != b.head_dim || a.cache_of != b.cache_of) return false;
  }
  return true;
}

void DeviceKv::write(int layer, const float* k, const float* v, const std::vector<SeqSpan>& spans, cudaStream_t s) {
  if (layer < 0 || layer >= int(layers_.size())) throw std::out_of_range("write_kv: layer " + std::to_string(layer));
  const KvLayerSpec& sp = layers_[size_t(layer)];
  if (sp.cache_of >= 0)
    throw std::invalid_argument("write_kv: layer " + std::to_string(layer) + " reads another layer's cache");
  const int64_t T = span_tokens(spans);
  if (T == 0) return;
  kv_write(k, v, T, step_meta(spans, T, s).dev, cache_[size_t(layer)], sp.n_kv_heads, sp.head_dim, s);
}

void DeviceKv::attend(int layer, const float* q, float* out, const std::vector<SeqSpan>& spans, const AttnShape& a,
                      cudaStream_t s) {
  if (layer < 0 || layer >= int(layers_.size())) throw std::out_of_range("paged_attention: layer " + std::to_string(layer));
  const KvLayerSpec& own = layers_[size_t(layer)].cache_of >= 0 ? layers_[size_t(layers_[size_t(layer)].cache_of)]
                                                                 : layers_[size_t(layer)];
  if (own.n_kv_heads != a.n_kv_heads || own.head_dim != a.head_dim)
    throw std::invalid_argument("paged_attention: layer " + std::to_string(layer) + " caches " +
                                std::to_string(own.n_kv_heads) + " KV heads of " + std::to_string(own.head_dim) +
                                ", the call has " + std::to_string(a.n_kv_heads) + " of " + std::to_string(a.head_dim));
  const int64_t T = span_tokens(spans);
  if (T == 0) return;
  const StepMeta& m = step_meta(spans, T, s);
  AttnTokens tok;
  tok.table_off = m.dev + T;
  tok.q_pos = m.dev + 2 * T;
  tok.kv_end = m.dev + 3 * T;
  tok.block_tables = m.dev + 4 * T;
  tok.block_size = block_size_;
  tok.max_keys = m.max_keys;
  const KvCache& c = cache_[size_t(layer)];
  if (a.head_dim <= 256)
    paged_attention(q, out, T, tok, c, a.n_heads, a.n_kv_heads, a.head_dim, a.scale, a.window, s);
  else
    wide_attention(q, out, T, tok, c, a.n_heads, a.n_kv_heads, a.head_dim, a.scale, a.window, s);
}

}  // namespace rapid::cuda
