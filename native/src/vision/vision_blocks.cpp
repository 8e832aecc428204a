#include "vision/vision_blocks.h"
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>
#include "cpu/gemm_packed.h"

namespace rapid::vision {

// ---- checkpoint / config helpers --------------------------------------------------------------

std::string probe_prefix(const Checkpoint& ckpt, const std::vector<std::string>& candidates, const std::string& probe,
                         const std::string& what) {
  for (const std::string& p : candidates)
    if (ckpt.has(p + probe)) return p;
  std::string tried;
  for (const std::string& p : candidates) tried += (tried.empty() ? "" : ", ") + p + probe;
  throw std::runtime_error(what + " not found in " + ckpt.dir() + ": tried " + tried +
                           " (HF new, legacy and MLX key layouts)");
}

size_t prefix_bytes(const Checkpoint& ckpt, const std::vector<std::string>& prefixes) {
  size_t total = 0;
  for (const TensorView& t : ckpt.tensors())
    for (const std::string& p : prefixes)
      if (t.name.rfind(p, 0) == 0) {
        total += t.nbytes;
        break;
      }
  return total;
}

std::string describe_quant(const std::vector<const Weight*>& weights) {
  std::string desc = "none";
  for (const Weight* w : weights) {
    if (w->kind != WeightKind::Affine) continue;
    std::string d = "affine " + std::to_string(w->bits) + "-bit g" + std::to_string(w->group);
    if (desc == "none") desc = d;
    else if (desc != d) return "mixed";
  }
  return desc;
}

const Json& vision_config(const Json& config, std::string_view family) {
  const Json* vc = config.find("vision_config");
  if (!vc || !vc->is_object())
    throw std::runtime_error(std::string(family) +
                             ": config.json has no vision_config object (not a vision-language checkpoint?)");
  return *vc;
}

int64_t cfg_int(const Json& cfg, const std::vector<std::string>& keys, int64_t def) {
  for (const std::string& k : keys) {
    const Json* v = cfg.find(k);
    if (!v || v->is_null()) continue;
    // Every vision size (channels, patch, heads, layers, merge, window, pooling) is divided by or allocated from.
    const int64_t n = v->is_number() ? v->as_int() : 0;
    if (!v->is_number() || n <= 0 || n > (int64_t(1) << 27))
      throw std::runtime_error("config.json vision " + k + " is " + v->dump() + ", expected a positive integer");
    return n;
  }
  return def;
}

double rope_theta(const Json& vc, double def) {
  if (const Json* rp = vc.find("rope_parameters"); rp && rp->is_object()) return rp->get_double("rope_theta", def);
  return def;
}

// ---- activations -------------------------------------------------------------------------------

VAct parse_act(const std::string& name, const std::string& where) {
  if (name == "silu" || name == "swish") return VAct::Silu;
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_fast" || name == "gelu_tanh")
    return VAct::GeluTanh;
  if (name == "gelu") return VAct::GeluErf;
  if (name == "quick_gelu") return VAct::QuickGelu;
  throw std::runtime_error(where + ": unsupported hidden_act \"" + name +
                           "\" (supported: silu, gelu, gelu_pytorch_tanh, quick_gelu)");
}

// ---- linear layers -----------------------------------------------------------------------------

Weight f32_weight(const float* data, int64_t out, int64_t in, std::string name) {
  Weight w;  // kind Dense, dtype F32 by default
  w.out = out;
  w.in = in;
  w.data = data;
  w.name = std::move(name);
  return w;
}

Linear load_tower_linear(const Checkpoint& ckpt, const QuantConfig& qc, const std::string& path, int64_t out,
                         int64_t in, bool with_bias) {
  Linear l = load_linear(ckpt, qc, path, out, in, with_bias);
  l.w.packed = pack_dense(l.w);
  return l;
}

// ---- patch embedding ---------------------------------------------------------------------------

PatchEmbed load_patch_embed(const Checkpoint& ckpt, const std::string& name, int64_t hidden, int64_t channels,
                            int64_t kt, int64_t patch, bool with_bias) {
  const TensorView& t = ckpt.get(name + ".weight");
  if (!is_float_dtype(t.dtype))
    throw std::runtime_error("tensor " + t.name + " has dtype " + dtype_name(t.dtype) + ", expected a float type");
  const int64_t T = kt > 0 ? kt : 1;
  const int64_t in = channels * T * patch * patch;
  const std::vector<int64_t>& s = t.shape;
  // mlx stores channels last ([O, (kT,) P, P, C]); HF channels first ([O, C, (kT,) P, P]).
  std::vector<int64_t> hf = kt > 0 ? std::vector<int64_t>{hidden, channels, kt, patch, patch}
                                   : std::vector<int64_t>{hidden, channels, patch, patch};
  std::vector<int64_t> mlx = kt > 0 ? std::vector<int64_t>{hidden, kt, patch, patch, channels}
                                    : std::vector<int64_t>{hidden, patch, patch, channels};
  const bool flat = s == std::vector<int64_t>{hidden, in};
  const bool is_hf = s == hf || flat;
  const bool is_mlx = !is_hf && s == mlx;
  if (!is_hf && !is_mlx) {
    auto str = [](const std::vector<int64_t>& v) {
      std::string r = "[";
      for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
      return r + "]";
    };
    throw std::runtime_error("tensor " + t.name + " has shape " + t.shape_str() + ", expected " + str(hf) +
                             " (HF layout) or " + str(mlx) + " (MLX layout)");
  }
  PatchEmbed pe;
  pe.w.resize(size_t(hidden * in));
  const int64_t pp = patch * patch;
  for (int64_t o = 0; o < hidden; ++o) {
    float* dst = pe.w.data() + o * in;  // [C, T, P, P]
    if (is_hf) {
      for (int64_t i = 0; i < in; ++i) dst[i] = load_float(t.data, t.dtype, size_t(o * in + i));
      continue;
    }
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t tt = 0; tt < T; ++tt)
        for (int64_t q = 0; q < pp; ++q)  // src [T, P, P, C]
          dst[(c * T + tt) * pp + q] = load_float(t.data, t.dtype, size_t(o * in + (tt * pp + q) * channels + c));
  }
  if (with_bias) pe.lin.bias = load_vector_f32(ckpt, name + ".bias", hidden);
  pe.lin.w = f32_weight(pe.w.data(), hidden, in, name);
  pe.lin.w.packed = pack_dense(pe.lin.w);
  return pe;
}

