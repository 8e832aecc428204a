// The vision side of a VLM: a tower + projector that turns one preprocessed image into the
// embeddings that replace its placeholder tokens in the text decoder. Stateless between calls;
// it reads weights from the same mapped Checkpoint as the text decoder (one copy of the weights).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include "backend/ops.h"
#include "format/json.h"
#include "format/safetensors.h"

namespace rapid {

// One image as the Hugging Face processor's pixel_values for it.
struct ImageInput {
  // Qwen: [t*h*w, C*temporal*patch*patch]; Gemma 3: [3, H, W]; Gemma 4: [h*w, 3*patch*patch] (py, px, c), unpadded
  const float* pixels = nullptr;
  int64_t n_values = 0;           // element count of `pixels` (checked against the grid)
  int grid_t = 1, grid_h = 0, grid_w = 0;  // Qwen: image_grid_thw; Gemma 3: [1, H/patch, W/patch]
};

struct ImageEmbedding {
  int64_t tokens = 0;               // placeholder tokens this image fills
  std::vector<float> embeddings;    // [tokens, text_hidden]
  std::vector<float> deepstack;     // [deepstack_layers, tokens, text_hidden] (Qwen3-VL), else empty
};

class VisionEncoder {
 public:
  virtual ~VisionEncoder() = default;
  virtual std::string family() const = 0;     // qwen2_5_vl | qwen3_vl | gemma3 | gemma4 | ...
  virtual int64_t text_hidden() const = 0;     // width of the output embeddings
  virtual int deepstack_layers() const { return 0; }
  virtual size_t weight_bytes() const = 0;     // bytes of the tower + projector tensors
  virtual std::string quantization() const = 0;  // "none" or e.g. "affine 4-bit g64"
  // Runs the tower over `be` (activations in its buffers), downloading the result at the end.
  // Throws std::invalid_argument with a message a user can act on for a bad grid/size.
  virtual ImageEmbedding encode(const ImageInput& image, ops::Backend& be, Precision precision) const = 0;
  // Several images in one forward (their rows stacked, attention kept within each image): the same bits per
  // image as encode(), fewer and fuller launches. Families without a batched forward encode one at a time.
  // Checks every image before running any; callers bound the rows with encode_images().
  virtual std::vector<ImageEmbedding> encode_batch(const std::vector<ImageInput>& images, ops::Backend& be,
                                                   Precision precision) const;
};

// Patch rows one batched forward may stack: 8 Gemma 3 (896 px) or 41 Qwen2.5-VL (448 px) images. Bounds the
// activation buffers (on the GPU about 36 KB a row for SigLIP); a larger image still runs, alone.
inline constexpr int64_t kMaxBatchPatches = 32768;

// Encodes `images` in order, in batches of whole images of at most kMaxBatchPatches rows (by grid_t * h * w).
std::vector<ImageEmbedding> encode_images(const VisionEncoder& v, const std::vector<ImageInput>& images,
                                          ops::Backend& be, Precision precision);

// Builds the encoder of a VLM checkpoint (config.json's vision_config + the tower/projector keys in
// any supported layout: HF new, legacy, MLX). `family` is the text family's VLM name.
std::unique_ptr<VisionEncoder> load_vision_encoder(std::shared_ptr<const Checkpoint> ckpt, const Json& config,
                                                   const std::string& family);

}  // namespace rapid
