// Image encode time of rapid's vision towers on the GPU (the CUDA op backend), for scripts/device/tower-check.sh and
// docs/performance.md: a random-weight bf16 tower of a real model's shape, written once to --dir, encodes one image
// and then --images images, back to back and then batched (encode_images, as the engine encodes them), per round.
// Prints one JSON line per timing: {"family", "images", "ms"} (batched ones with "batched" and "sameBits": every image
// bitwise the single encode); the first encode (weight upload + dequantization) is reported as "warmupMs".
//   build/cuda/tests/cuda_tower_bench --family qwen2_5_vl|gemma3|qwen3_vl [--dir DIR] [--rounds N] [--images N]
//                                     [--precision fast|exact] [--device cuda|cpu] [--profile] [--ab]
// --profile: one more encode with cudaEvents around every GEMM and attention launch, printed as one JSON line per
// GEMM kernel: {"profile":..., "gemmMs", "gemmTflops", "attentionMs", "restMs"}; rest = the encode's wall time less
// both (the other ops and host gaps). --ab: every round (and profile) once with RAPID_CUDA_TOWER_GEMM=v2 and once
// with v3, the fields tagged "gemm", so one run compares the two GEMM kernels (docs/cuda.md).
//   build/cuda/tests/cuda_tower_bench --gemm [--rounds N]: the bf16 GEMM alone (v2, v3 at each tile width and v3 as
//   chosen) on the towers' shapes (Gemma 3 SigLIP's 4096 x {1152, 4304} x {1152, 4304}, Qwen2.5-VL-3B's and
//   Qwen3-VL-4B's per-image ones), median ms and TFLOP/s.
// --device cpu runs the same tower on the CPU backend (all cores), for a same-machine comparison.
// qwen2_5_vl: Qwen2.5-VL-3B's tower (32 blocks, hidden 1280, window attention, merger to 2048), one 448x448 image
// (grid 1x32x32, 1024 patches). gemma3: Gemma 3 4B's SigLIP (27 layers, hidden 1152) at 896x896 (4096 patches) and
// its projector to 2560. qwen3_vl: Qwen3-VL-4B's tower (24 blocks, hidden 1024, DeepStack mergers after blocks 5, 11,
// 17) at 448x448 (grid 1x28x28). The torch peer (bench/peers/torch_vision_tower.py) reads the same DIR/config.json.
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>
#include "backend/ops.h"
#include "cpu/cpu_ops.h"
#include "cpu/threadpool.h"
#include "cuda/cuda_ops.h"
#include "cuda/dense_gemm.h"
#include "cuda/launch.cuh"
#include "cuda/tower_profile.h"
#include "format/json.h"
#include "format/safetensors.h"
#include "tensor/dtype.h"
#include "vision/vision.h"

using namespace rapid;
namespace fs = std::filesystem;

namespace {

// Random bf16 tensors (uniform, sd ~ `sd` around `mean`): timing does not depend on the values.
struct Writer {
  std::vector<std::vector<uint16_t>> store;
  std::vector<TensorData> tds;
  uint64_t s = 0x9e3779b97f4a7c15ull;
  void add(const std::string& name, std::vector<int64_t> shape, float sd, float mean = 0.f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<uint16_t> v(static_cast<size_t>(n));
    for (auto& x : v) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      const float u = float(s >> 40) / float(1 << 24) * 2.f - 1.f;  // [-1, 1): sd 0.577
      x = f32_to_bf16(mean + u * sd * 1.732f);
    }
    store.push_back(std::move(v));
    tds.push_back({name, DType::BF16, shape, nullptr, size_t(n) * 2});
  }
  void write(const fs::path& dir, const std::string& config) {
    for (size_t i = 0; i < tds.size(); ++i) tds[i].data = store[i].data();
    write_safetensors((dir / "model.safetensors").string(), tds);
    std::ofstream(dir / "config.json") << config;
  }
};

