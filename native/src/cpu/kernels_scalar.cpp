// Portable kernels (any ISA): the fallback on CPUs without AVX2 and the reference for tests.
#include <cmath>
#include <cstring>

#include "cpu/kernels.h"
#include "tensor/dtype.h"

namespace rapid::kern {
namespace {

inline uint32_t get_bits(const uint8_t* row, int64_t i, int bits) {
  int64_t bit = i * bits;
  uint32_t v = uint32_t(row[bit >> 3]) >> (bit & 7);
  int have = 8 - int(bit & 7);
  if (have < bits) v |= uint32_t(row[(bit >> 3) + 1]) << have;
  return v & ((1u << bits) - 1);
}

// Position of natural element j (within a chunk of `perm`) in the permuted layout.
inline int64_t perm_pos(int64_t i, int perm) {
  if (perm == 0) return i;
  int64_t base = i - i % perm, j = i % perm;
  return base + ((j & 1) ? perm / 2 + j / 2 : j / 2);
}

void quantize_x(const float* x, int64_t K, int xb, int perm, int group, int64_t ngp, int8_t* q, float* d,
                float* sx) {
  for (int64_t b = 0; b < K / xb; ++b) {
    float amax = 0;
    for (int j = 0; j < xb; ++j) amax = std::fmax(amax, std::fabs(x[b * xb + j]));
    float db = amax / 127.0f;
    float id = db > 0 ? 127.0f / amax : 0.0f;
    d[b] = db;
    for (int j = 0; j < xb; ++j) {
      int64_t i = b * xb + j;
      q[perm_pos(i, perm)] = int8_t(std::nearbyint(x[i] * id));
    }
  }
  int64_t ng = K / group;
  for (int64_t g = 0; g < ngp; ++g) {
    float s = 0;
    if (g < ng)
      for (int j = 0; j < group; ++j) s += x[g * group + j];
    sx[g] = s;
  }
}

void fast_rows(const Weight& W, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y, int64_t ldy,
               float*) {
  const int64_t K = W.in, G = W.group, ng = K / G;
  const size_t row_bytes = size_t(K) * size_t(W.bits) / 8;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wr = static_cast<const uint8_t*>(W.data) + size_t(r) * row_bytes;
    for (int64_t c = 0; c < n; ++c) {
      const int8_t* qx = xq.q + c * xq.K;
      const float* dx = xq.d + c * xq.nblk;
      const float* sx = xq.sx + c * xq.ngp;
      float acc = 0;
      for (int64_t g = 0; g < ng; ++g) {
        float s = load_float(W.scales, W.dtype, size_t(r * ng + g));
        float b = load_float(W.biases, W.dtype, size_t(r * ng + g));
        // 8-bit: same arithmetic as the AVX2 kernel (q - 128, bias b + 128 s).
        const int32_t zero = W.bits == 8 ? 128 : 0;
        if (W.bits == 8) b += 128.0f * s;
        for (int64_t b0 = g * G; b0 < (g + 1) * G; b0 += xq.xb) {
          int32_t dot = 0;
          for (int64_t i = b0; i < b0 + xq.xb; ++i)
            dot += (int32_t(get_bits(wr, i, W.bits)) - zero) * qx[perm_pos(i, xq.perm)];
          acc += s * dx[b0 / xq.xb] * float(dot);
        }
        acc += b * sx[g];
      }
      y[c * ldy + r] = acc;
    }
  }
}

const float* row_f32(const Weight& W, int64_t r, float* out) {
  const int64_t K = W.in;
  if (W.kind == WeightKind::Dense) {
    const uint8_t* row = static_cast<const uint8_t*>(W.data) + size_t(r) * size_t(K) * dtype_size(W.dtype);
    if (W.dtype == DType::F32) return reinterpret_cast<const float*>(row);
    for (int64_t i = 0; i < K; ++i) out[i] = load_float(row, W.dtype, size_t(i));
    return out;
  }
  const int64_t G = W.group, ng = K / G;
  const uint8_t* wr = static_cast<const uint8_t*>(W.data) + size_t(r) * size_t(K) * size_t(W.bits) / 8;
  for (int64_t g = 0; g < ng; ++g) {
    float s = load_float(W.scales, W.dtype, size_t(r * ng + g));
    float b = load_float(W.biases, W.dtype, size_t(r * ng + g));
    for (int64_t i = g * G; i < (g + 1) * G; ++i) out[i] = std::fma(s, float(get_bits(wr, i, W.bits)), b);
  }
  return out;
}

void dot_rows(const float* const* w, int R, const float* x, int64_t ldx, int64_t n, int64_t K, float* y,
              int64_t ldy) {
  for (int r = 0; r < R; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const float* xc = x + c * ldx;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t i = 0;
      for (; i + 8 <= K; i += 8)
        for (int l = 0; l < 8; ++l) acc[l] += w[r][i + l] * xc[i + l];
      float s = 0;
      for (; i < K; ++i) s += w[r][i] * xc[i];
      y[c * ldy + r] = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + s;
    }
}

void gemv_exact(const Weight& W, const float* x, int64_t r0, int64_t r1, float* y, float* scratch) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* w = row_f32(W, r, scratch);
    dot_rows(&w, 1, x, W.in, 1, W.in, y + r, 1);
  }
}

uint64_t read_sum(const uint64_t* p, size_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    s0 += p[i];
    s1 += p[i + 1];
    s2 += p[i + 2];
    s3 += p[i + 3];
  }
  return s0 + s1 + s2 + s3;
}

}  // namespace

const Kernels& scalar_kernels() {
  static const Kernels k{"scalar", quantize_x, fast_rows, row_f32, dot_rows, gemv_exact, read_sum};
  return k;
}

}  // namespace rapid::kern
