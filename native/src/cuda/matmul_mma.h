// The tensor-core (Fast precision) path of cuda::matmul / cuda::matmul_glu for MLX affine weights; callers
// go through those two, which route here (matmul_mma.cu says what the arithmetic is).
#pragma once
#include "cuda/cuda_kernels.h"

namespace rapid::cuda {

// Affine 4/8-bit, group 32/64/128, 16-byte aligned codes.
bool mma_supported(const DevWeight& w);
// The same without the address check (a weight about to be uploaded).
bool mma_format_supported(const DevWeight& w);
// Whether two weights can share one launch (same bits, group, scales dtype, input width and code layout).
bool mma_same_format(const DevWeight& a, const DevWeight& b);

// The tiled code layout (DevWeight::tiled), which these kernels read contiguously (a warp's loads of one group: 512
// bytes for 4-bit g64). On the H200 (cuda_matmul_bench fast vs fast-tiled) it takes 9% off the 3B shape's GLU and
// 10% off a 152k-row head at one token, 6% / 12% at 8 tokens, 7% / 5% at 64. For each 16-row tile t (the last
// padded by repeating row out-1), group g and lane L = 4·(r % 8) + quarter q: the WPT words of quarter q of row
// 16t + r % 8 (a), then of row 16t + r % 8 + 8 (b). Only the tensor-core path reads it.
size_t tiled_words(int64_t out, int64_t in, int bits);
// Host-side: MLX codes src [out, in·bits/32] to the tiled layout dst [tiled_words(out, in, bits)].
void tile_codes(const uint32_t* src, int64_t out, int64_t in, int bits, int group, uint32_t* dst);
void mma_matmul(const float* x, int64_t ldx, int64_t n, const MatmulJob* jobs, int count, cudaStream_t s,
                const RowNorm* norm);
void mma_glu(const float* x, int64_t n, const DevWeight& gate, const DevWeight& up, int act, float* out, cudaStream_t s,
             const RowNorm* norm);

}  // namespace rapid::cuda