void write_qwen25_3b(const fs::path& dir) {
  const int64_t H = 1280, depth = 32, ffn = 3420, out = 2048, P = 14;
  Writer w;
  const std::string p = "visual.";
  w.add(p + "patch_embed.proj.weight", {H, 3, 2, P, P}, 0.02f);
  for (int64_t i = 0; i < depth; ++i) {
    const std::string b = p + "blocks." + std::to_string(i) + ".";
    w.add(b + "norm1.weight", {H}, 0.02f, 1.0f);
    w.add(b + "norm2.weight", {H}, 0.02f, 1.0f);
    w.add(b + "attn.qkv.weight", {3 * H, H}, 0.02f);
    w.add(b + "attn.qkv.bias", {3 * H}, 0.02f);
    w.add(b + "attn.proj.weight", {H, H}, 0.02f);
    w.add(b + "attn.proj.bias", {H}, 0.02f);
    for (const char* m : {"gate_proj", "up_proj"}) {
      w.add(b + "mlp." + m + ".weight", {ffn, H}, 0.02f);
      w.add(b + "mlp." + m + ".bias", {ffn}, 0.02f);
    }
    w.add(b + "mlp.down_proj.weight", {H, ffn}, 0.02f);
    w.add(b + "mlp.down_proj.bias", {H}, 0.02f);
  }
  w.add(p + "merger.ln_q.weight", {H}, 0.02f, 1.0f);
  w.add(p + "merger.mlp.0.weight", {4 * H, 4 * H}, 0.02f);
  w.add(p + "merger.mlp.0.bias", {4 * H}, 0.02f);
  w.add(p + "merger.mlp.2.weight", {out, 4 * H}, 0.02f);
  w.add(p + "merger.mlp.2.bias", {out}, 0.02f);
  w.write(dir, R"({"model_type":"qwen2_5_vl","vision_config":{"depth":32,"hidden_size":1280,"hidden_act":"silu",)"
               R"("intermediate_size":3420,"num_heads":16,"in_chans":3,"out_hidden_size":2048,"patch_size":14,)"
               R"("spatial_merge_size":2,"temporal_patch_size":2,"window_size":112,"fullatt_block_indexes":[7,15,23,31]}})");
}

void write_gemma3_4b(const fs::path& dir) {
  const int64_t H = 1152, layers = 27, ffn = 4304, P = 14, side = 896 / 14, text = 2560;
  Writer w;
  const std::string v = "vision_tower.vision_model.";
  w.add(v + "embeddings.patch_embedding.weight", {H, 3, P, P}, 0.02f);
  w.add(v + "embeddings.patch_embedding.bias", {H}, 0.02f);
  w.add(v + "embeddings.position_embedding.weight", {side * side, H}, 0.02f);
  for (int64_t i = 0; i < layers; ++i) {
    const std::string b = v + "encoder.layers." + std::to_string(i) + ".";
    for (const char* ln : {"layer_norm1", "layer_norm2"}) {
      w.add(b + ln + ".weight", {H}, 0.02f, 1.0f);
      w.add(b + ln + ".bias", {H}, 0.02f);
    }
    for (const char* m : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      w.add(b + "self_attn." + m + ".weight", {H, H}, 0.02f);
      w.add(b + "self_attn." + m + ".bias", {H}, 0.02f);
    }
    w.add(b + "mlp.fc1.weight", {ffn, H}, 0.02f);
    w.add(b + "mlp.fc1.bias", {ffn}, 0.02f);
    w.add(b + "mlp.fc2.weight", {H, ffn}, 0.02f);
    w.add(b + "mlp.fc2.bias", {H}, 0.02f);
  }
  w.add(v + "post_layernorm.weight", {H}, 0.02f, 1.0f);
  w.add(v + "post_layernorm.bias", {H}, 0.02f);
  w.add("multi_modal_projector.mm_soft_emb_norm.weight", {H}, 0.02f);
  w.add("multi_modal_projector.mm_input_projection_weight", {H, text}, 0.02f);
  w.write(dir, R"({"model_type":"gemma3","mm_tokens_per_image":256,"text_config":{"hidden_size":2560},)"
               R"("vision_config":{"hidden_size":1152,"image_size":896,"intermediate_size":4304,)"
               R"("num_attention_heads":16,"num_hidden_layers":27,"patch_size":14,)"
               R"("hidden_act":"gelu_pytorch_tanh","layer_norm_eps":1e-6}})");
}

