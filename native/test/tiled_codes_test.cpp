// cuda::tile_codes (the tensor-core path's code layout, repacked on the host at load) against the layout's
// definition, word by word: 4/8-bit codes, groups 32/64/128, full and partial last tiles; and the threaded split
// equal to one thread. Prints "N passed, M failed"; exits 1 on a failure. Pure C++: no GPU needed.
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
bool scales_match(const std::vector<uint16_t>& sc, const std::vector<uint16_t>& bi, const std::vector<uint16_t>& dst,
                  int64_t out, int64_t ng) {
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
  // Scales and biases (16-bit elements; f32 moves the same bytes in 4-byte units).
  for (int64_t so : {int64_t(1), int64_t(16), int64_t(17), int64_t(40)})
    for (int64_t ng : {int64_t(1), int64_t(8), int64_t(13)}) {
      std::vector<uint16_t> sc(size_t(so * ng)), bi(sc.size());
      for (uint16_t& v : sc) v = uint16_t(rng());
      for (uint16_t& v : bi) v = uint16_t(rng());
      std::vector<uint16_t> dst(rapid::cuda::tiled_scale_bytes(so, ng, 2) / 2, 0xBEEF);
      rapid::cuda::tile_scales(sc.data(), bi.data(), so, ng, 2, dst.data());
      report(scales_match(sc, bi, dst, so, ng), "scales [" + std::to_string(so) + "x" + std::to_string(ng) + "]");
    }
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
