#include "kv/kv_pool.h"
#include <stdexcept>
#include <string>

namespace rapid {

KvPool::KvPool(std::vector<KvLayerSpec> layers, int block_size, size_t budget_bytes, bool allocate, KvDtype dtype)
    : layers_(std::move(layers)), dtype_(dtype), block_size_(block_size) {
  if (block_size <= 0) throw std::runtime_error("KV block size must be positive, got " + std::to_string(block_size));
  const size_t eb = kv_elem_bytes(dtype), sb = kv_scale_bytes(dtype);
  // Bytes of one token slot of a layer, K and V: codes plus (int8) one scale per head.
  auto slot_bytes = [&](const KvLayerSpec& l) {
    return 2 * (size_t(l.n_kv_heads) * size_t(l.head_dim) * eb + size_t(l.n_kv_heads) * sb);
  };
  for (const KvLayerSpec& l : layers_)
    if (l.cache_of < 0) per_block_ += size_t(block_size) * slot_bytes(l);
  if (per_block_ == 0) throw std::runtime_error("KV pool: model has no cached layers");
  num_blocks_ = int(budget_bytes / per_block_);
  if (num_blocks_ < 1)
    throw std::runtime_error("KV cache budget of " + std::to_string(budget_bytes) + " bytes is below one block (" +
                             std::to_string(per_block_) + " bytes)");
  bytes_ = per_block_ * size_t(num_blocks_);
  size_t off = 0;
  layer_off_.assign(layers_.size(), 0);
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].cache_of >= 0) continue;
    layer_off_[i] = off;
    off += size_t(num_blocks_) * size_t(block_size) * slot_bytes(layers_[i]);
  }
  if (!allocate) return;
  // Zero-filled so that a never-written slot is harmless (no NaN garbage reaches a softmax).
  data_.reset(static_cast<uint8_t*>(std::calloc(bytes_, 1)));
  if (!data_) throw std::runtime_error("KV pool: cannot allocate " + std::to_string(bytes_) + " bytes");
}

KvPool::View KvPool::view(int layer) {
  if (!data_) throw std::runtime_error("KV pool: this model's cache lives on its device, not in host memory");
  int owner = layer;
  while (layers_[size_t(owner)].cache_of >= 0) owner = layers_[size_t(owner)].cache_of;
  const KvLayerSpec& l = layers_[size_t(owner)];
  const size_t row = size_t(l.n_kv_heads) * size_t(l.head_dim);
  const size_t slots = size_t(num_blocks_) * size_t(block_size_);
  const size_t eb = kv_elem_bytes(dtype_);
  uint8_t* k = data_.get() + layer_off_[size_t(owner)];
  uint8_t* v = k + slots * row * eb;
  uint16_t* ks = nullptr;
  uint16_t* vs = nullptr;
  if (kv_scale_bytes(dtype_) > 0) {
    ks = reinterpret_cast<uint16_t*>(v + slots * row * eb);  // 2-byte aligned: the code regions are even-sized
    vs = ks + slots * size_t(l.n_kv_heads);
  }
  return View{dtype_, eb, k, v, ks, vs, size_t(block_size_) * row, row, l.n_kv_heads, l.head_dim};
}

}  // namespace rapid