void write_qwen3_vl_4b(const fs::path& dir) {
  const int64_t H = 1024, depth = 24, ffn = 4096, out = 2560, P = 16, M = 4 * H;
  Writer w;
  const std::string p = "visual.";
  auto norm = [&](const std::string& n, int64_t width) {
    w.add(n + ".weight", {width}, 0.02f, 1.0f);
    w.add(n + ".bias", {width}, 0.02f);
  };
  auto lin = [&](const std::string& n, int64_t o, int64_t i) {
    w.add(n + ".weight", {o, i}, 0.02f);
    w.add(n + ".bias", {o}, 0.02f);
  };
  w.add(p + "patch_embed.proj.weight", {H, 3, 2, P, P}, 0.02f);
  w.add(p + "patch_embed.proj.bias", {H}, 0.02f);
  w.add(p + "pos_embed.weight", {48 * 48, H}, 0.02f);
  for (int64_t i = 0; i < depth; ++i) {
    const std::string b = p + "blocks." + std::to_string(i) + ".";
    norm(b + "norm1", H);
    norm(b + "norm2", H);
    lin(b + "attn.qkv", 3 * H, H);
    lin(b + "attn.proj", H, H);
    lin(b + "mlp.linear_fc1", ffn, H);
    lin(b + "mlp.linear_fc2", H, ffn);
  }
  norm(p + "merger.norm", H);  // the final merger norms before the 2x2 shuffle, DeepStack's after it
  lin(p + "merger.linear_fc1", M, M);
  lin(p + "merger.linear_fc2", out, M);
  for (int k = 0; k < 3; ++k) {
    const std::string d = p + "deepstack_merger_list." + std::to_string(k) + ".";
    norm(d + "norm", M);
    lin(d + "linear_fc1", M, M);
    lin(d + "linear_fc2", out, M);
  }
  w.write(dir, R"({"model_type":"qwen3_vl","text_config":{"hidden_size":2560},"vision_config":{"depth":24,)"
               R"("hidden_size":1024,"hidden_act":"gelu_pytorch_tanh","intermediate_size":4096,"num_heads":16,)"
               R"("in_channels":3,"out_hidden_size":2560,"patch_size":16,"spatial_merge_size":2,)"
               R"("temporal_patch_size":2,"num_position_embeddings":2304,"deepstack_visual_indexes":[5,11,17]}})");
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// --gemm: each shape's GEMM timed by cudaEvents over 20 launches per round, the kernels alternating; one JSON line per
// shape and kernel with the median round.
int gemm_bench(int rounds) {
  struct Shape {
    int64_t n, out, in;
  };
  const Shape shapes[] = {{4096, 1152, 1152}, {4096, 4304, 1152}, {4096, 1152, 4304}, {1024, 3840, 1280},
                          {1024, 3420, 1280}, {1024, 1280, 3420}, {784, 3072, 1024}, {784, 4096, 1024},
                          {784, 1024, 4096}};
  for (const Shape& sh : shapes) {
    const int64_t ldw = cuda::gemm_k_pad(sh.in), rows = cuda::gemm_rows_pad(sh.out);
    std::vector<uint16_t> hw(size_t(rows * ldw), 0);
    std::vector<float> hx(size_t(sh.n * sh.in));
    uint64_t st = 0x2545f4914f6cdd1dull;
    auto rnd = [&] {
      st ^= st << 13, st ^= st >> 7, st ^= st << 17;
      return float(st >> 40) / float(1 << 24) - 0.5f;
    };
    for (int64_t r = 0; r < sh.out; ++r)
      for (int64_t i = 0; i < sh.in; ++i) hw[size_t(r * ldw + i)] = f32_to_bf16(rnd() * 0.05f);
    for (float& v : hx) v = rnd();
    uint16_t* w = nullptr;
    float *x = nullptr, *y = nullptr;
    cudaMalloc(&w, hw.size() * 2);
    cudaMalloc(&x, hx.size() * 4);
    cudaMalloc(&y, size_t(sh.n * sh.out) * 4);
    cudaMemcpy(w, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice);
    cudaStream_t s;
    cudaStreamCreate(&s);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    const std::vector<std::string> names = cuda::gemm_kernel_names();
    const int kernels = cuda::wgmma_supported() ? int(names.size()) : 1;
    std::vector<std::vector<float>> ms(names.size());
    for (int r = 0; r < rounds + 1; ++r)  // round 0 warms up
      for (int v = 0; v < kernels; ++v) {
        setenv("RAPID_CUDA_TOWER_GEMM", names[v].c_str(), 1);
        cudaEventRecord(a, s);
        for (int i = 0; i < 20; ++i) cuda::gemm_bf16(x, sh.in, w, nullptr, y, sh.out, sh.n, sh.out, sh.in, s);
        cudaEventRecord(b, s);
        cudaEventSynchronize(b);
        float t = 0;
        cudaEventElapsedTime(&t, a, b);
        if (r > 0) ms[v].push_back(t / 20);
      }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      std::printf("FAIL cuda_tower_bench --gemm: %s\n", cudaGetErrorString(e));
      return 1;
    }
    for (int v = 0; v < kernels; ++v) {
      std::sort(ms[v].begin(), ms[v].end());
      const double med = ms[v][ms[v].size() / 2];
      std::printf("{\"gemm\":\"%s\",\"n\":%lld,\"out\":%lld,\"in\":%lld,\"ms\":%.4f,\"tflops\":%.1f}\n", names[v].c_str(),
                  (long long)sh.n, (long long)sh.out, (long long)sh.in, med,
                  2.0 * double(sh.n) * double(sh.out) * double(sh.in) / (med * 1e9));
    }
    std::fflush(stdout);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaStreamDestroy(s);
    cudaFree(w);
    cudaFree(x);
    cudaFree(y);
  }
  unsetenv("RAPID_CUDA_TOWER_GEMM");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string family = "qwen2_5_vl", precision = "fast", device = "cuda";
  fs::path dir;
  int rounds = 5, images = 8;
  bool profile = false, ab = false, gemm = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--profile" || k == "--ab" || k == "--gemm") {
      (k == "--ab" ? ab : k == "--gemm" ? gemm : profile) = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "cuda_tower_bench: %s needs a value\n", k.c_str());
      return 2;
    }
    const std::string v = argv[i + 1];
    if (k == "--family") family = v;
    else if (k == "--dir") dir = v;
    else if (k == "--rounds") rounds = std::atoi(v.c_str());
    else if (k == "--images") images = std::atoi(v.c_str());
    else if (k == "--precision") precision = v;
    else if (k == "--device") device = v;
    else {
      std::fprintf(stderr, "cuda_tower_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if ((family != "qwen2_5_vl" && family != "gemma3" && family != "qwen3_vl") || rounds < 1 || images < 1 ||
      (precision != "fast" && precision != "exact") || (device != "cuda" && device != "cpu")) {
    std::fprintf(stderr, "usage: cuda_tower_bench --family qwen2_5_vl|gemma3|qwen3_vl [--dir DIR] [--rounds N>=1] [--images N>=1] "
                         "[--precision fast|exact] [--device cuda|cpu] [--profile] [--ab] | --gemm [--rounds N]\n");
    return 2;
  }
  int count = 0;
  if (device == "cuda" && (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)) {
    std::printf("SKIP cuda_tower_bench: no CUDA device\n");
    return 0;
  }
  if (gemm) {
    try {
      return gemm_bench(rounds);
    } catch (const std::exception& ex) {
      std::printf("FAIL cuda_tower_bench --gemm: %s\n", ex.what());
      return 1;
    }
  }
  if (dir.empty()) dir = fs::temp_directory_path() / ("rapid-tower-bench-" + family);
  try {
    fs::create_directories(dir);
    if (!fs::exists(dir / "model.safetensors")) {
      const auto t0 = std::chrono::steady_clock::now();
      if (family == "gemma3") write_gemma3_4b(dir);
      else if (family == "qwen3_vl") write_qwen3_vl_4b(dir);
      else write_qwen25_3b(dir);
      std::fprintf(stderr, "wrote %s in %.1f s\n", dir.c_str(), ms_since(t0) / 1000.0);
    }
    std::shared_ptr<const Checkpoint> ck = Checkpoint::open(dir.string());
    const std::unique_ptr<VisionEncoder> enc = load_vision_encoder(ck, ck->config(), family);
    std::vector<float> pix;
    ImageInput in;
    if (family == "gemma3") {
      pix.assign(size_t(3 * 896 * 896), 0.f);
      in.grid_h = in.grid_w = 64;
    } else if (family == "qwen3_vl") {  // 448x448 at patch 16: 28x28 patches
      pix.assign(size_t(28 * 28 * 3 * 2 * 16 * 16), 0.f);
      in.grid_h = in.grid_w = 28;
    } else {
      pix.assign(size_t(32 * 32 * 3 * 2 * 14 * 14), 0.f);
      in.grid_h = in.grid_w = 32;
    }
    for (size_t i = 0; i < pix.size(); ++i) pix[i] = float(int(i * 2654435761u % 2001) - 1000) / 1000.f;
    in.pixels = pix.data();
    in.n_values = int64_t(pix.size());
    const Precision p = precision == "fast" ? Precision::Fast : Precision::Exact;
    ThreadPool pool(0);
    const std::unique_ptr<ops::Backend> be =
        device == "cuda" ? cuda::make_cuda_ops() : std::unique_ptr<ops::Backend>(new ops::CpuBackend(pool));
    auto t0 = std::chrono::steady_clock::now();
    const ImageEmbedding e = enc->encode(in, *be, p);
    const double warm_ms = ms_since(t0);
    // FNV-1a of the embeddings' bits: two builds (or kernels) that should agree bitwise print the same hash.
    uint64_t hash = 1469598103934665603ull;
    for (const std::vector<float>* v : {&e.embeddings, &e.deepstack})
      for (const float f : *v) {
        uint32_t b;
        std::memcpy(&b, &f, 4);
        hash = (hash ^ b) * 1099511628211ull;
      }
    std::printf("{\"family\":\"%s\",\"device\":\"%s\",\"precision\":\"%s\",\"tokens\":%lld,\"width\":%lld,\"warmupMs\":%.2f,\"weightMiB\":%.0f,\"embedHash\":\"%016llx\"}\n",
                family.c_str(), device.c_str(), precision.c_str(), (long long)e.tokens, (long long)enc->text_hidden(), warm_ms,
                double(cuda::uploaded_weight_bytes(*be)) / 1048576.0, (unsigned long long)hash);
    // The GEMM kernels to time: the environment's choice, or both (--ab).
    const char* env = std::getenv("RAPID_CUDA_TOWER_GEMM");
    const std::vector<std::string> gemms = ab ? std::vector<std::string>{"v2", "v3"}
                                              : std::vector<std::string>{env ? env : "default"};
    auto use = [&](const std::string& g) { setenv("RAPID_CUDA_TOWER_GEMM", g.c_str(), 1); };
    for (int r = 0; r < rounds; ++r)
      for (const std::string& g : gemms) {
        use(g);
        t0 = std::chrono::steady_clock::now();
        enc->encode(in, *be, p);
        std::printf("{\"family\":\"%s\",\"gemm\":\"%s\",\"images\":1,\"ms\":%.3f}\n", family.c_str(), g.c_str(), ms_since(t0));
        t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < images; ++i) enc->encode(in, *be, p);
        std::printf("{\"family\":\"%s\",\"gemm\":\"%s\",\"images\":%d,\"ms\":%.3f}\n", family.c_str(), g.c_str(), images,
                    ms_since(t0));
        // The same images as the engine sends them: batched forwards (encode_images), each image's bits unchanged.
        t0 = std::chrono::steady_clock::now();
        const std::vector<ImageEmbedding> b = encode_images(*enc, std::vector<ImageInput>(size_t(images), in), *be, p);
        const double bms = ms_since(t0);
        bool same = b.size() == size_t(images);
        for (const ImageEmbedding& x : b) same = same && x.embeddings == e.embeddings && x.deepstack == e.deepstack;
        std::printf("{\"family\":\"%s\",\"gemm\":\"%s\",\"images\":%d,\"batched\":true,\"ms\":%.3f,\"sameBits\":%s}\n",
                    family.c_str(), g.c_str(), images, bms, same ? "true" : "false");
        std::fflush(stdout);
      }
    if (profile && device == "cuda")
      for (const std::string& g : gemms) {
        use(g);
        cuda::set_tower_profile(*be, true);
        t0 = std::chrono::steady_clock::now();
        enc->encode(in, *be, p);
        const cuda::TowerProfile t = cuda::take_tower_profile(*be);
        const double total = ms_since(t0);
        cuda::set_tower_profile(*be, false);
        std::printf("{\"family\":\"%s\",\"profile\":true,\"gemm\":\"%s\",\"totalMs\":%.3f,\"gemmMs\":%.3f,\"gemmCalls\":%lld,"
                    "\"gemmTflops\":%.1f,\"attentionMs\":%.3f,\"attentionCalls\":%lld,\"restMs\":%.3f}\n",
                    family.c_str(), g.c_str(), total, t.gemm_ms, (long long)t.gemm_calls,
                    t.gemm_ms > 0 ? t.gemm_flop / (t.gemm_ms * 1e9) : 0.0, t.attention_ms, (long long)t.attention_calls,
                    total - t.gemm_ms - t.attention_ms);
        std::fflush(stdout);
      }
  } catch (const std::exception& ex) {
    std::printf("FAIL cuda_tower_bench %s: %s\n", family.c_str(), ex.what());
    return 1;
  }
  return 0;
}
