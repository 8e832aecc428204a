#include "layers/rope.h"
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include "format/json.h"

namespace rapid {

RopeSpec rope_default(int head_dim, int rot_dim, double theta, double linear_factor) {
  RopeSpec s;
  s.head_dim = head_dim;
  s.rot_dim = rot_dim;
  s.inv_freq.resize(size_t(rot_dim / 2));
  for (int j = 0; j < rot_dim / 2; ++j) {
    // transformers: 1 / theta ** (arange(0, d, 2).float() / d), in f32
    const float e = float(2 * j) / float(rot_dim);
    s.inv_freq[size_t(j)] = float(1.0 / std::pow(theta, double(e)));
    if (linear_factor != 1.0) s.inv_freq[size_t(j)] = s.inv_freq[size_t(j)] / float(linear_factor);
  }
  if (linear_factor != 1.0) s.type = "linear";
  return s;
}

// Llama 3.1 frequency-dependent scaling (transformers _compute_llama3_parameters).
static void apply_llama3(RopeSpec& s, double factor, double low_ff, double high_ff, double orig_ctx) {
  const double low_wavelen = orig_ctx / low_ff, high_wavelen = orig_ctx / high_ff;
  for (float& f : s.inv_freq) {
    const double inv = f;
    const double wavelen = 2.0 * M_PI / inv;
    double out = wavelen > low_wavelen ? inv / factor : inv;
    if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
      const double smooth = (orig_ctx / wavelen - low_ff) / (high_ff - low_ff);
      out = (1 - smooth) * out / factor + smooth * out;
    }
    f = float(out);
  }
  s.type = "llama3";
}

// YaRN (transformers _compute_yarn_parameters): per-frequency blend of interpolated (÷factor) and original
// frequencies over a linear ramp between the beta_fast/beta_slow correction dims (floor/ceil when `truncate`),
// and cos/sin scaled by the attention factor (from mscale/mscale_all_dim unless given).
static RopeSpec rope_yarn(const Json& p, int head_dim, int rot_dim, double theta, const std::string& where) {
  const Json* fj = p.find("factor");
  const Json* oj = p.find("original_max_position_embeddings");
  if (!fj || !fj->is_number() || !oj || !oj->is_number())
    throw std::runtime_error(where + ": yarn rope_parameters need factor and original_max_position_embeddings");
  const double factor = fj->as_double(), orig = oj->as_double();
  const auto get_mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
  // Absent or null keys take transformers' defaults (`or` in Python treats 0 like null for the betas).
  const auto num = [&](const char* key, double def) {
    const Json* v = p.find(key);
    return (v && v->is_number()) ? v->as_double() : def;
  };
  const double mscale = num("mscale", 0), mscale_all = num("mscale_all_dim", 0);
  const double attn = num("attention_factor", 0) != 0 ? num("attention_factor", 0)
                      : (mscale != 0 && mscale_all != 0) ? get_mscale(factor, mscale) / get_mscale(factor, mscale_all)
                                                         : get_mscale(factor, 1.0);
  const double beta_fast = num("beta_fast", 0) != 0 ? num("beta_fast", 0) : 32.0;
  const double beta_slow = num("beta_slow", 0) != 0 ? num("beta_slow", 0) : 1.0;
  const auto correction_dim = [&](double rot) {
    return double(rot_dim) * std::log(orig / (rot * 2 * M_PI)) / (2 * std::log(theta));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (p.get_bool("truncate", true)) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(rot_dim - 1));
  if (low == high) high += 0.001;  // as transformers: no zero-width ramp
  RopeSpec s;
  s.head_dim = head_dim;
  s.rot_dim = rot_dim;
  s.inv_freq.resize(size_t(rot_dim / 2));
  for (int j = 0; j < rot_dim / 2; ++j) {
    const float pos_freq = float(std::pow(theta, double(float(2 * j) / float(rot_dim))));  // f32 as torch
    const float extrap = 1.0f / pos_freq, interp = 1.0f / (float(factor) * pos_freq);
    const float ramp = std::clamp((float(j) - float(low)) / (float(high) - float(low)), 0.0f, 1.0f);
    const float m = 1.0f - ramp;  // extrapolation weight
    s.inv_freq[size_t(j)] = interp * (1.0f - m) + extrap * m;
  }
  s.attention_scaling = float(attn);
  s.type = "yarn";
  return s;
}

