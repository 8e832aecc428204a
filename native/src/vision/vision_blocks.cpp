#include "vision/vision_blocks.h"
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>
#include "cpu/gemm_packed.h"
#include "layers/activations.h"
#include "layers/vec_math.h"

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

namespace {

// torch.nn.functional.gelu(x) (exact, erf form).
inline float gelu_erf(float x) { return x * 0.5f * (1.0f + std::erf(x * 0.70710678118654752f)); }
inline float quick_gelu(float x) { return x / (1.0f + std::exp(-1.702f * x)); }

// Ones for routing a plain activation through the SIMD GLU kernel: act(x) * 1 == act(x) exactly.
constexpr int64_t kOnes = 4096;
const float* ones() {
  static const std::vector<float> v(size_t(kOnes), 1.0f);
  return v.data();
}

}  // namespace

namespace {

void activate(float* x, int64_t n, VAct a) {
  switch (a) {
    case VAct::Silu:
    case VAct::GeluTanh: {
      const Activation act = a == VAct::Silu ? Activation::Silu : Activation::GeluTanh;
      for (int64_t i = 0; i < n; i += kOnes) vec::glu(x + i, ones(), std::min(kOnes, n - i), act);
      break;
    }
    case VAct::GeluErf:
      for (int64_t i = 0; i < n; ++i) x[i] = gelu_erf(x[i]);
      break;
    case VAct::QuickGelu:
      for (int64_t i = 0; i < n; ++i) x[i] = quick_gelu(x[i]);
      break;
  }
}

void activate_mul(float* gate, const float* up, int64_t n, VAct a) {
  switch (a) {
    case VAct::Silu: vec::glu(gate, up, n, Activation::Silu); break;
    case VAct::GeluTanh: vec::glu(gate, up, n, Activation::GeluTanh); break;
    case VAct::GeluErf:
      for (int64_t i = 0; i < n; ++i) gate[i] = gelu_erf(gate[i]) * up[i];
      break;
    case VAct::QuickGelu:
      for (int64_t i = 0; i < n; ++i) gate[i] = quick_gelu(gate[i]) * up[i];
      break;
  }
}

}  // namespace

void activate_rows(ThreadPool& pool, float* x, int64_t rows, int64_t width, VAct a) {
  auto body = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) activate(x + r * width, width, a);
  };
  if (rows * width >= 32768) pool.parallel_for(rows, body);
  else body(0, rows);
}

void activate_mul_rows(ThreadPool& pool, float* gate, const float* up, int64_t rows, int64_t width, VAct a) {
  auto body = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) activate_mul(gate + r * width, up + r * width, width, a);
  };
  if (rows * width >= 32768) pool.parallel_for(rows, body);
  else body(0, rows);
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

void linear_strided(ThreadPool& pool, const Linear& l, const float* x, float* y, int64_t ldy, int64_t n,
                    Precision p) {
  matmul_strided(pool, l.w, x, l.in(), y, ldy, n, p);
  if (l.bias.empty()) return;
  const int64_t out = l.out();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) y[r * ldy + o] += l.bias[size_t(o)];
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
  pe.hidden = hidden;
  pe.in = in;
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
  if (with_bias) pe.bias = load_vector_f32(ckpt, name + ".bias", hidden);
  pe.view = f32_weight(pe.w.data(), hidden, in, name);
  pe.view.packed = pack_dense(pe.view);
  return pe;
}

void patch_embed(ThreadPool& pool, const PatchEmbed& pe, const float* rows, float* y, int64_t n) {
  matmul(pool, pe.view, rows, y, n, Precision::Exact);
  if (pe.bias.empty()) return;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < pe.hidden; ++o) y[r * pe.hidden + o] += pe.bias[size_t(o)];
}

