// Grammar bitmasks a plan left pending ("computed while the forward runs"): the executor asks for
// them after the forward, right before sampling. Whoever supplies them (the addon's MaskGate) bounds
// the wait; a row whose mask does not arrive fails alone.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace rapid {

struct LateMasks {
  bool supplied = false;  // false: none arrived in time; `error` says why
  std::string error;
  // requestId -> ceil(vocab/32) words; an empty vector: the caller withheld that row's mask
  // (its request ended while the forward ran), so the row is not sampled.
  std::unordered_map<std::string, std::vector<uint32_t>> masks;
};

class MaskSource {
 public:
  virtual ~MaskSource() = default;
  // Blocks (bounded) until the masks arrive or the source gives up; called once per step.
  virtual LateMasks wait() = 0;
};

}  // namespace rapid
