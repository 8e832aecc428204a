// MLX affine quantization (port of the CPU `quantize` in mlx/backend/cpu/quantized.cpp) and the
// checkpoint converter used by `rapid convert` (what mlx-lm convert does for text models).
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "tensor/dtype.h"

namespace rapid {

// Quantizes w [rows, cols] (f32) with MLX's affine scheme, group along cols (cols % group == 0).
//   packed: uint32 [rows, cols*bits/32] (LSB-first bit stream per row)
//   scales, biases: f32 [rows, cols/group]
// Bits 2,3,4,5,6,8. Same arithmetic as mlx's CPU quantize (f32 min/max, edge rule, division,
// round-half-even), so it should match mlx.core.quantize bit for bit (not verified against an mlx
// binary here: mlx is not installable on this machine).
void quantize_affine(const float* w, int64_t rows, int64_t cols, int group, int bits,
                     std::vector<uint32_t>& packed, std::vector<float>& scales,
                     std::vector<float>& biases);

// Like quantize_affine, then scales/biases stored in `dtype` (F32/F16/BF16) as mlx does for a
// weight of that dtype: q is computed with the f32 scale/bias, only the stored values are rounded.
// `w` holds the weight values already rounded to that dtype. scales_out/biases_out: raw dtype
// bytes [rows, cols/group].
void quantize_affine_typed(const float* w, int64_t rows, int64_t cols, int group, int bits,
                           DType dtype, std::vector<uint32_t>& packed,
                           std::vector<uint8_t>& scales_out, std::vector<uint8_t>& biases_out);

// Reference dequantization of one packed row (any supported bits) into out[cols].
void dequantize_affine_row(const uint32_t* packed_row, const float* scales_row,
                           const float* biases_row, int64_t cols, int group, int bits, float* out);

struct ConvertStats {
  int quantized = 0;     // tensors quantized
  int kept = 0;          // tensors copied as-is
  size_t bytes_in = 0;
  size_t bytes_out = 0;
  std::string dtype;     // dtype of scales/biases and kept float tensors
};

// Converts a bf16/f16/f32 checkpoint directory to an MLX affine-quantized one in dst_dir:
// quantizes every 2-D "*.weight" of a Linear/Embedding whose last dim % group_size == 0, except
// norms and paths containing vision_tower/vision_model/visual/multi_modal_projector/vl_connector/
// audio_tower (copied unquantized). Like mlx-lm, floating tensors are first cast to config torch_dtype/dtype when it is
// float16/bfloat16/float32 (else each keeps its own dtype); scales/biases use that dtype. Drops
// rotary_emb.inv_freq and a tied lm_head. Writes model.safetensors (shards + index past 5 GiB),
// config.json with "quantization" and "quantization_config" {group_size, bits, mode:"affine"},
// and copies tokenizer/template/generation files. Throws std::runtime_error on errors.
ConvertStats convert_checkpoint(const std::string& src_dir, const std::string& dst_dir, int bits,
                                int group_size);

}  // namespace rapid
