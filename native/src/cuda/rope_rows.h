// The row order of a q/k weight whose RoPE runs in the tensor-core matmul's epilogue (MatmulJob::rope): each 16-row
// tile holds 8 rotate-half pairs, pair j's rows (j, j + half) of a head at tile rows (g, g + 8), which one thread
// of the mma kernels holds as C fragments, so it can rotate the pair itself. Host code: the decoder reorders the
// rows (codes, scales, biases, bias) at load.
#pragma once
#include <cstdint>
#include <vector>

namespace rapid::cuda {

// perm[p] = the original row at row p of an [out, in] weight of heads of head_dim rows. Throws unless head_dim is a
// positive multiple of 16 that divides out.
std::vector<int64_t> rope_pair_rows(int64_t out, int head_dim);

}  // namespace rapid::cuda