std::vector<float> image_patch_rows(const float* pixels, int64_t channels, int64_t gh, int64_t gw, int64_t patch) {
  const int64_t ph = gh * patch, pw = gw * patch, row_len = channels * patch * patch;
  std::vector<float> rows(size_t(gh * gw * row_len));  // [gh*gw, C*P*P]
  for (int64_t gy = 0; gy < gh; ++gy)
    for (int64_t gx = 0; gx < gw; ++gx) {
      float* r = rows.data() + (gy * gw + gx) * row_len;  // [C, P, P]
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t i = 0; i < patch; ++i)
          std::copy_n(pixels + (c * ph + gy * patch + i) * pw + gx * patch, patch, r + (c * patch + i) * patch);
    }
  return rows;
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

void apply_rope_strided(ThreadPool& pool, float* x, int64_t ld, int64_t n, int n_heads, const RopeTable& t) {
  const int half = t.half;
  auto body = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* cs = t.cos.data() + i * half;  // [half]
      const float* sn = t.sin.data() + i * half;  // [half]
      for (int h = 0; h < n_heads; ++h) {
        // The halves and the table do not overlap: restrict lets the compiler vectorize the rotation.
        float* __restrict lo = x + i * ld + int64_t(h) * t.head_dim;  // [half]
        float* __restrict hi = lo + half;                              // [half]
        for (int j = 0; j < half; ++j) {
          const float a = lo[j], b = hi[j];
          lo[j] = a * cs[j] - b * sn[j];
          hi[j] = b * cs[j] + a * sn[j];
        }
      }
    }
  };
  if (n >= 64) pool.parallel_for(n, body);
  else body(0, n);
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

