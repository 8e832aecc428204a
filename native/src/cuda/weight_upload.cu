// upload_for_matmul (cuda_kernels.h): a weight's device form for cuda::matmul, shared by the fused decoder and the
// op backend's decoder matmuls so both read the same layout.
#include <memory>
#include "cuda/cuda_kernels.h"
#include "cuda/tiled_codes.h"
#include "quant/mlx_quant.h"

namespace rapid::cuda {

DevWeight upload_for_matmul(const Weight& w, bool tiled, const std::function<void*(const void*, size_t)>& copy) {
  DevWeight d = device_view(w, nullptr, w.scales, w.biases);
  d.tiled = tiled;
  if (tiled) {
    const size_t words = tiled_words(w.out, w.in, w.bits), bytes = tiled_weight_scale_bytes(w);
    // every word and byte is written: no zero fill first
    const auto t = std::make_unique_for_overwrite<uint32_t[]>(words);
    const auto q = std::make_unique_for_overwrite<uint8_t[]>(bytes);
    tile_weight(w, t.get(), q.get());
    d.data = copy(t.get(), words * sizeof(uint32_t));
    d.scales = d.biases = copy(q.get(), bytes);
  } else {
    d.data = copy(w.data, weight_data_bytes(w));
    const size_t sb = weight_scale_bytes(w);
    d.scales = sb ? copy(w.scales, sb) : nullptr;
    d.biases = sb ? copy(w.biases, sb) : nullptr;
  }
  return d;
}

}  // namespace rapid::cuda
