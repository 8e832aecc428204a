// Row and pointwise kernels of the tower ops (tower_rows.h). Norm rows take a block (LayerNorm, kNormThreads
// threads, f64 sums like layers/layer_norm.cpp) or a warp (per-head RMSNorm); elementwise kernels a grid-stride
// loop. Activation formulas are the CPU's (vision_blocks.cpp, device_math.cuh vision_act).
#include "cuda/tower_rows.h"
#include <algorithm>
#include "cuda/cuda_kernels.h"
#include "cuda/device_math.cuh"

namespace rapid::cuda::tower {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return unsigned(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65536)); }

__global__ void act_kernel(float* x, int64_t n, int a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = vision_act(x[i], a);
}

__global__ void act_mul_kernel(float* g, const float* __restrict__ u, int64_t n, int a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    g[i] = vision_act(g[i], a) * u[i];
}

__global__ void add_kernel(float* y, const float* __restrict__ x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

__global__ void scale_shift_kernel(float* x, int64_t n, float sub, float mul) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = (x[i] - sub) * mul;
}

__global__ void scale_shift_cols_kernel(float* x, int64_t n, int64_t width, const float* __restrict__ sub,
                                        const float* __restrict__ mul) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % width;
    x[i] = (x[i] - sub[c]) * mul[c];
  }
}

// x, y [rows, ld*] (rows of width): one grid-stride walk over rows * width.
__global__ void clamp_kernel(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t width,
                             float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * width;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / width, c = i % width;
    y[r * ldy + c] = fminf(fmaxf(x[r * ldx + c], lo), hi);
  }
}

// One block per row: mean and biased variance in f64, as the CPU.
__global__ void __launch_bounds__(kNormThreads) layer_norm_kernel(const float* x, float* y, int64_t dim,
                                                                  const float* __restrict__ w,
                                                                  const float* __restrict__ b, float eps) {
  __shared__ double part[kNormThreads / 32];
  __shared__ float mean_s, inv_s;
  const float* xr = x + int64_t(blockIdx.x) * dim;
  float* yr = y + int64_t(blockIdx.x) * dim;
  auto block_sum = [&](double v) {
    v = warp_sum_f64(v);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    double tot = 0;
    for (int i = 0; i < kNormThreads / 32; ++i) tot += part[i];
    __syncthreads();  // part is reused by the next sum
    return tot;
  };
  double s = 0;
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) s += double(xr[i]);
  s = block_sum(s);
  if (threadIdx.x == 0) mean_s = float(s / double(dim));
  __syncthreads();
  const float mean = mean_s;
  double v = 0;
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) {
    const double d = double(xr[i]) - double(mean);
    v += d * d;
  }
  v = block_sum(v);
  if (threadIdx.x == 0) inv_s = 1.0f / sqrtf(float(v / double(dim)) + eps);
  __syncthreads();
  const float inv = inv_s;
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
}

// One warp per (token, head) row of head_dim.
__global__ void rms_norm_heads_kernel(float* x, int64_t ld, int64_t n, int heads, int head_dim,
                                      const float* __restrict__ w, float eps) {
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (row >= n * heads) return;  // warp-uniform
  float* u = x + (row / heads) * ld + (row % heads) * int64_t(head_dim);
  double ss = 0;
  for (int i = lane; i < head_dim; i += 32) ss = fma(double(u[i]), double(u[i]), ss);
  ss = warp_sum_f64(ss);
  const float inv = 1.0f / sqrtf(float(ss / double(head_dim)) + eps);
  for (int i = lane; i < head_dim; i += 32) u[i] = w ? u[i] * inv * w[i] : u[i] * inv;
}

// One block per output row.
__global__ void gather_kernel(const float* __restrict__ x, int64_t ldx, float* __restrict__ y, int64_t ldy,
                              int64_t width, const int32_t* __restrict__ idx, bool scatter) {
  const int64_t i = blockIdx.x, r = idx[i];
  const float* src = x + (scatter ? i : r) * ldx;
  float* dst = y + (scatter ? r : i) * ldy;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) dst[c] = src[c];
}

__global__ void transpose_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols) {
  __shared__ float tile[32][33];
  const int64_t b = blockIdx.z, r0 = int64_t(blockIdx.y) * 32, c0 = int64_t(blockIdx.x) * 32;
  const float* xb = x + b * rows * cols;
  float* yb = y + b * rows * cols;
  for (int i = threadIdx.y; i < 32; i += blockDim.y)
    if (r0 + i < rows && c0 + threadIdx.x < cols) tile[i][threadIdx.x] = xb[(r0 + i) * cols + c0 + threadIdx.x];
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y)
    if (c0 + i < cols && r0 + threadIdx.x < rows) yb[(c0 + i) * rows + r0 + threadIdx.x] = tile[threadIdx.x][i];
}

// One block per output row; each column sums its taps in order.
__global__ void tap_kernel(const float* __restrict__ src, int64_t lds, float* y, int64_t ldy, int64_t width,
                           const int32_t* __restrict__ idx, const float* __restrict__ w, int k, float div,
                           bool accumulate) {
  const int64_t i = blockIdx.x;
  float* dst = y + i * ldy;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < k; ++j) {
      const float v = src[int64_t(idx[i * k + j]) * lds + c];
      acc = w ? fmaf(w[i * k + j], v, acc) : acc + v;
    }
    if (div != 1.0f) acc /= div;
    dst[c] = accumulate ? dst[c] + acc : acc;
  }
}

