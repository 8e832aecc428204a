#include "cuda/tiled_codes.h"
#include "tensor/dtype.h"
#include <algorithm>
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

// Scale/bias tiles [t0, t1) of T elements: (tile, group, r < 8) -> s(a), b(a), s(b), b(b), contiguous from t0's offset.
template <class T>
void scale_range(const T* s, const T* b, int64_t out, int64_t ng, int64_t t0, int64_t t1, T* dst) {
  T* d = dst + t0 * ng * 32;
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t g = 0; g < ng; ++g)
      for (int r = 0; r < 8; ++r)
        for (int h = 0; h < 2; ++h) {
          const int64_t at = std::min(t * 16 + r + 8 * h, out - 1) * ng + g;  // a partial tile repeats the last row
          *d++ = s[at];
          *d++ = b[at];
        }
}

// Runs fn(t0, t1) over tiles [0, tiles) split across up to `threads` threads (0: the hardware's), each with at least
// ~4 MB of output: smaller weights are not worth a thread. The result does not depend on the split.
template <class Fn>
void over_tiles(int64_t tiles, int64_t tile_bytes, int threads, Fn fn) {
  const int64_t by_size = std::max<int64_t>(1, tiles * tile_bytes / (int64_t(4) << 20));
  const int64_t hw = threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
  const int64_t n = std::min({hw, by_size, tiles});
  if (n <= 1) return fn(int64_t(0), tiles);
  std::vector<std::thread> pool;
  for (int64_t k = 0; k < n; ++k) pool.emplace_back(fn, tiles * k / n, tiles * (k + 1) / n);
  for (std::thread& th : pool) th.join();
}

}  // namespace

void tile_codes(const uint32_t* src, int64_t out, int64_t in, int bits, int group, uint32_t* dst, int threads) {
  const int64_t wpt = group * bits / 128, ng = in / group, wpr = in * bits / 32, tiles = (out + 15) / 16;
  over_tiles(tiles, ng * 64 * wpt * 4, threads,
             [&](int64_t t0, int64_t t1) { tile_range(src, out, ng, wpt, wpr, t0, t1, dst); });
}

size_t tiled_scale_bytes(int64_t out, int64_t ng, int esz) {
  return size_t((out + 15) / 16) * size_t(ng) * 32 * size_t(esz);
}

void tile_scales(const void* scales, const void* biases, int64_t out, int64_t ng, int esz, void* dst, int threads) {
  const int64_t tiles = (out + 15) / 16;
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const T* s = static_cast<const T*>(scales);
    const T* b = static_cast<const T*>(biases);
    over_tiles(tiles, ng * 32 * int64_t(sizeof(T)), threads,
               [&](int64_t t0, int64_t t1) { scale_range(s, b, out, ng, t0, t1, static_cast<T*>(dst)); });
  };
  if (esz == 4) run(uint32_t{});
  else run(uint16_t{});
}

size_t tiled_weight_scale_bytes(const Weight& w) {
  return tiled_scale_bytes(w.out, w.in / w.group, int(dtype_size(w.dtype)));
}

void tile_weight(const Weight& w, uint32_t* codes, void* quads) {
  tile_codes(static_cast<const uint32_t*>(w.data), w.out, w.in, w.bits, w.group, codes);
  tile_scales(w.scales, w.biases, w.out, w.in / w.group, int(dtype_size(w.dtype)), quads);
}

}  // namespace rapid::cuda
