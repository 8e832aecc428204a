// MLX affine quantizer (port of mlx/backend/cpu/quantized.cpp `quantize`) and checkpoint converter.
#include "quant/quantize.h"
#include "quant/packed_bits.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>

#include "format/json.h"
#include "format/safetensors.h"

namespace rapid {
namespace fs = std::filesystem;

namespace {

void check_bits_group(int bits, int group) {
  if (bits != 2 && bits != 3 && bits != 4 && bits != 5 && bits != 6 && bits != 8)
    throw std::runtime_error("quantize: bits must be 2, 3, 4, 5, 6 or 8, got " + std::to_string(bits));
  if (group != 32 && group != 64 && group != 128)
    throw std::runtime_error("quantize: group size must be 32, 64 or 128, got " + std::to_string(group));
}

// Writes element value q (bits wide) at element index i of an LSB-first byte stream.
void store_float(std::vector<uint8_t>& out, size_t i, float v, DType t) {
  switch (t) {
    case DType::F32: std::memcpy(out.data() + 4 * i, &v, 4); break;
    case DType::F16: { uint16_t h = f32_to_f16(v); std::memcpy(out.data() + 2 * i, &h, 2); break; }
    case DType::BF16: { uint16_t h = f32_to_bf16(v); std::memcpy(out.data() + 2 * i, &h, 2); break; }
    default: throw std::runtime_error("quantize: scales dtype must be F32, F16 or BF16");
  }
}

}  // namespace

namespace {

// Quantizes rows [r0, r1); see quantize_affine.
void quantize_rows(const float* w, int64_t r0, int64_t r1, int64_t cols, int group, int bits, uint32_t* packed,
                   float* scales, float* biases) {
  const float n_bins = float((1 << bits) - 1);
  const float eps = 1e-7f;
  const int64_t words_per_row = cols * bits / 32;
  const int64_t ng = cols / group;
  float q[128];  // one group of quantized values (group ≤ 128)
  for (int64_t r = r0; r < r1; ++r) {
    uint8_t* prow = reinterpret_cast<uint8_t*>(packed + r * words_per_row);
    for (int64_t g = 0; g < ng; ++g) {
      const float* wg = w + r * cols + g * group;
      float w_min = std::numeric_limits<float>::infinity();
      float w_max = -w_min;
      for (int j = 0; j < group; ++j) {
        w_max = std::max(w_max, wg[j]);
        w_min = std::min(w_min, wg[j]);
      }
      // Same arithmetic as mlx: the edge with the larger magnitude is represented exactly.
      bool mask = std::abs(w_min) > std::abs(w_max);
      float scale = std::max((w_max - w_min) / n_bins, eps);
      scale = mask ? scale : -scale;
      float edge = mask ? w_min : w_max;
      float q0 = std::rint(edge / scale);
      float bias = 0;
      if (q0 != 0) {
        scale = edge / q0;
        bias = edge;
      }
      for (int j = 0; j < group; ++j)  // division (not a reciprocal multiply) to match mlx bit for bit
        q[j] = std::min(std::max(std::nearbyint((wg[j] - bias) / scale), 0.0f), n_bins);
      uint8_t* out = prow + g * group * bits / 8;
      if (bits == 4) {
        for (int j = 0; j < group; j += 2) out[j / 2] = uint8_t(uint32_t(q[j]) | uint32_t(q[j + 1]) << 4);
      } else if (bits == 8) {
        for (int j = 0; j < group; ++j) out[j] = uint8_t(q[j]);
      } else {
        for (int j = 0; j < group; ++j) put_packed_code(out, j, bits, uint32_t(q[j]));
      }
      scales[r * ng + g] = scale;
      biases[r * ng + g] = bias;
    }
  }
}

}  // namespace

void quantize_affine(const float* w, int64_t rows, int64_t cols, int group, int bits,
                     std::vector<uint32_t>& packed, std::vector<float>& scales,
                     std::vector<float>& biases) {
  check_bits_group(bits, group);
  if (cols % group != 0)
    throw std::runtime_error("quantize: last dimension " + std::to_string(cols) + " not divisible by group size " +
                             std::to_string(group));
  const int64_t words_per_row = cols * bits / 32;
  const int64_t ng = cols / group;
  packed.assign(size_t(rows * words_per_row), 0u);
  scales.resize(size_t(rows * ng));
  biases.resize(size_t(rows * ng));
  // Rows are independent: split big matrices over the hardware threads.
  const int64_t nt = std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()),
                                       std::max<int64_t>(1, rows * cols / (1 << 20)));
  if (nt <= 1) {
    quantize_rows(w, 0, rows, cols, group, bits, packed.data(), scales.data(), biases.data());
    return;
  }
  std::vector<std::thread> th;
  for (int64_t t = 0; t < nt; ++t)
    th.emplace_back(quantize_rows, w, rows * t / nt, rows * (t + 1) / nt, cols, group, bits, packed.data(),
                    scales.data(), biases.data());
  for (auto& t : th) t.join();
}

