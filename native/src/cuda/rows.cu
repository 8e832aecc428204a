// Row-wise element kernels: embedding gather with dequantization, row scatter/gather for spliced image
// features and logit rows, and the logit softcap. Every element is computed independently.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include "cuda/cuda_kernels.h"
#include "cuda/device_math.cuh"
#include "cuda/launch.cuh"

namespace rapid::cuda {

namespace {

constexpr int kRowThreads = 256;

// out[i, :] = E[ids[i], :] * scale. Affine: w = fma(scale_g, code, bias_g) as the CPU kernels' row_f32
// (cpu/kernels_*.cpp), then the embedding scale as a separate multiply (decoder.cpp).
__global__ void __launch_bounds__(kRowThreads) embed_rows_kernel(const DevWeight E, const int32_t* __restrict__ ids,
                                                                 float scale, float* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  const int64_t r = ids[blockIdx.x];
  float* o = out + int64_t(blockIdx.x) * E.in;  // [in]
  const int dt = int(E.dtype);
  if (E.kind == WeightKind::Dense) {
    for (int64_t i = threadIdx.x; i < E.in; i += kRowThreads) o[i] = __fmul_rn(load_elem(E.data, r * E.in + i, dt), scale);
    return;
  }
  const int64_t words = E.in * E.bits / 32;  // uint32 words per packed row
  const int64_t ng = E.in / E.group;
  const uint32_t mask = (1u << E.bits) - 1u;
  if (E.tiled) {
    // A tied head's tiled copy (tiled_codes.h): row r is half h of lane row r % 8 in 16-row tile t. Its word
    // g·4·wpt + q·wpt + j of the row-major layout (group g, quarter q) sits at ((t·ng + g)·32 + 4·(r % 8) + q)·2·wpt
    // + h·wpt + j, with the same bits; scale and bias at ((t·ng + g)·8 + r % 8)·4 + 2h and the element after.
    const int64_t wpt = E.group * E.bits / 128, t = r >> 4, ra = r & 7, h = (r >> 3) & 1;
    const uint32_t* tile = static_cast<const uint32_t*>(E.data) + t * ng * 64 * wpt;  // [ng][32 lanes][2][wpt]
    for (int64_t i = threadIdx.x; i < E.in; i += kRowThreads) {
      const int64_t bit = i * E.bits, w = bit >> 5, g = w / (4 * wpt), q = (w / wpt) & 3;
      const uint32_t code = (tile[((g * 32 + 4 * ra + q) * 2 + h) * wpt + w % wpt] >> (bit & 31)) & mask;
      const int64_t sq = ((t * ng + g) * 8 + ra) * 4 + 2 * h;
      const float v = fmaf(load_elem(E.scales, sq, dt), float(code), load_elem(E.scales, sq + 1, dt));
      o[i] = __fmul_rn(v, scale);
    }
    return;
  }
  const uint32_t* pr = static_cast<const uint32_t*>(E.data) + r * words;
  for (int64_t i = threadIdx.x; i < E.in; i += kRowThreads) {
    // LSB-first bit stream (quant/packed_bits.h); a code may straddle two words for 3/5/6 bits.
    const int64_t bit = i * E.bits;
    const int sh = int(bit & 31);
    uint32_t code = pr[bit >> 5] >> sh;
    if (sh + E.bits > 32) code |= pr[(bit >> 5) + 1] << (32 - sh);
    code &= mask;
    const int64_t g = r * ng + i / E.group;
    const float w = fmaf(load_elem(E.scales, g, dt), float(code), load_elem(E.biases, g, dt));
    o[i] = __fmul_rn(w, scale);
  }
}

// dst[rows[i], :] = src[i, :] or += src[i, :].
__global__ void __launch_bounds__(kRowThreads) scatter_rows_kernel(const float* __restrict__ src,
                                                                   const int32_t* __restrict__ rows, int64_t dim,
                                                                   float* __restrict__ dst, bool add) {
  pdl_wait();
  pdl_trigger();
  const float* s = src + int64_t(blockIdx.x) * dim;
  float* d = dst + int64_t(rows[blockIdx.x]) * dim;
  if (add)
    for (int64_t i = threadIdx.x; i < dim; i += kRowThreads) d[i] = __fadd_rn(d[i], s[i]);
  else
    for (int64_t i = threadIdx.x; i < dim; i += kRowThreads) d[i] = s[i];
}

// dst[i, :] = src[rows[i], :].
__global__ void __launch_bounds__(kRowThreads) gather_rows_kernel(const float* __restrict__ src,
                                                                  const int32_t* __restrict__ rows, int64_t dim,
                                                                  float* __restrict__ dst) {
  pdl_wait();
  pdl_trigger();
  const float* s = src + int64_t(rows[blockIdx.x]) * dim;
  float* d = dst + int64_t(blockIdx.x) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += kRowThreads) d[i] = s[i];
}

__global__ void softcap_kernel(float* x, int64_t n, float cap) {
  pdl_wait();
  pdl_trigger();
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = __fmul_rn(cap, tanhf(__fdiv_rn(x[i], cap)));
}

}  // namespace

void embed_rows(const DevWeight& E, const int32_t* ids, int64_t n, float scale, float* out, cudaStream_t s) {
  if (n <= 0) return;
  if (E.dtype != DType::F32 && E.dtype != DType::F16 && E.dtype != DType::BF16)
    throw std::runtime_error(std::string("embed_rows: unsupported dtype ") + dtype_name(E.dtype));
  if (E.kind == WeightKind::Affine &&
      (E.bits < 1 || E.bits > 8 || E.group <= 0 || E.in % E.group != 0 || (E.in * E.bits) % 32 != 0))
    throw std::runtime_error("embed_rows: bad affine layout (bits " + std::to_string(E.bits) + ", group " +
                             std::to_string(E.group) + ", in " + std::to_string(E.in) + ")");
  if (E.tiled && (E.kind != WeightKind::Affine || (E.bits != 4 && E.bits != 8) || E.group % 32 != 0 || E.scales != E.biases))
    throw std::runtime_error("embed_rows: a tiled table is 4/8-bit affine with groups of 32k, scales and biases together");
  launch(embed_rows_kernel, dim3(unsigned(n)), dim3(kRowThreads), 0, s, "embed_rows launch", E, ids, scale, out);
}

void scatter_rows(const float* src, const int32_t* rows, int64_t n, int64_t dim, float* dst, bool add, cudaStream_t s) {
  if (n <= 0) return;
  launch(scatter_rows_kernel, dim3(unsigned(n)), dim3(kRowThreads), 0, s, "scatter_rows launch", src, rows, dim, dst,
         add);
}

void gather_rows(const float* src, const int32_t* rows, int64_t n, int64_t dim, float* dst, cudaStream_t s) {
  if (n <= 0) return;
  launch(gather_rows_kernel, dim3(unsigned(n)), dim3(kRowThreads), 0, s, "gather_rows launch", src, rows, dim, dst);
}

void softcap(float* x, int64_t n, float cap, cudaStream_t s) {
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
  launch(softcap_kernel, dim3(unsigned(blocks)), dim3(256), 0, s, "softcap launch", x, n, cap);
}

}  // namespace rapid::cuda
