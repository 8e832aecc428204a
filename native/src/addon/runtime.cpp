#include "addon/runtime.h"
#include <algorithm>
#include <fstream>
#include <string>
#include "models/cpu_weight_copies.h"
#include "models/registry.h"

namespace rapid {

// MemAvailable from /proc/meminfo in bytes (0 if unknown, e.g. not Linux).
static int64_t available_memory() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

std::shared_ptr<Runtime> load_runtime(const std::string& dir, const LoadOptions& o) {
  auto rt = std::make_shared<Runtime>();
  rt->pool = std::make_unique<ThreadPool>(o.threads > 0 ? o.threads : ThreadPool::hardware_threads());
  rt->precision = o.precision;
  // Host default: a quarter of available memory, capped at 2 GiB; pages are only committed when written.
  const int64_t avail = available_memory();
  const int64_t host_default = std::min<int64_t>(avail > 0 ? avail / 4 : (int64_t(512) << 20), int64_t(2) << 30);
  Placement p = place_model(load_model(dir), o.device, o.block_size, o.kv_bytes, host_default, o.precision, o.kv_dtype);
  rt->model = std::move(p.model);
  rt->kv = std::move(p.kv);
  rt->device = std::move(p.device);
  rt->device_name = std::move(p.device_name);
  rt->device_note = std::move(p.note);
  if (rt->device == "cpu") make_cpu_weight_copies(*rt->model, *rt->pool, rt->precision);
  return rt;
}

}  // namespace rapid