void quantize_affine_typed(const float* w, int64_t rows, int64_t cols, int group, int bits, DType dtype,
                           std::vector<uint32_t>& packed, std::vector<uint8_t>& scales_out,
                           std::vector<uint8_t>& biases_out) {
  std::vector<float> s, b;
  quantize_affine(w, rows, cols, group, bits, packed, s, b);
  scales_out.assign(s.size() * dtype_size(dtype), 0);
  biases_out.assign(b.size() * dtype_size(dtype), 0);
  for (size_t i = 0; i < s.size(); ++i) {
    store_float(scales_out, i, s[i], dtype);
    store_float(biases_out, i, b[i], dtype);
  }
}

void dequantize_affine_row(const uint32_t* packed_row, const float* scales_row, const float* biases_row,
                           int64_t cols, int group, int bits, float* out) {
  const uint8_t* row = reinterpret_cast<const uint8_t*>(packed_row);
  for (int64_t i = 0; i < cols; ++i) {
    int64_t g = i / group;
    out[i] = scales_row[g] * float(packed_code(row, i, bits)) + biases_row[g];
  }
}

namespace {

// mlx-vlm's skip list, plus Qwen-VL's "visual" tower/merger: vision stays in its float dtype.
bool skip_module(const std::string& name) {
  static const char* kSkip[] = {"vision_tower", "vision_model", "visual", "multi_modal_projector", "vl_connector",
                                "audio_tower"};
  for (const char* s : kSkip)
    if (name.find(s) != std::string::npos) return true;
  return false;
}

bool is_norm(const std::string& name) {
  // Norm weights are 1-D in every supported family; this also catches odd 2-D norm tables.
  return name.find("norm") != std::string::npos;
}

// The dtype mlx-lm casts floating parameters to: config torch_dtype / dtype when it is one of
// float16, bfloat16, float32; otherwise each tensor keeps its own dtype (F32 returned as marker).
bool config_dtype(const Json& cfg, DType& out) {
  for (const Json* c : {&cfg, cfg.find("text_config")}) {
    if (!c || !c->is_object()) continue;
    for (const char* key : {"torch_dtype", "dtype"}) {
      const Json* v = c->find(key);
      if (!v || !v->is_string()) continue;
      const std::string& s = v->as_string();
      if (s == "float16") { out = DType::F16; return true; }
      if (s == "bfloat16") { out = DType::BF16; return true; }
      if (s == "float32") { out = DType::F32; return true; }
    }
  }
  return false;
}

std::vector<float> to_f32(const TensorView& t) {
  std::vector<float> v(size_t(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_float(t.data, t.dtype, i);
  return v;
}

std::vector<uint8_t> from_f32(const std::vector<float>& v, DType t) {
  std::vector<uint8_t> out(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) store_float(out, i, v[i], t);
  return out;
}

}  // namespace

ConvertStats convert_checkpoint(const std::string& src_dir, const std::string& dst_dir, int bits, int group_size) {
  check_bits_group(bits, group_size);
  auto ck = Checkpoint::open(src_dir);
  Json cfg = ck->config();
  if (cfg.find("quantization") || cfg.find("quantization_config"))
    throw std::runtime_error(src_dir + ": checkpoint is already quantized (config.json has a quantization block)");
  DType cast = DType::F32;
  bool have_cast = config_dtype(cfg, cast);
  std::error_code ec;
  fs::create_directories(dst_dir, ec);
  if (ec) throw std::runtime_error(dst_dir + ": cannot create: " + ec.message());

  ConvertStats st;
  st.bytes_in = ck->mapped_bytes();
  // Owned output buffers; TensorData borrows them.
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<TensorData> out;
  std::set<std::string> out_dtypes;
  auto add = [&](std::string name, DType dt, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    bufs.push_back(std::move(bytes));
    TensorData td;
    td.name = std::move(name);
    td.dtype = dt;
    td.shape = std::move(shape);
    td.data = bufs.back().data();
    td.nbytes = bufs.back().size();
    out.push_back(std::move(td));
  };
  bufs.reserve(ck->tensors().size() * 3);

  const bool tied = cfg.get_bool("tie_word_embeddings", false) ||
                    (cfg.find("text_config") && cfg.at("text_config").is_object() &&
                     cfg.at("text_config").get_bool("tie_word_embeddings", false));
  for (const TensorView& t : ck->tensors()) {
    const std::string& name = t.name;
    // Dropped like mlx-lm's sanitize: RoPE caches, and a head duplicated from tied embeddings.
    if (name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    if (tied && (name == "lm_head.weight" || name == "language_model.lm_head.weight")) continue;
    bool floating = is_float_dtype(t.dtype) && t.dtype != DType::F64;
    DType dt = (floating && have_cast) ? cast : t.dtype;
    const std::string suffix = ".weight";
    bool is_weight = name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    std::string module = is_weight ? name.substr(0, name.size() - suffix.size()) : name;
    bool quantize = floating && is_weight && t.shape.size() == 2 && t.shape[1] % group_size == 0 && !is_norm(name) &&
                    !skip_module(name);
    if (quantize) {
      std::vector<float> w = to_f32(t);
      // Round to the model dtype first: mlx quantizes the cast parameter.
      if (dt != DType::F32)
        for (float& x : w) x = dt == DType::BF16 ? bf16_to_f32(f32_to_bf16(x)) : f16_to_f32(f32_to_f16(x));
      std::vector<uint32_t> packed;
      std::vector<uint8_t> sc, bi;
      quantize_affine_typed(w.data(), t.shape[0], t.shape[1], group_size, bits, dt, packed, sc, bi);
      std::vector<uint8_t> pbytes(packed.size() * 4);
      std::memcpy(pbytes.data(), packed.data(), pbytes.size());
      int64_t ng = t.shape[1] / group_size;
      add(name, DType::U32, {t.shape[0], t.shape[1] * bits / 32}, std::move(pbytes));
      add(module + ".scales", dt, {t.shape[0], ng}, std::move(sc));
      add(module + ".biases", dt, {t.shape[0], ng}, std::move(bi));
      out_dtypes.insert(dtype_name(dt));
      ++st.quantized;
    } else {
      if (floating && dt != t.dtype) {
        add(name, dt, t.shape, from_f32(to_f32(t), dt));
      } else {
        add(name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes));
      }
      if (floating) out_dtypes.insert(dtype_name(dt));
      ++st.kept;
    }
  }
  for (const auto& d : out_dtypes) st.dtype += (st.dtype.empty() ? "" : ",") + d;

  // Shard at ~5 GB like mlx-lm (max_file_size_gb=5).
  const size_t kShard = size_t(5) << 30;
  std::vector<std::vector<TensorData>> shards(1);
  size_t cur = 0;
  for (auto& td : out) {
    if (cur > 0 && cur + td.nbytes > kShard) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(td);
    cur += td.nbytes;
  }
  std::map<std::string, std::string> meta{{"format", "mlx"}};
  if (shards.size() == 1) {
    write_safetensors((fs::path(dst_dir) / "model.safetensors").string(), shards[0], meta);
  } else {
    Json wm = Json::make_object();
    size_t total = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      char fname[64];
      std::snprintf(fname, sizeof fname, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      write_safetensors((fs::path(dst_dir) / fname).string(), shards[i], meta);
      for (auto& td : shards[i]) {
        wm.set(td.name, Json(fname));
        total += td.nbytes;
      }
    }
    Json idx = Json::make_object();
    Json md = Json::make_object();
    md.set("total_size", Json(uint64_t(total)));
    idx.set("metadata", std::move(md));
    idx.set("weight_map", std::move(wm));
    std::string s = idx.dump(4);
    FILE* f = std::fopen((fs::path(dst_dir) / "model.safetensors.index.json").string().c_str(), "wb");
    if (!f || std::fwrite(s.data(), 1, s.size(), f) != s.size()) throw std::runtime_error(dst_dir + ": cannot write index");
    std::fclose(f);
  }
  for (auto& td : out) st.bytes_out += td.nbytes;

  Json q = Json::make_object();
  q.set("group_size", Json(group_size));
  q.set("bits", Json(bits));
  q.set("mode", Json("affine"));
  cfg.set("quantization", q);
  cfg.set("quantization_config", q);
  {
    std::string s = cfg.dump(4);
    std::string p = (fs::path(dst_dir) / "config.json").string();
    FILE* f = std::fopen(p.c_str(), "wb");
    if (!f || std::fwrite(s.data(), 1, s.size(), f) != s.size()) {
      if (f) std::fclose(f);
      throw std::runtime_error(p + ": cannot write");
    }
    std::fclose(f);
  }
  // Tokenizer, chat template and generation files travel unchanged.
  for (const auto& e : fs::directory_iterator(ck->dir())) {
    if (!e.is_regular_file()) continue;
    std::string fn = e.path().filename().string();
    bool copy = fn == "tokenizer.json" || fn == "tokenizer_config.json" || fn == "special_tokens_map.json" ||
                fn == "generation_config.json" || fn == "chat_template.jinja" || fn == "chat_template.json" ||
                fn == "added_tokens.json" || fn == "vocab.json" || fn == "merges.txt" || fn == "tokenizer.model" ||
                fn == "preprocessor_config.json" || fn == "processor_config.json";
    if (copy) {
      fs::copy_file(e.path(), fs::path(dst_dir) / fn, fs::copy_options::overwrite_existing, ec);
      if (ec) throw std::runtime_error(fn + ": copy failed: " + ec.message());
    }
  }
  return st;
}

}  // namespace rapid
