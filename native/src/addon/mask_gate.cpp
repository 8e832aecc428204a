#include "addon/mask_gate.h"
#include <chrono>

namespace rapid {

bool MaskGate::supply(std::unordered_map<std::string, std::vector<uint32_t>> masks) {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (closed_ || supplied_) return false;
    masks_ = std::move(masks);
    supplied_ = true;
  }
  cv_.notify_all();
  return true;
}

LateMasks MaskGate::wait() {
  std::unique_lock<std::mutex> lock(m_);
  const auto limit = std::chrono::duration<double, std::milli>(timeout_ms_);
  const bool got = cv_.wait_for(lock, limit, [&] { return supplied_; });
  closed_ = true;  // from here on the step no longer listens
  LateMasks out;
  if (!got) {
    out.error = "the grammar bitmask for this row was not supplied within " + std::to_string(int64_t(timeout_ms_)) +
                " ms of the forward's end (the grammar stalled)";
    return out;
  }
  out.supplied = true;
  out.masks = std::move(masks_);
  return out;
}

void MaskGate::close() {
  std::lock_guard<std::mutex> lock(m_);
  closed_ = true;
}

}  // namespace rapid
