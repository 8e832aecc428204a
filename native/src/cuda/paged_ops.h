// The paged-KV half of the CUDA op backend (ops::Backend::write_kv / paged_attention): a device cache laid out as a
// KvPool's geometry (per owning layer: K codes, V codes [slots, n_kv, hd] of the pool's type, int8 scales
// [slots, n_kv] f16, the bytes kv/kv_pool.h keeps on the host), written by attention.cu's kv_write and read by its
// paged_attention (head_dim <= 256) or by cuda/wide_attention.h (Gemma 4's 512-wide full layers).
#pragma once
#include <cuda_runtime.h>
#include <cstdint>
#include <vector>
#include "cuda/cuda_kernels.h"
#include "kv/kv_pool.h"
#include "layers/attention.h"

namespace rapid::cuda {

class DeviceKv {
 public:
  // Allocates (zeroed) every owning layer's region of `geometry`; throws when it does not fit the free memory.
  explicit DeviceKv(const KvPool& geometry);
  ~DeviceKv();
  DeviceKv(const DeviceKv&) = delete;
  DeviceKv& operator=(const DeviceKv&) = delete;

  // Whether this cache mirrors `g` (same layers, blocks, block size and dtype).
  bool mirrors(const KvPool& g) const;
  int64_t bytes() const { return int64_t(bytes_); }

  // k, v [T, n_kv, hd] (device, contiguous) -> slots of `layer` (which owns its cache) for every span's tokens.
  void write(int layer, const float* k, const float* v, const std::vector<SeqSpan>& spans, cudaStream_t s);
  // q [T, n_heads, hd] -> out [T, n_heads, hd] over the cache `layer` reads (its own, or cache_of's).
  void attend(int layer, const float* q, float* out, const std::vector<SeqSpan>& spans, const AttnShape& a,
              cudaStream_t s);

 private:
  // A span set's metadata on the device, built on the first write or attend that passes it and reused by every later
  // layer of the step (Gemma 4: 35 layers, two span sets with images). Keyed by the spans' values (block tables and
  // bidirectional blocks by content), never their addresses, so a later step with other values builds its own.
  struct SpanKey {
    int64_t start, n, context_len, n_blocks, n_bidir;
  };
  struct StepMeta {
    std::vector<SpanKey> keys;    // [spans]
    std::vector<int32_t> lists;   // every span's block table, then its bidir pairs, in span order
    std::vector<int32_t> host;    // what dev holds (kept until the entry goes: the upload's source)
    int32_t* dev = nullptr;       // [slot | table_off | q_pos | kv_end], each [T], then the concatenated block tables
    int64_t max_keys = 0;         // the most keys a token sees (AttnTokens::max_keys)
  };
  static bool same_spans(const StepMeta& m, const std::vector<SeqSpan>& spans);
  const StepMeta& step_meta(const std::vector<SeqSpan>& spans, int64_t T, cudaStream_t s);
  static constexpr size_t kStepMetas = 4;
  std::vector<StepMeta> metas_;

  std::vector<KvLayerSpec> layers_;
  std::vector<KvCache> cache_;  // per layer; a KV-shared layer's entry is its source's
  int num_blocks_ = 0, block_size_ = 0;
  KvDtype dtype_ = KvDtype::F32;
  void* mem_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace rapid::cuda
