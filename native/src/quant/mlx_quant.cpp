// Per-module MLX quantization config and Weight construction; see quant/mlx_quant.h.
#include "quant/mlx_quant.h"

#include <cstring>
#include <memory>
#include <stdexcept>

#include "quant/quantize.h"

namespace rapid {
namespace {

const std::string kLm = "language_model.";

QuantParams parse_params(const Json& j, const QuantParams& defaults, const std::string& where) {
  QuantParams p = defaults;
  try {
    if (const Json* g = j.find("group_size"); g && !g->is_null()) p.group_size = int(g->as_int());
    if (const Json* b = j.find("bits"); b && !b->is_null()) p.bits = int(b->as_int());
    if (const Json* m = j.find("mode"); m && !m->is_null()) p.mode = m->as_string();
  } catch (const std::exception& e) {
    throw std::runtime_error("config.json quantization " + where + ": " + e.what());
  }
  return p;
}

std::string params_str(const QuantParams& p) {
  return p.mode + " " + std::to_string(p.bits) + "-bit g" + std::to_string(p.group_size);
}

void check_float(const TensorView& t, const std::string& module) {
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    throw std::runtime_error(module + ": tensor " + t.name + " has dtype " + dtype_name(t.dtype) +
                             ", expected F32, F16 or BF16");
}

Weight build(const Checkpoint& ck, const QuantConfig& qc, const std::string& path, bool embedding) {
  Weight w;
  w.name = path;
  const TensorView& wt = ck.get(path + ".weight");
  const TensorView* sc = ck.find(path + ".scales");
  const char* what = embedding ? "embedding" : "linear weight";
  if (!sc) {
    check_float(wt, path);
    if (wt.shape.size() != 2)
      throw std::runtime_error(path + ": " + what + " must be 2-D, got shape " + wt.shape_str());
    w.kind = WeightKind::Dense;
    w.dtype = wt.dtype;
    w.out = wt.shape[0];
    w.in = wt.shape[1];
    w.data = wt.data;
    return w;
  }
  // Quantized: parameters from config (per-module override or global); default affine 4/64.
  std::optional<QuantParams> op = qc.for_module(path);
  QuantParams p = op ? *op : qc.global;
  if (p.mode != "affine")
    throw std::runtime_error(path + ": unsupported quantization mode \"" + p.mode + "\" (" +
                             std::to_string(p.bits) + "-bit, group " + std::to_string(p.group_size) +
                             "); only affine is implemented");
  if (!quant_supported(p))
    throw std::runtime_error(path + ": unsupported quantization " + params_str(p) +
                             " (affine bits 2, 3, 4, 5, 6, 8 with group 32, 64 or 128 are supported)");
  const TensorView* bi = ck.find(path + ".biases");
  if (!bi) throw std::runtime_error(path + ": affine quantized but " + path + ".biases is missing in " + ck.dir());
  if (wt.dtype != DType::U32)
    throw std::runtime_error(path + ": quantized weight must be U32, got " + std::string(dtype_name(wt.dtype)));
  check_float(*sc, path);
  if (bi->dtype != sc->dtype)
    throw std::runtime_error(path + ": scales dtype " + dtype_name(sc->dtype) + " differs from biases dtype " +
                             dtype_name(bi->dtype));
  if (wt.shape.size() != 2 || sc->shape.size() != 2 || bi->shape.size() != 2)
    throw std::runtime_error(path + ": quantized tensors must be 2-D (weight " + wt.shape_str() + ", scales " +
                             sc->shape_str() + ")");
  int64_t out = wt.shape[0];
  int64_t packed = wt.shape[1];
  int64_t in = packed * 32 / p.bits;
  if ((packed * 32) % p.bits != 0 || sc->shape[0] != out || bi->shape != sc->shape ||
      sc->shape[1] * p.group_size != in)
    throw std::runtime_error(path + ": packed shapes inconsistent with " + params_str(p) + ": weight " +
                             wt.shape_str() + ", scales " + sc->shape_str() + ", biases " + bi->shape_str());
  set_affine_view(w, wt, *sc, *bi, out, in, p);
  if (p.bits == 4 || p.bits == 8) {  // 8-bit: read by the families with 8-bit interleaved kernels only
    w.interleaved = std::make_shared<InterleavedSlot>();  // filled at CPU load (cpu/gemv_interleaved.h)
    w.interleaved->rows_mapped = true;                     // ck's tensors are PROT_READ file mappings
  }
  return w;
}

}  // namespace

void set_affine_view(Weight& w, const TensorView& wt, const TensorView& sc, const TensorView& bi, int64_t out, int64_t in,
                     const QuantParams& p) {
  w.kind = WeightKind::Affine;
  w.dtype = sc.dtype;
  w.out = out;
  w.in = in;
  w.data = wt.data;
  w.scales = sc.data;
  w.biases = bi.data;
  w.bits = p.bits;
  w.group = p.group_size;
}

QuantConfig QuantConfig::from_config(const Json& config) {
  QuantConfig qc;
  const Json* q = config.find("quantization");
  if (!q || !q->is_object()) q = config.find("quantization_config");
  if (!q || !q->is_object()) {
    // VLM configs may carry it under text_config.
    if (const Json* tc = config.find("text_config")) {
      q = tc->find("quantization");
      if (!q || !q->is_object()) q = tc->find("quantization_config");
    }
  }
  if (!q || !q->is_object()) return qc;
  qc.present = true;
  qc.global = parse_params(*q, QuantParams{}, "(global)");
  for (const auto& [key, v] : q->items()) {
    if (v.is_bool()) {
      if (!v.as_bool()) qc.overrides[key] = std::nullopt;
      else qc.overrides[key] = qc.global;
    } else if (v.is_object()) {
      qc.overrides[key] = parse_params(v, qc.global, "\"" + key + "\"");
    }
    // Scalars (group_size, bits, mode, quant_method, ...) are global fields, handled above.
  }
  return qc;
}

std::optional<QuantParams> QuantConfig::for_module(const std::string& path) const {
  auto lookup = [&](const std::string& k) -> const std::optional<QuantParams>* {
    auto it = overrides.find(k);
    return it == overrides.end() ? nullptr : &it->second;
  };
  if (auto* r = lookup(path)) return *r;
  if (path.rfind(kLm, 0) == 0) {
    if (auto* r = lookup(path.substr(kLm.size()))) return *r;
  } else {
    if (auto* r = lookup(kLm + path)) return *r;
  }
  return global;
}

std::string QuantConfig::describe() const {
  if (!present) return "none";
  std::string g = global.mode + " " + std::to_string(global.bits) + "-bit g" + std::to_string(global.group_size);
  for (const auto& [k, v] : overrides) {
    if (!v) continue;  // unquantized modules do not make a recipe "mixed"
    if (v->bits != global.bits || v->group_size != global.group_size || v->mode != global.mode) return "mixed";
  }
  return g;
}

bool quant_supported(const QuantParams& p) {
  if (p.mode != "affine") return false;
  if (p.group_size != 32 && p.group_size != 64 && p.group_size != 128) return false;
  switch (p.bits) {
    case 2: case 3: case 4: case 5: case 6: case 8: return true;
    default: return false;
  }
}

Weight load_weight(const Checkpoint& ck, const QuantConfig& qc, const std::string& path) {
  return build(ck, qc, path, false);
}

Weight load_embedding(const Checkpoint& ck, const QuantConfig& qc, const std::string& path) {
  return build(ck, qc, path, true);
}

Weight try_load_weight(const Checkpoint& ck, const QuantConfig& qc, const std::string& path) {
  if (!ck.has(path + ".weight")) return Weight{};
  return build(ck, qc, path, false);
}

size_t weight_data_bytes(const Weight& w) {
  if (w.kind == WeightKind::Dense) return size_t(w.out) * size_t(w.in) * dtype_size(w.dtype);
  return size_t(w.out) * size_t(w.in) * size_t(w.bits) / 8;
}

size_t weight_scale_bytes(const Weight& w) {
  if (w.kind == WeightKind::Dense) return 0;
  return size_t(w.out) * size_t(w.in / w.group) * dtype_size(w.dtype);
}

size_t weight_bytes(const Weight& w) { return weight_data_bytes(w) + 2 * weight_scale_bytes(w); }

void dequantize_row(const Weight& w, int64_t r, float* out) {
  if (w.kind == WeightKind::Dense) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + size_t(r) * size_t(w.in) * dtype_size(w.dtype);
    if (w.dtype == DType::F32) {
      std::memcpy(out, row, size_t(w.in) * 4);
    } else {
      for (int64_t i = 0; i < w.in; ++i) out[i] = load_float(row, w.dtype, size_t(i));
    }
    return;
  }
  const int64_t ng = w.in / w.group;
  const size_t row_bytes = size_t(w.in) * size_t(w.bits) / 8;
  const uint32_t* packed = reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(w.data) + size_t(r) * row_bytes);
  float sc[1024 / 32 * 64], bi[1024 / 32 * 64];  // fast path for rows up to 65536 / 32 groups
  std::vector<float> sv, bv;
  float* s = sc;
  float* b = bi;
  if (ng > int64_t(sizeof sc / sizeof sc[0])) {
    sv.resize(size_t(ng));
    bv.resize(size_t(ng));
    s = sv.data();
    b = bv.data();
  }
  for (int64_t g = 0; g < ng; ++g) {
    s[g] = load_float(w.scales, w.dtype, size_t(r * ng + g));
    b[g] = load_float(w.biases, w.dtype, size_t(r * ng + g));
  }
  dequantize_affine_row(packed, s, b, w.in, w.group, w.bits, out);
}

}  // namespace rapid
