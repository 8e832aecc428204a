// The tensor-core path's tiled code layout (DevWeight::tiled), which its kernels read contiguously (a warp's loads of
// one group: 512 bytes for 4-bit g64). On the H200 (cuda_matmul_bench fast vs fast-tiled) it takes 9% off the 3B
// shape's GLU and 10% off a 152k-row head at one token, 6% / 12% at 8 tokens, 7% / 5% at 64. For each 16-row tile t
// (the last padded by repeating row out-1), group g and lane L = 4·(r % 8) + quarter q: the WPT = group·bits/128
// words of quarter q of row 16t + r % 8 (a), then of row 16t + r % 8 + 8 (b). Host code: the decoder repacks at load.
#pragma once
#include <cstddef>
#include <cstdint>

namespace rapid::cuda {

// u32 words of an [out, in] weight's codes in the tiled layout.
size_t tiled_words(int64_t out, int64_t in, int bits);

// MLX codes src [out, in·bits/32] to the tiled layout dst [tiled_words(out, in, bits)], tiles split over up to
// `threads` threads (0: the hardware's); the result does not depend on the split.
void tile_codes(const uint32_t* src, int64_t out, int64_t in, int bits, int group, uint32_t* dst, int threads = 0);

}  // namespace rapid::cuda
