// The row and pointwise kernels of the op backend (backend/ops.h) on CUDA: LayerNorm, per-head RMSNorm,
// activations, adds, scale/shift, clamp, strided gather/scatter, transpose, tap sums (pooling, position tables),
// rotate-half RoPE with a head stride. f32 throughout, one fixed order per output (norm sums in f64 like the
// CPU's). Pointers are device memory; index and tap arrays are device copies.
#pragma once
#include <cuda_runtime.h>
#include <cstdint>

namespace rapid::cuda::tower {

// 0 silu, 1 gelu (tanh), 2 gelu (erf), 3 quick_gelu: ops::VAct's order.
void act(float* x, int64_t n, int a, cudaStream_t s);
void act_mul(float* gate, const float* up, int64_t n, int a, cudaStream_t s);
void add(float* y, const float* x, int64_t n, cudaStream_t s);
void scale_shift(float* x, int64_t n, float sub, float mul, cudaStream_t s);
// x [rows, width]: x[r, c] = (x[r, c] - sub[c]) * mul[c].
void scale_shift_cols(float* x, int64_t rows, int64_t width, const float* sub, const float* mul, cudaStream_t s);
void clamp(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t width, float lo, float hi,
           cudaStream_t s);

// x, y [rows, dim]: nn.LayerNorm with w, b [dim]. y may alias x.
void layer_norm(const float* x, float* y, int64_t rows, int64_t dim, const float* w, const float* b, float eps,
                cudaStream_t s);
// In place: row t, head h at x + t*ld + h*head_dim; w [head_dim] or null (weight 1).
void rms_norm_heads(float* x, int64_t ld, int64_t n, int heads, int head_dim, const float* w, float eps,
                    cudaStream_t s);

// y row i = x row idx[i] (gather) / y row idx[i] = x row i (scatter), i < n; rows of `width`.
void gather_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t width, const int32_t* idx, int64_t n,
                 cudaStream_t s);
void scatter_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t width, const int32_t* idx, int64_t n,
                  cudaStream_t s);
// x [batch, rows, cols] -> y [batch, cols, rows].
void transpose(const float* x, float* y, int64_t batch, int64_t rows, int64_t cols, cudaStream_t s);
// Row i < n of `width`: v = (Σ_j w[i*k+j] · src row idx[i*k+j]) / div in tap order (w null: weight 1);
// y row i = v, or += v when accumulate.
void tap_rows(const float* src, int64_t lds, float* y, int64_t ldy, int64_t width, const int32_t* idx,
              const float* w, int k, float div, int64_t n, bool accumulate, cudaStream_t s);

// Rotate-half RoPE in place: row t < n, head h: u = x + t*ld + h*head_stride; pairs (u[j], u[j+half]) by
// cos/sin [n, half].
void rope(float* x, int64_t ld, int64_t n, int heads, int64_t head_stride, int half, const float* cos,
          const float* sin, cudaStream_t s);

}  // namespace rapid::cuda::tower
