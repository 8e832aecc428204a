// The hand-off of one step's late grammar bitmasks between threads: the JS thread supplies them
// once (ModelWrap::SupplyMasks) while the step worker runs the forward; the worker waits for them,
// at most timeout_ms from when it starts waiting, then samples. Late or repeated supplies are refused.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include "step/mask_source.h"

namespace rapid {

class MaskGate : public MaskSource {
 public:
  MaskGate(uint64_t step_id, double timeout_ms) : step_id_(step_id), timeout_ms_(timeout_ms) {}
  uint64_t step_id() const { return step_id_; }
  // JS thread. False when the step no longer waits (timed out, finished) or was already supplied.
  bool supply(std::unordered_map<std::string, std::vector<uint32_t>> masks);
  // Worker thread.
  LateMasks wait() override;
  // Worker thread, after the step: any later supply is refused.
  void close();

 private:
  const uint64_t step_id_;
  const double timeout_ms_;
  std::mutex m_;
  std::condition_variable cv_;
  bool supplied_ = false;
  bool closed_ = false;
  std::unordered_map<std::string, std::vector<uint32_t>> masks_;
};

}  // namespace rapid
