// Vision encoders against transformers: for every fixture model dir (config.json, model.safetensors,
// reference.json with per-image pixel_values/features .f32 files), loads the tower with
// load_vision_encoder, encodes the stored pixel_values and compares with the stored features
// (and DeepStack features when the fixture has them). Also checks the input validation errors.
// Build (from the repo root):
//   g++ -O2 -std=c++20 -Wall -Wextra -Werror -mavx2 -mfma -mf16c -pthread -Inative/src
//       native/test/vision_test.cpp $(find native/src -name '*.cpp' -not -path '*/addon/*') -o /tmp/vision_test
// Run:   /tmp/vision_test [FIXTURE_ROOT_OR_MODEL_DIR...]   (default test/fixtures/vlm)
//        /tmp/vision_test bench [threads]   (random-weight Qwen2.5-VL-3B-shaped tower, one 448x448 image)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>
#include <unistd.h>

#include "cpu/cpu_ops.h"
#include "cpu/matmul.h"
#include "cpu/threadpool.h"
#include "format/json.h"
#include "format/safetensors.h"
#include "vision/vision.h"
#include "check.h"

using namespace rapid;
namespace fs = std::filesystem;

// Relative error bound for f32 checkpoints (the reference runs in float32; ours differs only in
// summation order). Quantized towers are compared against the dequantized reference, same bound.
static constexpr double kTol = 1e-4;
// Precision::Fast quantizes activations to int8 per block: a loose bound that still catches layout bugs.
static constexpr double kFastTol = 5e-2;

static std::vector<float> read_f32(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + p.string());
  f.seekg(0, std::ios::end);
  const size_t bytes = size_t(f.tellg());
  f.seekg(0);
  std::vector<float> v(bytes / 4);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * 4));
  return v;
}

// max |a - b| / max |b|
static double rel_err(const float* a, const std::vector<float>& b) {
  double md = 0, mb = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    md = std::max(md, std::fabs(double(a[i]) - double(b[i])));
    mb = std::max(mb, std::fabs(double(b[i])));
  }
  return md / std::max(mb, 1e-30);
}

// The tower on the CPU backend (the reference) over `pool`.
static ImageEmbedding encode(const VisionEncoder& enc, const ImageInput& in, ThreadPool& pool, Precision p) {
  ops::CpuBackend cpu(pool);
  return enc.encode(in, cpu, p);
}

static bool throws_invalid(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).find(needle) != std::string::npos) return true;
    std::fprintf(stderr, "  (message was: %s)\n", e.what());
    return false;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "  (wrong exception type: %s)\n", e.what());
    return false;
  }
  return false;
}

// Batch invariance of the tower: the dir's images stacked in one forward (and again in reverse order, and
// twice over) give each image bitwise its single-image embedding; a bad image in a batch is rejected.
static void check_batched(const VisionEncoder& enc, const std::string& name, const std::vector<ImageInput>& inputs,
                          const std::vector<ImageEmbedding>& single, ThreadPool& pool) {
  if (inputs.empty()) return;
  ops::CpuBackend cpu(pool);
  std::vector<size_t> order;
  for (size_t i = 0; i < inputs.size(); ++i) order.push_back(i);
  for (size_t i = inputs.size(); i-- > 0;) order.push_back(i);  // each image twice, the second time reversed
  std::vector<ImageInput> batch;
  for (size_t i : order) batch.push_back(inputs[i]);
  std::vector<ImageEmbedding> got;
  try {
    got = enc.encode_batch(batch, cpu, Precision::Exact);
  } catch (const std::exception& ex) {
    CHECK(false, "%s: encode_batch threw: %s", name.c_str(), ex.what());
    return;
  }
  CHECK(got.size() == batch.size(), "%s: encode_batch gave %zu embeddings for %zu images", name.c_str(), got.size(),
        batch.size());
  if (got.size() != batch.size()) return;
  size_t same = 0;
  for (size_t j = 0; j < order.size(); ++j) {
    const ImageEmbedding& a = got[j];
    const ImageEmbedding& b = single[order[j]];
    const bool eq = a.tokens == b.tokens && a.embeddings == b.embeddings && a.deepstack == b.deepstack;
    CHECK(eq, "%s: batched image %zu (of %zu) differs from its single encode", name.c_str(), j, order.size());
    same += eq;
  }
  const std::vector<ImageEmbedding> split = encode_images(enc, batch, cpu, Precision::Exact);
  CHECK(split.size() == batch.size() && split.back().embeddings == single[order.back()].embeddings,
        "%s: encode_images differs from the single encodes", name.c_str());
  std::printf("  %-40s batch of %zu: %zu bitwise equal to single encodes\n", (name + "/batched").c_str(),
              batch.size(), same);
  std::vector<ImageInput> bad = batch;
  bad.back().n_values -= 1;
  CHECK(throws_invalid([&] { enc.encode_batch(bad, cpu, Precision::Exact); }, "pixel values"),
        "%s: a short pixel buffer in a batch not rejected", name.c_str());
}