std::vector<int32_t> image_patch_index(int64_t channels, int64_t gh, int64_t gw, int64_t patch) {
  const int64_t ph = gh * patch, pw = gw * patch;
  std::vector<int32_t> idx;  // [gh*gw*C*P]: patch (gy, gx), channel c, patch row i -> image row of P floats
  idx.reserve(size_t(gh * gw * channels * patch));
  for (int64_t gy = 0; gy < gh; ++gy)
    for (int64_t gx = 0; gx < gw; ++gx)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t i = 0; i < patch; ++i) idx.push_back(int32_t(((c * ph + gy * patch + i) * pw + gx * patch) / patch));
  return idx;
}

// ---- 2-D vision RoPE ---------------------------------------------------------------------------

std::vector<float> vision_inv_freq(int head_dim, double theta) {
  const int spatial = head_dim / 2;
  std::vector<float> inv(size_t(spatial / 2));
  // torch: 1.0 / (base ** (arange(0, spatial, 2).float() / spatial)), all in f32.
  for (int j = 0; j < spatial / 2; ++j)
    inv[size_t(j)] = 1.0f / std::pow(float(theta), float(2 * j) / float(spatial));
  return inv;
}

RopeTable vision_rope_table(const std::vector<float>& inv_freq, const int32_t* hpos, const int32_t* wpos, int64_t n,
                            int head_dim) {
  RopeTable t;
  t.half = head_dim / 2;
  t.head_dim = head_dim;
  const int q = int(inv_freq.size());  // head_dim / 4
  if (2 * q != t.half) throw std::logic_error("vision rope: head_dim must be a multiple of 4");
  t.cos.resize(size_t(n * t.half));
  t.sin.resize(size_t(n * t.half));
  for (int64_t i = 0; i < n; ++i) {
    float* c = t.cos.data() + i * t.half;  // [half] = [h angles (q), w angles (q)]
    float* s = t.sin.data() + i * t.half;
    for (int j = 0; j < q; ++j) {
      const float ah = float(hpos[i]) * inv_freq[size_t(j)];
      const float aw = float(wpos[i]) * inv_freq[size_t(j)];
      c[j] = std::cos(ah);
      s[j] = std::sin(ah);
      c[q + j] = std::cos(aw);
      s[q + j] = std::sin(aw);
    }
  }
  return t;
}