void segment_attention(ThreadPool& pool, const float* q, const float* k, const float* v, int64_t ld_in, float* out,
                       int64_t ld_out, int n_heads, int head_dim, float scale, const std::vector<int64_t>& cu) {
  if (cu.size() < 2) return;
  const int64_t hd = head_dim;
  const int64_t n_seg = int64_t(cu.size()) - 1;
  constexpr int64_t P = kPackedPanel;
  auto up = [](int64_t a) { return (a + kPackedPanel - 1) / kPackedPanel * kPackedPanel; };
  // Per (head, segment), K and V in the packed GEMM's panels, so both products run on it: K as a
  // weight [len, hd] (keys are the output columns), V as a weight [hd, len]. Memory is linear in n.
  std::vector<int64_t> kofs{0}, vofs{0};  // per segment, in floats within one head's slab
  for (int64_t s = 0; s < n_seg; ++s) {
    const int64_t len = cu[size_t(s) + 1] - cu[size_t(s)];
    kofs.push_back(kofs.back() + up(len) * hd);
    vofs.push_back(vofs.back() + up(hd) * len);
  }
  std::vector<float> kp(size_t(n_heads * kofs.back()));  // [heads][segments of [len/16][hd][16]]
  std::vector<float> vp(size_t(n_heads * vofs.back()));  // [heads][segments of [hd/16][len][16]]
  pool.parallel_for(int64_t(n_heads) * n_seg, [&](int64_t a, int64_t b) {
    for (int64_t task = a; task < b; ++task) {
      const int64_t h = task / n_seg, s = task % n_seg;
      const int64_t t0 = cu[size_t(s)], len = cu[size_t(s) + 1] - t0;
      float* kd = kp.data() + h * kofs.back() + kofs[size_t(s)];  // [up(len)/16][hd][16]
      float* vd = vp.data() + h * vofs.back() + vofs[size_t(s)];  // [up(hd)/16][len][16]
      for (int64_t i = 0; i < up(len); ++i) {
        const float* kr = k + (t0 + i) * ld_in + h * hd;  // [hd], key i
        float* col = kd + (i / P) * hd * P + i % P;
        for (int64_t d = 0; d < hd; ++d) col[d * P] = i < len ? kr[d] : 0.0f;
      }
      for (int64_t i = 0; i < len; ++i) {
        const float* vr = v + (t0 + i) * ld_in + h * hd;  // [hd], value i
        for (int64_t d0 = 0; d0 < hd; d0 += P) {
          float* dst = vd + (d0 / P) * len * P + i * P;  // [16]
          for (int64_t j = 0; j < P; ++j) dst[j] = d0 + j < hd ? vr[d0 + j] : 0.0f;
        }
      }
    }
  });

  // Tasks: (segment, head, block of up to kQB queries): scores stay [kQB, len].
  constexpr int64_t kQB = 64;
  struct Task {
    int64_t seg, head, q0, q1;
  };
  std::vector<Task> tasks;
  for (int64_t s = 0; s < n_seg; ++s)
    for (int64_t h = 0; h < n_heads; ++h)
      for (int64_t q0 = cu[size_t(s)]; q0 < cu[size_t(s) + 1]; q0 += kQB)
        tasks.push_back({s, h, q0, std::min(cu[size_t(s) + 1], q0 + kQB)});
  const char* isa = matmul_kernel_name();
  std::atomic<size_t> next{0};
  pool.run([&](int, int) {
    thread_local std::vector<float> scores;
    for (size_t ti = next.fetch_add(1); ti < tasks.size(); ti = next.fetch_add(1)) {
      const Task& tk = tasks[ti];
      const int64_t t0 = cu[size_t(tk.seg)], len = cu[size_t(tk.seg) + 1] - t0;
      const int64_t nq = tk.q1 - tk.q0;
      if (scores.size() < size_t(nq * len)) scores.resize(size_t(nq * len));
      float* S = scores.data();  // [nq, len]
      PackedDense kw;            // [len, hd] view: S = Q · Kᵀ
      kw.out = len;
      kw.in = hd;
      kw.panels = up(len) / P;
      kw.data = kp.data() + tk.head * kofs.back() + kofs[size_t(tk.seg)];
      // Nested inside pool.run, so these GEMMs run inline on this thread.
      gemm_packed(pool, kw, q + tk.q0 * ld_in + tk.head * hd, ld_in, S, len, nq, isa);
      for (int64_t i = 0; i < nq; ++i) {
        float* r = S + i * len;  // [len]
        float mx = -INFINITY;
        for (int64_t j = 0; j < len; ++j) {
          r[j] *= scale;
          mx = std::max(mx, r[j]);
        }
        const float sum = vec::exp_shift_sum(r, len, mx);
        for (int64_t j = 0; j < len; ++j) r[j] /= sum;
      }
      PackedDense vw;  // [hd, len] view: O = P · V
      vw.out = hd;
      vw.in = len;
      vw.panels = up(hd) / P;
      vw.data = vp.data() + tk.head * vofs.back() + vofs[size_t(tk.seg)];
      gemm_packed(pool, vw, S, len, out + tk.q0 * ld_out + tk.head * hd, ld_out, nq, isa);
    }
  });
}

void fused_qkv_attention(ThreadPool& pool, const Linear& qkv_proj, const Linear& out_proj, float* hn, float* qkv,
                         float* att, int64_t n, int64_t hidden, int heads, int head_dim, const RopeTable& rope,
                         const std::vector<int64_t>& cu, Precision p) {
  const int64_t ld = 3 * hidden;
  linear(pool, qkv_proj, hn, qkv, n, p);
  apply_rope_strided(pool, qkv, ld, n, heads, rope);
  apply_rope_strided(pool, qkv + hidden, ld, n, heads, rope);
  segment_attention(pool, qkv, qkv + hidden, qkv + 2 * hidden, ld, att, hidden, heads, head_dim,
                    1.0f / std::sqrt(float(head_dim)), cu);
  linear(pool, out_proj, att, hn, n, p);
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

// ---- misc --------------------------------------------------------------------------------------

void add_inplace(ThreadPool& pool, float* y, const float* x, int64_t n) {
  auto body = [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) y[i] += x[i];
  };
  if (n >= 65536) pool.parallel_for(n, body, 64);
  else body(0, n);
}

}  // namespace rapid::vision