static void run_model_dir(const fs::path& dir, ThreadPool& pool) {
  const Json ref = Json::parse(read_text_file((dir / "reference.json").string()));
  const std::string family = ref.get_string("family", "");
  std::shared_ptr<const Checkpoint> ck = Checkpoint::open(dir.string());
  const Json config = ck->config();
  std::unique_ptr<VisionEncoder> enc;
  try {
    enc = load_vision_encoder(ck, config, family);
  } catch (const std::exception& e) {
    CHECK(false, "%s: load failed: %s", dir.filename().c_str(), e.what());
    return;
  }
  {  // the wrong family's tower: the error lists every key layout tried
    const std::string other = family == "gemma3" ? "qwen2_5_vl" : "gemma3";
    std::string msg;
    try {
      load_vision_encoder(ck, config, other);
    } catch (const std::runtime_error& ex) {
      msg = ex.what();
    }
    CHECK(msg.find("not found") != std::string::npos && msg.find("tried") != std::string::npos &&
              msg.find("vision_tower.") != std::string::npos,
          "%s as %s: unexpected error \"%s\"", dir.filename().c_str(), other.c_str(), msg.c_str());
  }
  {
    std::string msg;
    try {
      load_vision_encoder(ck, config, "llama");
    } catch (const std::runtime_error& ex) {
      msg = ex.what();
    }
    CHECK(msg.find("no vision encoder for family \"llama\"") != std::string::npos, "unknown family: \"%s\"",
          msg.c_str());
  }
  CHECK(enc->family() == (family == "qwen3_vl_moe" ? "qwen3_vl" : family), "family %s vs %s", enc->family().c_str(),
        family.c_str());
  std::printf("%s: family %s, text_hidden %lld, deepstack %d, %.1f KiB, quantization %s\n", dir.filename().c_str(),
              enc->family().c_str(), (long long)enc->text_hidden(), enc->deepstack_layers(),
              double(enc->weight_bytes()) / 1024.0, enc->quantization().c_str());
  const Json* cases = ref.find("cases");
  if (!cases || !cases->is_array()) return;
  bool checked_errors = false;
  // Every image of the dir, kept for the batched encode below: its pixels, input and single-image result.
  std::vector<std::vector<float>> kept_pixels;
  std::vector<ImageInput> kept_inputs;
  std::vector<ImageEmbedding> kept_single;
  for (const Json& c : cases->array()) {
    const Json* images = c.find("images");
    if (!images || !images->is_array()) continue;
    for (size_t ii = 0; ii < images->size(); ++ii) {
      const Json& im = (*images)[ii];
      if (!im.find("pixel_values") || !im.find("features")) continue;
      const std::vector<float> pix = read_f32(dir / im.at("pixel_values").as_string());
      const std::vector<float> feat = read_f32(dir / im.at("features").as_string());
      const Json& g = im.at("grid");
      ImageInput in;
      in.pixels = pix.data();
      in.n_values = int64_t(pix.size());
      in.grid_t = int(g[0].as_int());
      in.grid_h = int(g[1].as_int());
      in.grid_w = int(g[2].as_int());
      const auto t0 = std::chrono::steady_clock::now();
      ImageEmbedding e;
      try {
        e = encode(*enc, in, pool, Precision::Exact);
      } catch (const std::exception& ex) {
        CHECK(false, "%s/%s: encode threw: %s", dir.filename().c_str(), c.get_string("name", "?").c_str(), ex.what());
        continue;
      }
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const std::string label = dir.filename().string() + "/" + c.get_string("name", "?") + "[" + std::to_string(ii) + "]";
      CHECK(size_t(e.tokens * enc->text_hidden()) == feat.size() && e.embeddings.size() == feat.size(),
            "%s: %lld tokens x %lld vs %zu reference values", label.c_str(), (long long)e.tokens,
            (long long)enc->text_hidden(), feat.size());
      if (const Json* t = im.find("tokens"); t && t->is_number())
        CHECK(e.tokens == t->as_int(), "%s: tokens %lld vs %lld", label.c_str(), (long long)e.tokens,
              (long long)t->as_int());
      if (e.embeddings.size() != feat.size()) continue;
      const double err = rel_err(e.embeddings.data(), feat);
      std::printf("  %-40s grid [%d,%d,%d] tokens %lld  rel err %.2e  (%.1f ms)\n", label.c_str(), in.grid_t,
                  in.grid_h, in.grid_w, (long long)e.tokens, err, ms);
      CHECK(err < kTol, "%s: features rel err %.3e", label.c_str(), err);
      if (enc->quantization() != "none") {  // Fast: int8 activations against quantized weights
        const ImageEmbedding f = encode(*enc, in, pool, Precision::Fast);
        const double ferr = rel_err(f.embeddings.data(), feat);
        std::printf("  %-40s Fast precision rel err %.2e\n", label.c_str(), ferr);
        CHECK(ferr < kFastTol, "%s: Fast features rel err %.3e", label.c_str(), ferr);
      }
      if (const Json* ds = im.find("deepstack"); ds && ds->is_string()) {
        const std::vector<float> dref = read_f32(dir / ds->as_string());
        CHECK(e.deepstack.size() == dref.size(), "%s: deepstack %zu vs %zu values", label.c_str(),
              e.deepstack.size(), dref.size());
        if (e.deepstack.size() == dref.size()) {
          const double derr = rel_err(e.deepstack.data(), dref);
          std::printf("  %-40s deepstack x%d rel err %.2e\n", label.c_str(), enc->deepstack_layers(), derr);
          CHECK(derr < kTol, "%s: deepstack rel err %.3e", label.c_str(), derr);
        }
      }
      kept_pixels.push_back(pix);
      kept_inputs.push_back(in);
      kept_inputs.back().pixels = kept_pixels.back().data();
      kept_single.push_back(e);
      if (!checked_errors) {  // validation: a size mismatch and a bad grid name the problem
        checked_errors = true;
        // Thread-count invariance: one thread gives bitwise the same features.
        ThreadPool one(1);
        const ImageEmbedding e1 = encode(*enc, in, one, Precision::Exact);
        CHECK(e1.embeddings == e.embeddings && e1.deepstack == e.deepstack, "%s: 1-thread result differs",
              label.c_str());
        ImageInput bad = in;
        bad.n_values -= 1;
        CHECK(throws_invalid([&] { encode(*enc, bad, pool, Precision::Exact); }, "pixel values"),
              "%s: short pixel buffer not rejected", label.c_str());
        bad = in;
        bad.grid_h += 1;
        CHECK(throws_invalid([&] { encode(*enc, bad, pool, Precision::Exact); }, "grid"),
              "%s: bad grid not rejected", label.c_str());
      }
    }
  }
  check_batched(*enc, dir.filename().string(), kept_inputs, kept_single, pool);  // kept_pixels backs them
}

