// Device discovery and the model checks of the CUDA backend.
#include <cuda_runtime.h>
#include <cstdio>
#include <string>
#include "cuda/cuda_backend.h"
#include "cuda/cuda_kernels.h"
#include "cuda/launch.cuh"
#include "cuda/moe.h"
#include "cuda/wide_attention.h"
#include "models/decoder.h"
#include "models/ops_model.h"
#include "quant/mlx_quant.h"

namespace rapid::cuda {

static std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

CudaStatus status() {
  CudaStatus s;
  s.compiled = true;
  int rt = 0, drv = 0, n = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) s.runtime_version = version_string(rt);
  if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0) s.driver_version = version_string(drv);
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    s.error = std::string("no usable CUDA device: ") + cudaGetErrorString(e);
    (void)cudaGetLastError();  // clear the non-sticky error so later calls start clean
    return s;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    GpuInfo g;
    g.index = i;
    g.name = p.name;
    g.total_bytes = int64_t(p.totalGlobalMem);
    g.cc_major = p.major;
    g.cc_minor = p.minor;
    size_t free = 0, total = 0;
    // Only device 0 runs models; asking the others for free memory would create contexts on them.
    if (i == 0 && cudaSetDevice(0) == cudaSuccess && cudaMemGetInfo(&free, &total) == cudaSuccess)
      g.free_bytes = int64_t(free);
    s.devices.push_back(g);
  }
  if (s.devices.empty()) s.error = "no CUDA device";
  return s;
}

int64_t free_bytes() {
  size_t free = 0, total = 0;
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return int64_t(free);
}

int64_t tower_device_bytes(const Model& host, Precision precision) {
  const VisionEncoder* v = host.vision();
  if (!v) return 0;
  // Stored bytes per parameter: affine B-bit gG packs B bits plus a 16-bit scale and bias per G; a "mixed" tower is
  // counted as 4-bit g64 and a dense one as 16-bit (both the most parameters its bytes could hold).
  double per = 2.0;
  int bits = 0, group = 0;
  const std::string q = v->quantization();
  if (std::sscanf(q.c_str(), "affine %d-bit g%d", &bits, &group) == 2 && bits > 0 && group > 0) per = bits / 8.0 + 4.0 / group;
  else if (q == "mixed") per = 0.5 + 4.0 / 64;
  return int64_t(double(v->weight_bytes()) / per * (precision == Precision::Fast ? 2.0 : 4.0));
}

static std::string weight_problem(const Weight& w, const std::string& what) {
  const bool float_type = w.dtype == DType::F32 || w.dtype == DType::F16 || w.dtype == DType::BF16;
  if (w.kind == WeightKind::Dense) {
    if (!float_type) return what + " has dtype " + dtype_name(w.dtype) + " (the CUDA kernels take F32/F16/BF16)";
    if (w.in % 8 != 0) return what + " has an input width of " + std::to_string(w.in) + " (the CUDA kernels need a multiple of 8)";
    return "";
  }
  if (w.bits != 4 && w.bits != 8) return what + " is " + std::to_string(w.bits) + "-bit (the CUDA kernels take 4 and 8 bits)";
  if (w.group != 32 && w.group != 64 && w.group != 128) return what + " has group size " + std::to_string(w.group);
  if (!float_type) return what + " has scales of dtype " + dtype_name(w.dtype);
  return "";
}

// A family over the op backend (cuda/cuda_ops_model): every weight format and layer kind runs on the CUDA ops, MoE
// blocks where cuda/moe.h takes them, and attention takes heads up to wide_attention's width.
static std::string ops_model_problem(const Model& host, const OpsModel& om) {
  const std::vector<MoeBlockRef> moe = om.moe_blocks();
  if (om.uses_moe() && moe.empty())
    return "mixture-of-experts layers of " + host.info().family + " run on the CPU only for now";
  for (size_t l = 0; l < moe.size(); ++l)
    if (std::string why = moe_unsupported(*moe[l].router, *moe[l].experts); !why.empty())
      return "mixture-of-experts block " + std::to_string(l) + " of " + host.info().family + ": " + why;
  for (const KvLayerSpec& k : host.kv_layers())
    if (k.head_dim % 4 != 0 || k.head_dim > kWideAttnMaxHeadDim)
      return "head_dim " + std::to_string(k.head_dim) + " is not supported on CUDA (a multiple of 4, <= " +
             std::to_string(kWideAttnMaxHeadDim) + ")";
  return "";
}

std::string unsupported_reason(const Model& host) {
  const ModelInfo& info = host.info();
  if (const OpsModel* om = host.ops_model()) return ops_model_problem(host, *om);
  const DecoderParts* parts = host.decoder_parts();
  if (!parts) return info.family + " (" + info.architecture + ") has no CUDA implementation yet; it runs on the CPU";
  const DecoderConfig& d = *parts->cfg;
  for (const KvLayerSpec& k : host.kv_layers())
    if (k.cache_of >= 0) return "layers that share another layer's KV cache run on the CPU only for now";
  if (d.head_dim > 256 || d.head_dim % 2 != 0) return "head_dim " + std::to_string(d.head_dim) + " is not supported on CUDA (even, <= 256)";
  std::string why = weight_problem(*parts->embed, "embed_tokens");
  if (why.empty()) why = weight_problem(*parts->head, "lm_head");
  for (size_t l = 0; l < parts->layers->size() && why.empty(); ++l) {
    const DecoderLayer& L = (*parts->layers)[l];
    const std::string p = "layer " + std::to_string(l) + " ";
    if (L.is_moe) {  // the attention as any layer's, then the router and every expert (cuda/moe.h)
      if (d.sandwich_norms) return "mixture-of-experts layers with sandwich norms run on the CPU only for now";
      why = moe_unsupported(L.moe);
      if (why.empty()) why = weight_problem(L.moe.router.gate.w, p + "router");
      const MoeExperts& ex = L.moe.experts;
      for (const auto& [ws, name] : {std::pair<const std::vector<Weight>*, const char*>{&ex.gate, "expert gate_proj"},
                                     {&ex.up, "expert up_proj"}, {&ex.down, "expert down_proj"}})
        for (size_t e = 0; e < ws->size() && why.empty(); ++e) why = weight_problem((*ws)[e], p + name + " " + std::to_string(e));
      for (const auto& [w, name] : {std::pair<const Weight*, const char*>{&L.q.w, "q_proj"}, {&L.k.w, "k_proj"},
                                    {&L.v.w, "v_proj"}, {&L.o.w, "o_proj"}})
        if (why.empty()) why = weight_problem(*w, p + name);
      continue;
    }
    for (const auto& [w, name] : {std::pair<const Weight*, const char*>{&L.q.w, "q_proj"}, {&L.k.w, "k_proj"},
                                  {&L.v.w, "v_proj"}, {&L.o.w, "o_proj"}, {&L.mlp.gate.w, "gate_proj"},
                                  {&L.mlp.up.w, "up_proj"}, {&L.mlp.down.w, "down_proj"}})
      if (why.empty()) why = weight_problem(*w, p + name);
  }
  return why;
}

}  // namespace rapid::cuda
