// Batched image encodes: the one-at-a-time default of VisionEncoder::encode_batch, and encode_images, which
// splits a list of images into batches that fit kMaxBatchPatches.
#include "vision/vision.h"

namespace rapid {

std::vector<ImageEmbedding> VisionEncoder::encode_batch(const std::vector<ImageInput>& images, ops::Backend& be,
                                                        Precision precision) const {
  std::vector<ImageEmbedding> out;
  out.reserve(images.size());
  for (const ImageInput& img : images) out.push_back(encode(img, be, precision));
  return out;
}

std::vector<ImageEmbedding> encode_images(const VisionEncoder& v, const std::vector<ImageInput>& images,
                                          ops::Backend& be, Precision precision) {
  std::vector<ImageEmbedding> out;
  out.reserve(images.size());
  std::vector<ImageInput> batch;
  int64_t rows = 0;
  auto flush = [&] {
    if (batch.empty()) return;
    if (batch.size() == 1) out.push_back(v.encode(batch[0], be, precision));
    else
      for (ImageEmbedding& e : v.encode_batch(batch, be, precision)) out.push_back(std::move(e));
    batch.clear();
    rows = 0;
  };
  for (const ImageInput& img : images) {
    const int64_t n = int64_t(img.grid_t) * img.grid_h * img.grid_w;
    if (!batch.empty() && rows + n > kMaxBatchPatches) flush();
    batch.push_back(img);
    rows += n;
  }
  flush();
  return out;
}

}  // namespace rapid
