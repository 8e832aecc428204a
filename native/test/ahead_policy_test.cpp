// cuda::AheadPolicy (when the CUDA decoder runs the next step ahead) on scripted step histories: on by default, on
// while misses are rare against the host gap it hides, off while they cost more, back on as they age, and idle
// gaps capped. Prints "N passed, M failed"; exits 1 on a failure. Pure C++: no GPU needed.
#include <cstdio>
#include <string>
#include "cuda/ahead_policy.h"

namespace {

int g_passed = 0, g_failed = 0;

void check(bool ok, const std::string& name) {
  (ok ? g_passed : g_failed)++;
  if (!ok) std::printf("FAIL %s\n", name.c_str());
}

// A policy that has seen `steps` plain steps of step_ms and host gaps of gap_ms.
rapid::cuda::AheadPolicy measured(double step_ms, double gap_ms, int steps = 8) {
  rapid::cuda::AheadPolicy p;
  for (int i = 0; i < steps; ++i) {
    p.on_plain_step(step_ms);
    p.on_gap(gap_ms);
  }
  return p;
}

}  // namespace

int main() {
  rapid::cuda::AheadPolicy fresh;
  check(fresh.worth(), "a fresh policy runs ahead (no miss yet)");

  // 0.5B-like at batch 1: 0.75 ms steps, 0.15 ms host gap: one miss (m = 1/8) still pays (0.875·0.15 > 0.125·0.6).
  auto small = measured(0.75, 0.15);
  small.on_step();
  small.on_miss();
  check(small.worth(), "one miss against a large gap share: still ahead");

  // 3B-like at 64 rows: 7.6 ms steps, 0.3 ms gap: right after a miss it does not pay...
  auto big = measured(7.6, 0.3);
  big.on_step();
  big.on_miss();
  check(!big.worth(), "a miss against a small gap share: not ahead");
  // ...and it pays again once the miss has aged (m < gap / step).
  int steps = 0;
  while (!big.worth() && steps < 100) {
    big.on_step();
    ++steps;
  }
  check(steps > 1 && steps < 40, "the miss ages out after a few steps (took " + std::to_string(steps) + ")");

  // Misses every other step never pay against a small gap.
  auto churn = measured(2.0, 0.2);
  int ahead = 0;
  for (int i = 0; i < 64; ++i) {
    churn.on_step();
    if (churn.worth()) ++ahead;
    if (i % 2 == 0) churn.on_miss();
  }
  check(ahead <= 2, "constant churn keeps it off (ahead on " + std::to_string(ahead) + " of 64 steps)");

  // An idle server's gap (seconds between requests) is capped, and a gap never counts for more than a step.
  auto idle = measured(1.0, 0.1);
  idle.on_gap(5000.0);
  check(idle.gap_ms <= 0.75 * 0.1 + 0.25 * 50.0 + 1e-9, "an idle gap is capped at 50 ms");
  idle.on_step();
  idle.on_miss();
  idle.on_miss();
  idle.on_miss();  // m = 0.375, gap (12.6 ms) > step (1 ms): a miss then costs nothing the gap did not already
  check(idle.worth(), "a gap longer than the step counts as the step, and a miss behind it costs nothing");

  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
