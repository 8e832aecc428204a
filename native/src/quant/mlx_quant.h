// MLX quantization metadata (config.json "quantization") and building Weight views from a
// checkpoint per MODELS.md section 1: a module is quantized iff "<path>.scales" exists.
#pragma once
#include <optional>
#include <string>
#include <unordered_map>
#include "format/json.h"
#include "format/safetensors.h"
#include "tensor/weight.h"

namespace rapid {

struct QuantParams {
  int group_size = 64;
  int bits = 4;
  std::string mode = "affine";  // affine | mxfp4 | mxfp8 | nvfp4 | ...
};

struct QuantConfig {
  bool present = false;  // config had a "quantization"/"quantization_config" object
  QuantParams global;
  // Per-module overrides by module path (no ".weight"); nullopt = explicitly unquantized (false).
  std::unordered_map<std::string, std::optional<QuantParams>> overrides;

  // Reads config["quantization"] (else config["quantization_config"]); absent → present=false.
  // Throws std::runtime_error on malformed entries (e.g. bits not a number).
  static QuantConfig from_config(const Json& config);

  // Parameters for a module path, trying the key as given, with "language_model." removed, and with
  // "language_model." added (mlx-vlm). Returns nullopt if the module is marked false. Falls back to
  // `global` when no override exists.
  std::optional<QuantParams> for_module(const std::string& module_path) const;

  // "none", "affine 4-bit g64", or "mixed" (overrides that differ from global).
  std::string describe() const;
};

// True if the bits/mode pair is implemented by the kernels (affine, bits 2,3,4,5,6,8; group 32/64/128).
bool quant_supported(const QuantParams& p);

// Makes w an Affine view [out, in] of packed codes wt with scales sc and biases bi (shapes already checked).
void set_affine_view(Weight& w, const TensorView& wt, const TensorView& sc, const TensorView& bi, int64_t out, int64_t in,
                     const QuantParams& p);

// Builds a 2-D Weight for module_path (without ".weight"):
//  - "<path>.scales" present → Affine: requires "<path>.biases" for affine mode, uint32 weight of
//    shape [out, in*bits/32], scales/biases [out, in/group] in F32/F16/BF16 (same dtype).
//    Unsupported bits/mode → std::runtime_error naming the module, mode and bits.
//  - else Dense: "<path>.weight" F32/F16/BF16, 2-D [out, in].
// Missing tensors → std::runtime_error "missing tensor NAME in DIR".
Weight load_weight(const Checkpoint& ckpt, const QuantConfig& qc, const std::string& module_path);

// Same rules for an embedding table [vocab, hidden] (QuantizedEmbedding when .scales exists).
// The result can also serve as a tied head (matmul(W=embedding) computes x · Eᵀ).
Weight load_embedding(const Checkpoint& ckpt, const QuantConfig& qc, const std::string& module_path);

// Like load_weight but returns an invalid Weight (data == nullptr) if "<path>.weight" is absent.
Weight try_load_weight(const Checkpoint& ckpt, const QuantConfig& qc, const std::string& module_path);

// Bytes the kernels read for one pass over W (packed data + scales + biases).
size_t weight_bytes(const Weight& w);
// Its parts: the data (dense values or packed codes), and the scales (= the biases) of an affine W (0 if dense).
size_t weight_data_bytes(const Weight& w);
size_t weight_scale_bytes(const Weight& w);

// Dequantizes row r of W into out[W.in] (f32); works for Dense and Affine. Reference/test helper
// and used for small things (e.g. embedding gather); never call it for a whole large matrix.
void dequantize_row(const Weight& w, int64_t r, float* out);

}  // namespace rapid