// One block per token; threads over (head, pair).
__global__ void rope_kernel(float* x, int64_t ld, int heads, int64_t head_stride, int half,
                            const float* __restrict__ cos, const float* __restrict__ sin) {
  const int64_t t = blockIdx.x;
  const float* cs = cos + t * half;
  const float* sn = sin + t * half;
  for (int i = threadIdx.x; i < heads * half; i += blockDim.x) {
    const int h = i / half, j = i - h * half;
    float* u = x + t * ld + h * head_stride;
    const float2 r = rotate(u[j], u[j + half], cs[j], sn[j]);
    u[j] = r.x;
    u[j + half] = r.y;
  }
}

}  // namespace

void act(float* x, int64_t n, int a, cudaStream_t s) {
  if (n > 0) act_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, n, a);
  check(cudaGetLastError(), "tower act");
}

void act_mul(float* gate, const float* up, int64_t n, int a, cudaStream_t s) {
  if (n > 0) act_mul_kernel<<<blocks_for(n), kThreads, 0, s>>>(gate, up, n, a);
  check(cudaGetLastError(), "tower act_mul");
}

void add(float* y, const float* x, int64_t n, cudaStream_t s) {
  if (n > 0) add_kernel<<<blocks_for(n), kThreads, 0, s>>>(y, x, n);
  check(cudaGetLastError(), "tower add");
}

void scale_shift(float* x, int64_t n, float sub, float mul, cudaStream_t s) {
  if (n > 0) scale_shift_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, n, sub, mul);
  check(cudaGetLastError(), "tower scale_shift");
}

void scale_shift_cols(float* x, int64_t rows, int64_t width, const float* sub, const float* mul, cudaStream_t s) {
  if (rows * width > 0) scale_shift_cols_kernel<<<blocks_for(rows * width), kThreads, 0, s>>>(x, rows * width, width, sub, mul);
  check(cudaGetLastError(), "tower scale_shift_cols");
}

void clamp(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t width, float lo, float hi,
           cudaStream_t s) {
  if (rows * width > 0) clamp_kernel<<<blocks_for(rows * width), kThreads, 0, s>>>(x, ldx, y, ldy, rows, width, lo, hi);
  check(cudaGetLastError(), "tower clamp");
}

void layer_norm(const float* x, float* y, int64_t rows, int64_t dim, const float* w, const float* b, float eps,
                cudaStream_t s) {
  if (rows > 0) layer_norm_kernel<<<unsigned(rows), kNormThreads, 0, s>>>(x, y, dim, w, b, eps);
  check(cudaGetLastError(), "tower layer_norm");
}

void rms_norm_heads(float* x, int64_t ld, int64_t n, int heads, int head_dim, const float* w, float eps,
                    cudaStream_t s) {
  const int64_t warps = n * heads;
  if (warps > 0) rms_norm_heads_kernel<<<unsigned((warps * 32 + kThreads - 1) / kThreads), kThreads, 0, s>>>(x, ld, n, heads, head_dim, w, eps);
  check(cudaGetLastError(), "tower rms_norm_heads");
}

void gather_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t width, const int32_t* idx, int64_t n,
                 cudaStream_t s) {
  if (n > 0) gather_kernel<<<unsigned(n), 128, 0, s>>>(x, ldx, y, ldy, width, idx, false);
  check(cudaGetLastError(), "tower gather_rows");
}

void scatter_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t width, const int32_t* idx, int64_t n,
                  cudaStream_t s) {
  if (n > 0) gather_kernel<<<unsigned(n), 128, 0, s>>>(x, ldx, y, ldy, width, idx, true);
  check(cudaGetLastError(), "tower scatter_rows");
}

void transpose(const float* x, float* y, int64_t batch, int64_t rows, int64_t cols, cudaStream_t s) {
  if (batch * rows * cols == 0) return;
  const dim3 grid{unsigned((cols + 31) / 32), unsigned((rows + 31) / 32), unsigned(batch)};
  transpose_kernel<<<grid, dim3{32, 8}, 0, s>>>(x, y, rows, cols);
  check(cudaGetLastError(), "tower transpose");
}

void tap_rows(const float* src, int64_t lds, float* y, int64_t ldy, int64_t width, const int32_t* idx,
              const float* w, int k, float div, int64_t n, bool accumulate, cudaStream_t s) {
  if (n > 0) tap_kernel<<<unsigned(n), 128, 0, s>>>(src, lds, y, ldy, width, idx, w, k, div, accumulate);
  check(cudaGetLastError(), "tower tap_rows");
}

void rope(float* x, int64_t ld, int64_t n, int heads, int64_t head_stride, int half, const float* cos,
          const float* sin, cudaStream_t s) {
  if (n > 0) rope_kernel<<<unsigned(n), 128, 0, s>>>(x, ld, heads, head_stride, half, cos, sin);
  check(cudaGetLastError(), "tower rope");
}

}  // namespace rapid::cuda::tower
