// What a loaded model owns on the native side: weights, the KV pool, the thread pool, and the
// one-step-in-flight flag. Shared between the JS wrapper and a running step worker.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include "addon/mask_gate.h"
#include "backend/device.h"
#include "cpu/matmul.h"
#include "cpu/threadpool.h"
#include "kv/kv_pool.h"
#include "models/model.h"

namespace rapid {

struct LoadOptions {
  int threads = 0;          // <= 0: hardware threads
  int64_t kv_bytes = 0;     // <= 0: default share of available memory
  int block_size = 16;
  Precision precision = Precision::Fast;
  DeviceKind device = DeviceKind::Auto;
  std::optional<KvDtype> kv_dtype;  // unset: default_kv_dtype for the device and precision
};

struct Runtime {
  std::unique_ptr<Model> model;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<KvPool> kv;
  Precision precision = Precision::Fast;
  std::string device, device_name, device_note;  // see Placement
  std::atomic<bool> busy{false};
  // The in-flight step's late-mask hand-off (null when it has no pending masks).
  std::mutex gate_mutex;
  std::shared_ptr<MaskGate> gate;
};

std::shared_ptr<Runtime> load_runtime(const std::string& dir, const LoadOptions& o);

}  // namespace rapid
