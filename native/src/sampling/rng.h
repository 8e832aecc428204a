// Counter-based randomness: the uniform draw is a pure function of (seed, counter), so a request's
// samples never depend on batch composition, admission order, or how many draws others made.
#pragma once
#include <cstdint>

namespace rapid {

// SplitMix64 finalizer: a bijective 64-bit mix with full avalanche.
inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform double in [0, 1) with 53 random bits, from (seed, counter).
inline double uniform_draw(uint64_t seed, uint64_t counter) {
  const uint64_t r = mix64(mix64(seed) ^ mix64(counter ^ 0xd1b54a32d192ed03ull));
  return double(r >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace rapid
