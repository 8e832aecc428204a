// cuda::tile_codes and cuda::tile_scales (the tensor-core path's layouts, repacked on the host at load) against
// their definitions, element by element: 4/8-bit codes, groups 32/64/128, 16-bit and f32 scales, full and partial
// last tiles; and each threaded split equal to one thread. Prints "N passed, M failed"; exits 1 on a failure. No GPU.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "cuda/tiled_codes.h"

namespace {

int g_passed = 0, g_failed = 0;

void report(bool ok, const std::string& name) {
  (ok ? g_passed : g_failed)++;
  if (!ok) std::printf("FAIL %s\n", name.c_str());
}

// dst word (t, g, lane, h, i) = src word of row min(16t + lane/4 + 8h, out-1), group g, quarter lane%4, word i.
bool matches_definition(const std::vector<uint32_t>& src, const std::vector<uint32_t>& dst, int64_t out, int64_t in,
                        int bits, int group) {
  const int64_t wpt = group * bits / 128, ng = in / group, wpr = in * bits / 32, tiles = (out + 15) / 16;
  if (dst.size() != size_t(tiles * 16 * wpr)) return false;
  size_t k = 0;
  for (int64_t t = 0; t < tiles; ++t)
    for (int64_t g = 0; g < ng; ++g)
      for (int lane = 0; lane < 32; ++lane)
        for (int h = 0; h < 2; ++h) {
          const int64_t r = t * 16 + lane / 4 + 8 * h, row = r < out ? r : out - 1;
          for (int64_t i = 0; i < wpt; ++i)
            if (dst[k++] != src[size_t(row * wpr + g * group * bits / 32 + (lane % 4) * wpt + i)]) return false;
        }
  return k == dst.size();
}

// dst element (t, g, r, h, k) = (k ? biases : scales)[min(16t + r + 8h, out-1), g].
template <class T>
bool scales_match(const std::vector<T>& sc, const std::vector<T>& bi, const std::vector<T>& dst, int64_t out, int64_t ng) {
  size_t k = 0;
  for (int64_t t = 0; t < (out + 15) / 16; ++t)
    for (int64_t g = 0; g < ng; ++g)
      for (int r = 0; r < 8; ++r)
        for (int h = 0; h < 2; ++h) {
          const int64_t row = std::min<int64_t>(t * 16 + r + 8 * h, out - 1);
          if (dst[k++] != sc[size_t(row * ng + g)] || dst[k++] != bi[size_t(row * ng + g)]) return false;
        }
  return k == dst.size();
}

}  // namespace

int main() {
  std::mt19937 rng(7);
  for (int bits : {4, 8})
    for (int group : {32, 64, 128})
      for (int64_t out : {1, 15, 16, 17, 40, 64})
        for (int64_t in : {int64_t(group), int64_t(3 * group), int64_t(512)}) {
          if (in % group != 0) continue;
          std::vector<uint32_t> src(size_t(out * in * bits / 32));
          for (uint32_t& w : src) w = rng();
          std::vector<uint32_t> dst(rapid::cuda::tiled_words(out, in, bits), 0xDEADBEEFu);
          rapid::cuda::tile_codes(src.data(), out, in, bits, group, dst.data(), 1);
          report(matches_definition(src, dst, out, in, bits, group),
                 "a" + std::to_string(bits) + "g" + std::to_string(group) + " [" + std::to_string(out) + "x" + std::to_string(in) + "]");
        }
  // Big enough to be split over threads: the same words as one thread.
  const int64_t out = 4100, in = 2048;
  std::vector<uint32_t> src(size_t(out * in * 4 / 32));
  for (uint32_t& w : src) w = rng();
  std::vector<uint32_t> one(rapid::cuda::tiled_words(out, in, 4)), many(one.size());
  rapid::cuda::tile_codes(src.data(), out, in, 4, 64, one.data(), 1);
  rapid::cuda::tile_codes(src.data(), out, in, 4, 64, many.data(), 7);
  report(std::memcmp(one.data(), many.data(), one.size() * 4) == 0, "7 threads == 1 thread");
  report(matches_definition(src, many, out, in, 4, 64), "7 threads match the definition");
  // Scales and biases: 16-bit and f32 elements, full and partial tiles, one thread and a split over 3.
  auto scales_case = [&](auto zero, int64_t so, int64_t ng) {
    using T = decltype(zero);
    std::vector<T> sc(size_t(so * ng)), bi(sc.size());
    for (T& v : sc) v = T(rng());
    for (T& v : bi) v = T(rng());
    const size_t n = rapid::cuda::tiled_scale_bytes(so, ng, int(sizeof(T))) / sizeof(T);
    std::vector<T> one(n, T(0xBEEF)), three(n, T(0xBEEF));
    rapid::cuda::tile_scales(sc.data(), bi.data(), so, ng, int(sizeof(T)), one.data(), 1);
    rapid::cuda::tile_scales(sc.data(), bi.data(), so, ng, int(sizeof(T)), three.data(), 3);
    const std::string name = "scales " + std::to_string(sizeof(T) * 8) + "-bit [" + std::to_string(so) + "x" +
                             std::to_string(ng) + "]";
    report(scales_match(sc, bi, one, so, ng), name);
    report(one == three, name + " 3 threads == 1 thread");
  };
  for (int64_t so : {int64_t(1), int64_t(16), int64_t(17), int64_t(40)})
    for (int64_t ng : {int64_t(1), int64_t(8), int64_t(13)}) {
      scales_case(uint16_t{}, so, ng);
      scales_case(uint32_t{}, so, ng);
    }
  scales_case(uint16_t{}, 16384, 256);  // ~16 MB: big enough for the split to use its 3 threads
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
