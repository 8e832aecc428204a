// Building blocks shared by the vision towers: key-prefix probing, config parsing, weight loading (patch
// embedding as a linear over flattened patches), the host metadata of 2-D vision RoPE and patch layouts,
// and composite steps written over the op-level backend (backend/ops.h). Towers compute only through it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>
#include "backend/ops.h"
#include "format/json.h"
#include "format/safetensors.h"
#include "layers/layer_norm.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "layers/rope.h"
#include "quant/mlx_quant.h"
#include "vision/vision.h"

namespace rapid::vision {

// ---- checkpoint / config helpers --------------------------------------------------------------

// Returns the first candidate prefix p for which `p + probe` is a tensor; otherwise throws
// std::runtime_error listing every key tried (what = "Qwen2.5-VL vision tower", for the message).
std::string probe_prefix(const Checkpoint& ckpt, const std::vector<std::string>& candidates,
                         const std::string& probe, const std::string& what);

// Sum of the stored bytes of every tensor whose name starts with one of `prefixes`.
size_t prefix_bytes(const Checkpoint& ckpt, const std::vector<std::string>& prefixes);

// "none" when every weight is dense, else "affine B-bit gG" (or "mixed" when they differ).
std::string describe_quant(const std::vector<const Weight*>& weights);

// config["vision_config"], throwing a clear error when it is missing. `family` is a view: a std::string
// temporary bound to a reference parameter of a reference-returning function trips g++ 13's -Wdangling-reference.
const Json& vision_config(const Json& config, std::string_view family);

// Integer field of a config object, trying several spellings (e.g. in_channels / in_chans).
int64_t cfg_int(const Json& cfg, const std::vector<std::string>& keys, int64_t def);

// vision_config rope_parameters.rope_theta (transformers 5) when present, else `def`.
double rope_theta(const Json& vc, double def);

// ---- activations -------------------------------------------------------------------------------

using ops::VAct;

// Maps a HF hidden_act string ("silu", "gelu_pytorch_tanh", "gelu", "quick_gelu", ...); throws otherwise.
VAct parse_act(const std::string& name, const std::string& where);

// ---- linear layers -----------------------------------------------------------------------------

// A Dense F32 Weight view of `data` [out, in] (load-time f32 copies and attention operands).
Weight f32_weight(const float* data, int64_t out, int64_t in, std::string name);

// load_linear, with a dense f32/bf16/f16 weight repacked at load into the GEMM's panels
// (cpu/gemm_packed.h); quantized weights load unchanged.
Linear load_tower_linear(const Checkpoint& ckpt, const QuantConfig& qc, const std::string& path, int64_t out,
                         int64_t in, bool with_bias);

// ---- patch embedding ---------------------------------------------------------------------------

// A Conv2d/Conv3d with stride == kernel, as a dense f32 matmul over flattened patches. The weight is
// permuted once at load into the HF flattening order (C, [kT,] kH, kW) of the processor's rows.
// Run as ops::Backend::linear(lin, ..., Precision::Exact) (f32, as the Conv is in the reference).
struct PatchEmbed {
  std::vector<float> w;  // [hidden, C*kT*P*P]
  Linear lin;            // Dense F32 (packed) view of w, with the conv bias when it has one
  int64_t hidden() const { return lin.out(); }
  int64_t in() const { return lin.in(); }
};

// kT == 0 means Conv2d ([O,C,P,P] HF or [O,P,P,C] MLX); otherwise Conv3d ([O,C,kT,P,P] HF or
// [O,kT,P,P,C] MLX). The layout is detected by shape; anything else throws naming the tensor.
PatchEmbed load_patch_embed(const Checkpoint& ckpt, const std::string& name, int64_t hidden, int64_t channels,
                            int64_t kt, int64_t patch, bool with_bias);

// Gather indices turning a [C, gh*P, gw*P] image (as rows of P floats) into patch rows [gh*gw, C*P*P]
// (row-major patches) in the Conv2d weight's (c, i, j) order: y row k = image row idx[k], width P, ld P.
std::vector<int32_t> image_patch_index(int64_t channels, int64_t gh, int64_t gw, int64_t patch);

// ---- 2-D vision RoPE ---------------------------------------------------------------------------

// inv_freq_j = theta^(-2j/(head_dim/2)) for j < head_dim/4 (Qwen vision "axial" rope), in f32.
std::vector<float> vision_inv_freq(int head_dim, double theta);

// cos/sin [n, head_dim/2]: the first head_dim/4 angles are hpos*inv_freq, the next wpos*inv_freq;
// rotate_half over the whole head then pairs dim i with i + head_dim/2.
RopeTable vision_rope_table(const std::vector<float>& inv_freq, const int32_t* hpos, const int32_t* wpos, int64_t n,
                            int head_dim);

// A RopeTable's cos/sin [n, half] in backend memory, uploaded once per image for every layer.
struct RopeBufs {
  ops::Buf cos, sin;  // [n, half] each
  int half = 0;
};
RopeBufs upload_rope(ops::Backend& be, const RopeTable& t);

// Whole-head rotate-half RoPE: x row t, head h at x + t*ld + h*head_dim (head_dim = 2 * r.half).
void rope_heads(ops::Backend& be, float* x, int64_t ld, int64_t n, int n_heads, const RopeBufs& r);

// Patch (h, w) coordinates of a Qwen-style grid in the processor's merge-block order:
// per frame, blocks of merge x merge patches row-major, row-major inside each block.
void merge_block_positions(int64_t t, int64_t h, int64_t w, int64_t merge, std::vector<int32_t>& hpos,
                           std::vector<int32_t>& wpos);

// ---- attention ---------------------------------------------------------------------------------

// Backend buffers of one Qwen-style attention half, sized for n tokens.
struct QkvScratch {
  ops::Buf qkv;  // [n, 3, heads, hd]
  ops::Buf att;  // [n, hidden]
};

// The attention half of a Qwen-style block with a fused qkv projection: hn [n, hidden] (the normed input)
// -> qkv [n, 3, heads, hd], RoPE on q and k, segment attention over `cu` into att [n, hidden], then the residual
// x [n, hidden] += proj(att) (hn: the default epilogue's scratch). Scale 1/sqrt(hd).
void fused_qkv_attention(ops::Backend& be, const Linear& qkv_proj, const Linear& out_proj, float* hn, float* x,
                         const QkvScratch& s, int64_t n, int64_t hidden, int heads, int head_dim, const RopeBufs& rope,
                         const std::vector<int64_t>& cu, Precision p);

// ---- MLP ---------------------------------------------------------------------------------------

// Plain MLP onto the residual: x [n, hidden] += fc2(act(fc1(hn))), the activation and the add in the GEMMs'
// epilogues (ops::Backend::linear_epilogue); f1: scratch [n, ffn]; hn is overwritten (scratch).
void plain_mlp(ops::Backend& be, const Linear& fc1, const Linear& fc2, float* hn, float* f1, float* x, int64_t n,
               VAct act, Precision p);

// ---- input checks ------------------------------------------------------------------------------

// Validates a Qwen-style image (rows of `row_len` values over grid t x h x w patches): every side
// >= 1, h and w multiples of `merge`, n_values == t*h*w*row_len, and at most `max_patches` patches.
// Throws std::invalid_argument with the expected numbers (and the pixel sizes they correspond to).
void check_patch_grid(const ImageInput& img, const std::string& family, int64_t row_len, int64_t merge,
                      int64_t patch, int64_t max_patches);

}  // namespace rapid::vision