RopeBufs upload_rope(ops::Backend& be, const RopeTable& t) {
  RopeBufs r;
  r.cos = be.upload(t.cos.data(), int64_t(t.cos.size()));
  r.sin = be.upload(t.sin.data(), int64_t(t.sin.size()));
  r.half = t.half;
  return r;
}

void rope_heads(ops::Backend& be, float* x, int64_t ld, int64_t n, int n_heads, const RopeBufs& r) {
  be.rope(x, ld, n, n_heads, 2 * r.half, r.half, r.cos.data(), r.sin.data());
}

void merge_block_positions(int64_t t, int64_t h, int64_t w, int64_t merge, std::vector<int32_t>& hpos,
                           std::vector<int32_t>& wpos) {
  for (int64_t f = 0; f < t; ++f)
    for (int64_t br = 0; br < h / merge; ++br)
      for (int64_t bc = 0; bc < w / merge; ++bc)
        for (int64_t ir = 0; ir < merge; ++ir)
          for (int64_t ic = 0; ic < merge; ++ic) {
            hpos.push_back(int32_t(br * merge + ir));
            wpos.push_back(int32_t(bc * merge + ic));
          }
}

// ---- attention ---------------------------------------------------------------------------------

void fused_qkv_attention(ops::Backend& be, const Linear& qkv_proj, const Linear& out_proj, float* hn, float* x,
                         const QkvScratch& s, int64_t n, int64_t hidden, int heads, int head_dim, const RopeBufs& rope,
                         const std::vector<int64_t>& cu, Precision p) {
  const int64_t ld = 3 * hidden;
  float* qkv = s.qkv.data();  // [n, 3, heads, hd]
  be.linear(qkv_proj, hn, qkv, n, p);
  rope_heads(be, qkv, ld, n, heads, rope);
  rope_heads(be, qkv + hidden, ld, n, heads, rope);
  be.attention(qkv, ld, qkv + hidden, qkv + 2 * hidden, ld, s.att.data(), hidden, heads, heads, head_dim,
               1.0f / std::sqrt(float(head_dim)), cu, p);
  be.linear_epilogue(out_proj, s.att.data(), x, n, p, ops::Backend::LinearEpilogue::residual(hn));
}

// ---- MLP ---------------------------------------------------------------------------------------

void plain_mlp(ops::Backend& be, const Linear& fc1, const Linear& fc2, float* hn, float* f1, float* x, int64_t n,
               VAct act, Precision p) {
  be.linear_epilogue(fc1, hn, f1, n, p, ops::Backend::LinearEpilogue::activation(act));
  be.linear_epilogue(fc2, f1, x, n, p, ops::Backend::LinearEpilogue::residual(hn));
}

// ---- input checks ------------------------------------------------------------------------------

void check_patch_grid(const ImageInput& img, const std::string& family, int64_t row_len, int64_t merge,
                      int64_t patch, int64_t max_patches) {
  // Appended piecewise: `"[" + std::to_string(...)` trips GCC 12's -Wrestrict false positive at -O3.
  std::string grid = "[";
  grid.append(std::to_string(img.grid_t)).append(", ").append(std::to_string(img.grid_h)).append(", ");
  grid.append(std::to_string(img.grid_w)).append("]");
  if (!img.pixels) throw std::invalid_argument(family + " vision: no pixel values given");
  if (img.grid_t < 1 || img.grid_h < 1 || img.grid_w < 1)
    throw std::invalid_argument(family + " vision: image grid " + grid + " must have every entry >= 1");
  if (img.grid_h % merge != 0 || img.grid_w % merge != 0)
    throw std::invalid_argument(family + " vision: image grid " + grid + " has h or w not a multiple of " +
                                std::to_string(merge) + " (spatial_merge_size); resize the image so both sides are "
                                "multiples of " + std::to_string(merge * patch) + " px");
  const int64_t patches = int64_t(img.grid_t) * img.grid_h * img.grid_w;
  if (patches > max_patches)
    throw std::invalid_argument(family + " vision: image grid " + grid + " has " + std::to_string(patches) +
                                " patches, more than the limit " + std::to_string(max_patches) +
                                "; downscale the image");
  if (img.n_values != patches * row_len)
    throw std::invalid_argument(family + " vision: got " + std::to_string(img.n_values) +
                                " pixel values but image grid " + grid + " needs " + std::to_string(patches) +
                                " rows of " + std::to_string(row_len) + " = " + std::to_string(patches * row_len) +
                                " (pixel_values must be the processor's rows for exactly this image)");
}

}  // namespace rapid::vision
