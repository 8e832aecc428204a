// cuda::rope_pair_rows (the row order of a q/k weight whose RoPE runs in the matmul's epilogue): a permutation of the
// rows; in every 16-row tile, rows g and g + 8 are one rotate-half pair (j, j + head_dim/2) of one head, the tiles of
// a head covering its pairs in order; bad shapes throw. Prints "N passed, M failed"; exits 1 on a failure.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>
#include "cuda/rope_rows.h"

namespace {

int g_passed = 0, g_failed = 0;

void check(bool ok, const std::string& name) {
  (ok ? g_passed : g_failed)++;
  if (!ok) std::printf("FAIL %s\n", name.c_str());
}

bool throws(int64_t out, int hd) {
  try {
    rapid::cuda::rope_pair_rows(out, hd);
  } catch (const std::invalid_argument&) {
    return true;
  }
  return false;
}

}  // namespace

int main() {
  for (const auto& [out, hd] : std::vector<std::pair<int64_t, int>>{{64, 64}, {256, 64}, {2048, 128}, {128, 32}, {512, 256}, {16, 16}}) {
    const std::vector<int64_t> perm = rapid::cuda::rope_pair_rows(out, hd);
    const std::string shape = std::to_string(out) + "x" + std::to_string(hd);
    std::vector<int> seen(static_cast<size_t>(out), 0);
    bool in_range = perm.size() == size_t(out);
    for (int64_t r : perm) {
      in_range = in_range && r >= 0 && r < out;
      if (r >= 0 && r < out) seen[size_t(r)]++;
    }
    bool once = true;
    for (int c : seen) once = once && c == 1;
    check(in_range && once, "a permutation " + shape);
    bool pairs = true;
    const int half = hd / 2;
    for (int64_t p = 0; p < out && in_range; p += 16)
      for (int g = 0; g < 8; ++g) {
        const int64_t a = perm[size_t(p + g)], b = perm[size_t(p + g + 8)];
        const int64_t head = p / hd, j = (p % hd) / 16 * 8 + g;
        pairs = pairs && a == head * hd + j && b == a + half;
      }
    check(pairs, "tile rows g, g + 8 are pair j of the tile's head " + shape);
  }
  check(throws(64, 24), "head_dim not a multiple of 16 throws");
  check(throws(100, 64), "rows not whole heads throw");
  check(throws(64, 0), "head_dim 0 throws");
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
