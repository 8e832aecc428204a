#include "cuda/tiled_codes.h"
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace rapid::cuda {

size_t tiled_words(int64_t out, int64_t in, int bits) { return size_t((out + 15) / 16 * 16) * size_t(in * bits / 32); }

namespace {

// Tiles [t0, t1): each is ng groups x 32 lanes x (a, b) x wpt words, contiguous from tile t0's offset.
void tile_range(const uint32_t* src, int64_t out, int64_t ng, int64_t wpt, int64_t wpr, int64_t t0, int64_t t1,
                uint32_t* dst) {
  const int64_t gw = 4 * wpt;
  uint32_t* d = dst + t0 * ng * 64 * wpt;
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t g = 0; g < ng; ++g)
      for (int lane = 0; lane < 32; ++lane)
        for (int h = 0; h < 2; ++h) {
          const int64_t row = std::min(t * 16 + lane / 4 + 8 * h, out - 1);  // a partial tile repeats the last row
          const uint32_t* s = src + row * wpr + g * gw + (lane % 4) * wpt;
          for (int64_t i = 0; i < wpt; ++i) *d++ = s[i];
        }
}

}  // namespace

void tile_codes(const uint32_t* src, int64_t out, int64_t in, int bits, int group, uint32_t* dst, int threads) {
  const int64_t wpt = group * bits / 128, ng = in / group, wpr = in * bits / 32, tiles = (out + 15) / 16;
  // At least ~4 MB of codes per thread: smaller weights are not worth a thread.
  const int64_t per_tile = ng * 64 * wpt * 4;
  const int64_t by_size = std::max<int64_t>(1, tiles * per_tile / (int64_t(4) << 20));
  const int64_t hw = threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
  const int64_t n = std::min({hw, by_size, tiles});
  if (n <= 1) return tile_range(src, out, ng, wpt, wpr, 0, tiles, dst);
  std::vector<std::thread> pool;
  for (int64_t k = 0; k < n; ++k)
    pool.emplace_back(tile_range, src, out, ng, wpt, wpr, tiles * k / n, tiles * (k + 1) / n, dst);
  for (std::thread& th : pool) th.join();
}

size_t tiled_scale_bytes(int64_t out, int64_t ng, int esz) {
  return size_t((out + 15) / 16) * size_t(ng) * 32 * size_t(esz);
}

void tile_scales(const void* scales, const void* biases, int64_t out, int64_t ng, int esz, void* dst) {
  const auto* s = static_cast<const uint8_t*>(scales);
  const auto* b = static_cast<const uint8_t*>(biases);
  auto* d = static_cast<uint8_t*>(dst);
  const int64_t tiles = (out + 15) / 16;
  for (int64_t t = 0; t < tiles; ++t)
    for (int64_t g = 0; g < ng; ++g)
      for (int r = 0; r < 8; ++r)
        for (int h = 0; h < 2; ++h) {
          const int64_t row = std::min(t * 16 + r + 8 * h, out - 1);
          const size_t at = size_t(row * ng + g) * size_t(esz);
          std::memcpy(d, s + at, size_t(esz));
          std::memcpy(d + esz, b + at, size_t(esz));
          d += 2 * esz;
        }
}

}  // namespace rapid::cuda
