// Where a model runs. The CPU backend is always present and stays the reference; the CUDA backend is
// compiled into the CUDA variant of the addon only (RAPID_CUDA), and picked when a GPU is present.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include "kv/kv_pool.h"
#include "models/model.h"

namespace rapid {

enum class DeviceKind { Auto, Cpu, Cuda };

// "auto" | "cpu" | "cuda"; throws naming the accepted values otherwise.
DeviceKind parse_device(const std::string& s);

struct GpuInfo {
  int index = 0;
  std::string name;
  int64_t total_bytes = 0, free_bytes = 0;
  int cc_major = 0, cc_minor = 0;
};

struct CudaStatus {
  bool compiled = false;        // this binary has the CUDA backend
  std::vector<GpuInfo> devices;
  std::string driver_version;   // e.g. "13.0" (what the driver supports), empty if no driver
  std::string runtime_version;  // the CUDA runtime linked in
  std::string error;            // why no device is usable, when none is
};

CudaStatus cuda_status();

// The model to run and its KV pool (storage on the model's device).
struct Placement {
  std::unique_ptr<Model> model;
  std::unique_ptr<KvPool> kv;
  std::string device;       // "cpu" | "cuda"
  std::string device_name;  // e.g. "NVIDIA H200"; on the CPU the kernel family ("avx2")
  std::string note;         // why CUDA was not used under auto (empty otherwise)
};

// Places a loaded (host) model: CUDA when asked or when auto finds a GPU that supports it, else CPU.
// kv_bytes <= 0 picks the device's default budget (host: host_default). Throws when CUDA was asked
// for and cannot be used, saying why; with auto, the placement's note says why the CPU was chosen.
// `precision` is the arithmetic every forward will use (CUDA lays Fast-only weights out for it).
// kv_dtype: the KV cache's element type; unset picks default_kv_dtype for the device and precision.
Placement place_model(std::unique_ptr<Model> host, DeviceKind want, int block_size, int64_t kv_bytes,
                      int64_t host_default, Precision precision, std::optional<KvDtype> kv_dtype = std::nullopt);

}  // namespace rapid