RopeSpec rope_from_params(const Json* p, int head_dim, double theta_default, const std::string& where) {
  double theta = theta_default;
  std::string type = "default";
  double partial = 1.0;
  if (p && p->is_object()) {
    theta = p->get_double("rope_theta", theta_default);
    type = p->get_string("rope_type", p->get_string("type", "default"));
    partial = p->get_double("partial_rotary_factor", 1.0);
  }
  const int rot_dim = int(double(head_dim) * partial) / 2 * 2;
  // "mrope" (Qwen2-VL era configs) is default RoPE; its section split is applied by the family.
  if (type == "default" || type == "mrope") return rope_default(head_dim, rot_dim, theta, 1.0);
  if (type == "linear") return rope_default(head_dim, rot_dim, theta, p->get_double("factor", 1.0));
  if (type == "llama3") {
    RopeSpec s = rope_default(head_dim, rot_dim, theta, 1.0);
    apply_llama3(s, p->get_double("factor", 8.0), p->get_double("low_freq_factor", 1.0),
                 p->get_double("high_freq_factor", 4.0), p->get_double("original_max_position_embeddings", 8192));
    return s;
  }
  if (type == "yarn") return rope_yarn(*p, head_dim, rot_dim, theta, where);
  throw std::runtime_error(where + ": unsupported rope_type \"" + type + "\" (supported: default, linear, llama3, yarn)");
}

void set_mrope_sections(RopeSpec& s, const std::vector<int>& sec, bool interleaved, const std::string& where) {
  const int half = s.rot_dim / 2;
  if (sec.size() != 3 || sec[0] < 0 || sec[1] < 0 || sec[2] < 0 || sec[0] + sec[1] + sec[2] != half)
    throw std::runtime_error(where + ": mrope_section must be 3 non-negative sizes summing to head_dim/2 = " +
                             std::to_string(half));
  s.section_axis.assign(size_t(half), 0);
  for (int j = 0; j < half; ++j) {
    if (interleaved) {
      if (j % 3 == 1 && j < 3 * sec[1]) s.section_axis[size_t(j)] = 1;
      else if (j % 3 == 2 && j < 3 * sec[2]) s.section_axis[size_t(j)] = 2;
    } else {
      s.section_axis[size_t(j)] = uint8_t(j < sec[0] ? 0 : j < sec[0] + sec[1] ? 1 : 2);
    }
  }
  s.type = interleaved ? "mrope-interleaved" : "mrope";
}

RopeTable rope_table(const RopeSpec& s, const int32_t* positions, int64_t n) {
  RopeTable t;
  t.half = s.rot_dim / 2;
  t.head_dim = s.head_dim;
  t.cos.resize(size_t(n * t.half));
  t.sin.resize(size_t(n * t.half));
  for (int64_t i = 0; i < n; ++i)
    for (int j = 0; j < t.half; ++j) {
      const int axis = s.section_axis.empty() ? 0 : s.section_axis[size_t(j)];
      // The angle is an f32 product as in transformers; cos/sin of it rounded once from double.
      const float ang = float(positions[axis * n + i]) * s.inv_freq[size_t(j)];
      t.cos[size_t(i * t.half + j)] = float(std::cos(double(ang))) * s.attention_scaling;
      t.sin[size_t(i * t.half + j)] = float(std::sin(double(ang))) * s.attention_scaling;
    }
  return t;
}

void apply_rope(float* x, int64_t n, int n_heads, const RopeTable& t) {
  const int half = t.half;
  for (int64_t i = 0; i < n; ++i) {
    const float* cs = t.cos.data() + i * half;  // [half]
    const float* sn = t.sin.data() + i * half;  // [half]
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (i * n_heads + h) * t.head_dim;  // [head_dim]
      for (int j = 0; j < half; ++j) {
        const float a = v[j], b = v[j + half];
        v[j] = a * cs[j] - b * sn[j];
        v[j + half] = b * cs[j] + a * sn[j];
      }
    }
  }
}

}  // namespace rapid
