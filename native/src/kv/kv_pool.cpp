#include "kv/kv_pool.h"
#include <stdexcept>
#include <string>

namespace rapid {

KvPool::KvPool(std::vector<KvLayerSpec> layers, int block_size, size_t budget_bytes, bool allocate)
    : layers_(std::move(layers)), block_size_(block_size) {
  if (block_size <= 0) throw std::runtime_error("KV block size must be positive, got " + std::to_string(block_size));
  size_t floats_per_block = 0;  // K + V of every owning layer for one block
  for (const KvLayerSpec& l : layers_)
    if (l.cache_of < 0) floats_per_block += 2 * size_t(block_size) * size_t(l.n_kv_heads) * size_t(l.head_dim);
  per_block_ = floats_per_block * sizeof(float);
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
    off += 2 * size_t(num_blocks_) * size_t(block_size) * size_t(layers_[i].n_kv_heads) * size_t(layers_[i].head_dim);
  }
  if (!allocate) return;
  // Zero-filled so that a never-written slot is harmless (no NaN garbage reaches a softmax).
  data_.reset(static_cast<float*>(std::calloc(bytes_ / sizeof(float), sizeof(float))));
  if (!data_) throw std::runtime_error("KV pool: cannot allocate " + std::to_string(bytes_) + " bytes");
}

KvPool::View KvPool::view(int layer) {
  if (!data_) throw std::runtime_error("KV pool: this model's cache lives on its device, not in host memory");
  int owner = layer;
  while (layers_[size_t(owner)].cache_of >= 0) owner = layers_[size_t(owner)].cache_of;
  const KvLayerSpec& l = layers_[size_t(owner)];
  const size_t row = size_t(l.n_kv_heads) * size_t(l.head_dim);
  const size_t region = size_t(num_blocks_) * size_t(block_size_) * row;
  float* k = data_.get() + layer_off_[size_t(owner)];
  return View{k, k + region, size_t(block_size_) * row, row};
}

}  // namespace rapid