// ---- bench: random Qwen2.5-VL-3B-shaped tower --------------------------------------------------

static int bench(int threads) {
  const int64_t H = 1280, depth = 32, ffn = 3420, out = 2048, P = 14;
  const fs::path dir = fs::temp_directory_path() / ("rapid_vision_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<std::vector<uint16_t>> store;
  std::vector<TensorData> tds;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float stddev, float mean = 0.0f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<uint16_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = f32_to_bf16(mean + stddev * nd(rng));
    store.push_back(std::move(v));
    tds.push_back({name, DType::BF16, shape, nullptr, size_t(n) * 2});
  };
  const std::string p = "visual.";
  add(p + "patch_embed.proj.weight", {H, 3, 2, P, P}, 0.02f);
  for (int64_t i = 0; i < depth; ++i) {
    const std::string b = p + "blocks." + std::to_string(i) + ".";
    add(b + "norm1.weight", {H}, 0.02f, 1.0f);
    add(b + "norm2.weight", {H}, 0.02f, 1.0f);
    add(b + "attn.qkv.weight", {3 * H, H}, 0.02f);
    add(b + "attn.qkv.bias", {3 * H}, 0.02f);
    add(b + "attn.proj.weight", {H, H}, 0.02f);
    add(b + "attn.proj.bias", {H}, 0.02f);
    add(b + "mlp.gate_proj.weight", {ffn, H}, 0.02f);
    add(b + "mlp.gate_proj.bias", {ffn}, 0.02f);
    add(b + "mlp.up_proj.weight", {ffn, H}, 0.02f);
    add(b + "mlp.up_proj.bias", {ffn}, 0.02f);
    add(b + "mlp.down_proj.weight", {H, ffn}, 0.02f);
    add(b + "mlp.down_proj.bias", {H}, 0.02f);
  }
  add(p + "merger.ln_q.weight", {H}, 0.02f, 1.0f);
  add(p + "merger.mlp.0.weight", {4 * H, 4 * H}, 0.02f);
  add(p + "merger.mlp.0.bias", {4 * H}, 0.02f);
  add(p + "merger.mlp.2.weight", {out, 4 * H}, 0.02f);
  add(p + "merger.mlp.2.bias", {out}, 0.02f);
  for (size_t i = 0; i < tds.size(); ++i) tds[i].data = store[i].data();
  write_safetensors((dir / "model.safetensors").string(), tds);
  store.clear();
  {
    std::ofstream cfg(dir / "config.json");
    cfg << R"({"model_type":"qwen2_5_vl","vision_config":{"depth":32,"hidden_size":1280,"hidden_act":"silu",)"
        << R"("intermediate_size":3420,"num_heads":16,"in_chans":3,"out_hidden_size":2048,"patch_size":14,)"
        << R"("spatial_merge_size":2,"temporal_patch_size":2,"window_size":112,"fullatt_block_indexes":[7,15,23,31]}})";
  }
  int rc = 0;
  try {
    std::shared_ptr<const Checkpoint> ck = Checkpoint::open(dir.string());
    auto enc = load_vision_encoder(ck, ck->config(), "qwen2_5_vl");
    ThreadPool pool(threads);
    const int g = 448 / int(P);  // 32x32 patches -> 256 tokens
    std::vector<float> pix(size_t(g * g * 3 * 2 * P * P));
    for (auto& x : pix) x = nd(rng);
    ImageInput in{pix.data(), int64_t(pix.size()), 1, g, g};
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();  // process CPU time: meaningful on a shared machine
    ImageEmbedding e = encode(*enc, in, pool, Precision::Exact);
    const double cpu = double(std::clock() - c0) / CLOCKS_PER_SEC;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("bench: Qwen2.5-VL-3B-shaped tower (bf16 %.0f MiB), 448x448 -> %lld tokens x %lld: %.2f s wall, "
                "%.2f s CPU (%d threads, %s kernels)\n",
                double(enc->weight_bytes()) / 1048576.0, (long long)e.tokens, (long long)enc->text_hidden(), s, cpu,
                pool.size(), matmul_kernel_name());
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "bench failed: %s\n", ex.what());
    rc = 1;
  }
  fs::remove_all(dir);
  return rc;
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "bench") return bench(argc >= 3 ? std::atoi(argv[2]) : 0);
  std::vector<fs::path> roots;
  for (int i = 1; i < argc; ++i) roots.emplace_back(argv[i]);
  if (roots.empty()) roots.emplace_back("test/fixtures/vlm");
  std::vector<fs::path> dirs;
  for (const fs::path& r : roots) {
    if (fs::exists(r / "reference.json")) {
      dirs.push_back(r);
      continue;
    }
    if (!fs::is_directory(r)) continue;
    for (const auto& ent : fs::directory_iterator(r))
      if (fs::exists(ent.path() / "reference.json") && fs::exists(ent.path() / "config.json")) dirs.push_back(ent.path());
  }
  std::sort(dirs.begin(), dirs.end());
  ThreadPool pool(0);
  int models = 0;
  for (const fs::path& d : dirs) {
    try {
      const Json cfg = Json::parse(read_text_file((d / "config.json").string()));
      if (!cfg.find("vision_config")) continue;  // text-only fixture
      ++models;
      run_model_dir(d, pool);
    } catch (const std::exception& e) {
      CHECK(false, "%s: %s", d.string().c_str(), e.what());
    }
  }
  std::printf("%d vision models, %d passed, %d failed\n", models, g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}
