#include "cuda/rope_rows.h"
#include <stdexcept>

namespace rapid::cuda {

std::vector<int64_t> rope_pair_rows(int64_t out, int head_dim) {
  if (head_dim <= 0 || head_dim % 16 != 0 || out % head_dim != 0)
    throw std::invalid_argument("rope_pair_rows: head_dim must be a positive multiple of 16 that divides the rows");
  const int half = head_dim / 2;
  std::vector<int64_t> perm(static_cast<size_t>(out));
  for (int64_t h = 0; h < out / head_dim; ++h)
    for (int i = 0; i < head_dim / 16; ++i)
      for (int g = 0; g < 8; ++g) {
        const int64_t p = h * head_dim + 16 * i + g, j = h * head_dim + 8 * i + g;
        perm[size_t(p)] = j;             // tile row g: pair j's first row
        perm[size_t(p + 8)] = j + half;  // tile row g + 8: its second
      }
  return perm;
}

}  // namespace rapid::cuda
