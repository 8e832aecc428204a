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

// Whether a one-row launch of w merges attention partials while it stages x (the bulk kernel: sm_90, tiled weights);
// elsewhere they are merged into x by a launch of their own first.
bool mma_merges_partials(const DevWeight& w);
// partials: x is their merge (one row; matmul checked can_merge_partials).
void mma_matmul(const float* x, int64_t ldx, int64_t n, const MatmulJob* jobs, int count, cudaStream_t s,
                const RowNorm* norm, const RopeOut* rope, const AttnPartials* partials = nullptr);
void mma_glu(const float* x, int64_t n, const DevWeight& gate, const DevWeight& up, int act, float* out, cudaStream_t s,
             const RowNorm* norm);

}  // namespace rapid::cuda
