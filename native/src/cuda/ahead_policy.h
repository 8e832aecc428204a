// When the CUDA decoder enqueues the next decode step ahead (cuda_decoder.cu, try_ahead). A hit hides the host's time
// between steps (gap); a miss (a row ended or joined, a token or draw other than expected) makes the asked-for step
// wait behind a useless one (step - gap). With the recent miss rate m (per step, decaying by 1/8), running ahead
// pays when (1 - m)·gap > m·(step - gap). Host code, no CUDA: unit-tested on the CPU.
#pragma once
#include <algorithm>

namespace rapid::cuda {

struct AheadPolicy {
  double miss = 0;     // recent misses per step
  double gap_ms = 0;   // host time between a step's return and the next forward (moving average)
  double step_ms = 0;  // a step computed when asked for: forward to tokens (moving average)

  void on_step() { miss *= 0.875; }
  void on_miss() { miss += 0.125; }
  // An idle server's gap says nothing about the next steps: a sample is capped at 50 ms.
  void on_gap(double ms) { mix(gap_ms, std::min(ms, 50.0)); }
  void on_plain_step(double ms) { mix(step_ms, ms); }
  bool worth() const {
    const double gap = std::min(gap_ms, step_ms);  // at most a whole step can be hidden
    return miss == 0 || (1 - miss) * gap > miss * (step_ms - gap);
  }

 private:
  static void mix(double& avg, double sample) { avg = avg == 0 ? sample : 0.75 * avg + 0.25 * sample; }
};

}  // namespace rapid::cuda
