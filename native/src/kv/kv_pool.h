// The paged KV block pool: one allocation sized from a byte budget, split into num_blocks blocks of
// block_size tokens. Elements are of the pool's KvDtype. Per owning layer: K codes, V codes, each
// [num_blocks, block_size, n_kv_heads, head_dim]; for int8 then K scales, V scales, each
// [num_blocks, block_size, n_kv_heads] f16. A block's bytes (scales included) set how many fit the budget.
// The pool holds no per-request state: which blocks belong to whom travels in each step's plan.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>
#include "kv/kv_dtype.h"

namespace rapid {

struct KvLayerSpec {
  int n_kv_heads = 0;
  int head_dim = 0;
  int cache_of = -1;  // >= 0: this layer reads another layer's cache and has none of its own (Gemma 4)
};

class KvPool {
 public:
  // Throws if the budget cannot hold at least one block. allocate = false: geometry only (a device
  // backend keeps the storage in its own memory; view() then throws).
  KvPool(std::vector<KvLayerSpec> layers, int block_size, size_t budget_bytes, bool allocate = true,
         KvDtype dtype = KvDtype::F32);

  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  size_t bytes() const { return bytes_; }
  size_t bytes_per_block() const { return per_block_; }
  KvDtype dtype() const { return dtype_; }
  const KvLayerSpec& layer(int l) const { return layers_[size_t(l)]; }
  int num_layers() const { return int(layers_.size()); }

  // Raw addressing of one layer's cache, in elements: slot (block, offset) of K starts at element
  // e = block * block_stride + offset * token_stride of k (bytes e * elem_bytes), [n_kv_heads, head_dim];
  // V likewise. int8: head h of that slot has its scale at ks[e / head_dim + h] (vs for V); null otherwise.
  struct View {
    KvDtype dtype;
    size_t elem_bytes;
    uint8_t* k;
    uint8_t* v;
    uint16_t* ks;
    uint16_t* vs;
    size_t block_stride;
    size_t token_stride;
    int n_kv_heads, head_dim;  // of the layer that owns the cache
  };
  View view(int layer);

 private:
  std::vector<KvLayerSpec> layers_;
  std::vector<size_t> layer_off_;  // byte offset of each owning layer's K codes; V codes, then scales follow
  KvDtype dtype_ = KvDtype::F32;
  int block_size_ = 16;
  int num_blocks_ = 0;
  size_t per_block_ = 0;
  size_t bytes_ = 0;
  struct Free { void operator()(uint8_t* p) const { std::free(p); } };
  std::unique_ptr<uint8_t, Free> data_;  // calloc: zeroed pages are committed lazily, on first write
};

}  // namespace rapid
