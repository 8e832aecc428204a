#include "backend/device.h"
#include <algorithm>
#include <stdexcept>
#include "cpu/matmul.h"
#if RAPID_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace rapid {

DeviceKind parse_device(const std::string& s) {
  if (s == "auto") return DeviceKind::Auto;
  if (s == "cpu") return DeviceKind::Cpu;
  if (s == "cuda") return DeviceKind::Cuda;
  throw std::invalid_argument("device must be 'auto', 'cpu' or 'cuda', got '" + s + "'");
}

CudaStatus cuda_status() {
#if RAPID_CUDA
  return cuda::status();
#else
  CudaStatus s;
  s.error = "this rapid binary was built without CUDA (the CPU variant); build the CUDA variant with `npm run build:cuda`";
  return s;
#endif
}

static Placement on_cpu(std::unique_ptr<Model> host, int block_size, int64_t kv_bytes, int64_t host_default,
                        KvDtype kv_dtype, std::string note) {
  Placement p;
  p.kv = std::make_unique<KvPool>(host->kv_layers(), block_size, size_t(kv_bytes > 0 ? kv_bytes : host_default),
                                  /*allocate=*/true, kv_dtype);
  p.model = std::move(host);
  p.device = "cpu";
  p.device_name = matmul_kernel_name();
  p.note = std::move(note);
  return p;
}

Placement place_model(std::unique_ptr<Model> host, DeviceKind want, int block_size, int64_t kv_bytes,
                      int64_t host_default, [[maybe_unused]] Precision precision, std::optional<KvDtype> kv_dtype) {
  const bool exact = precision == Precision::Exact;
  const KvDtype cpu_dtype = kv_dtype.value_or(default_kv_dtype(false, exact));
  if (want == DeviceKind::Cpu) return on_cpu(std::move(host), block_size, kv_bytes, host_default, cpu_dtype, "");
  const CudaStatus st = cuda_status();
  std::string why;
  if (!st.compiled || st.devices.empty()) why = st.error.empty() ? "no CUDA device" : st.error;
#if RAPID_CUDA
  // Every KvDtype is stored on CUDA too (cuda/kv_elems.cuh), with the CPU pool's bytes.
  const KvDtype cuda_dtype = kv_dtype.value_or(default_kv_dtype(true, exact));
  if (why.empty()) why = cuda::unsupported_reason(*host);
  if (why.empty()) {
    // Default KV budget: half of what the weights leave free, at most 32 GiB (of blocks of the chosen type). The
    // image tower's device copy (dequantized on upload) may be larger than its stored bytes, which weight_bytes counts.
    int64_t budget = kv_bytes;
    if (budget <= 0) {
      const int64_t stored_tower = host->vision() ? int64_t(host->vision()->weight_bytes()) : 0;
      const int64_t tower_extra = std::max<int64_t>(0, cuda::tower_device_bytes(*host, precision) - stored_tower);
      const int64_t left = cuda::free_bytes() - int64_t(host->info().weight_bytes) - tower_extra;
      budget = std::min<int64_t>(std::max<int64_t>(left / 2, int64_t(256) << 20), int64_t(32) << 30);
    }
    Placement p;
    p.kv = std::make_unique<KvPool>(host->kv_layers(), block_size, size_t(budget), /*allocate=*/false, cuda_dtype);
    p.model = cuda::make_cuda_model(std::move(host), *p.kv, precision);
    p.device = "cuda";
    p.device_name = st.devices.front().name;
    return p;
  }
#endif
  if (want == DeviceKind::Cuda) throw std::runtime_error("device cuda: " + why);
  return on_cpu(std::move(host), block_size, kv_bytes, host_default, cpu_dtype, "CUDA not used: " + why);
}

}  // namespace rapid
