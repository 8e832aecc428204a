// Portable kernels (any ISA): the fallback on CPUs without AVX2 and the reference for tests.
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/kernels.h"
#include "quant/packed_bits.h"
#include "tensor/dtype.h"

namespace rapid::kern {
namespace {

// Position of natural element j (within a chunk of `perm`) in the permuted layout.
inline int64_t perm_pos(int64_t i, int perm) {
  if (perm == 0) return i;
  int64_t base = i - i % perm, j = i % perm;
  return base + ((j & 1) ? perm / 2 + j / 2 : j / 2);
}

void quantize_x(const float* x, int64_t K, int xb, int perm, int group, int64_t ngp, int8_t* q, float* d,
                float* sx) {
  for (int64_t g = 0; g < ngp; ++g) sx[g] = 0;
  for (int64_t b = 0; b < K / xb; ++b) {
    float amax = 0;
    for (int j = 0; j < xb; ++j) amax = std::fmax(amax, std::fabs(x[b * xb + j]));
    float db = amax / 127.0f;
    float id = db > 0 ? 127.0f / amax : 0.0f;
    d[b] = db;
    int isum = 0;
    for (int j = 0; j < xb; ++j) {
      int64_t i = b * xb + j;
      const int v = int(std::nearbyint(x[i] * id));
      q[perm_pos(i, perm)] = int8_t(v);
      isum += v;
    }
    // Σ of the quantized x, so y = Σ (s·q + b)·x̂ exactly (see the AVX2 kernel).
    sx[b * xb / group] += db * float(isum);
  }
}

// Unpacks weight row r into q[K] in the activation layout (xq.perm), as int8: 4-bit q in [0, 15];
// 8-bit q - 128 (the bias is folded to b + 128 s, as in the AVX2 kernel). Plain loops the compiler
// vectorizes (NEON on arm64).
void unpack_row(const Weight& W, int64_t r, int perm, int8_t* q) {
  const int64_t K = W.in;
  const uint8_t* wr = static_cast<const uint8_t*>(W.data) + size_t(r) * size_t(K) * size_t(W.bits) / 8;
  if (W.bits == 8) {
    for (int64_t i = 0; i < K; ++i) q[i] = int8_t(int(wr[i]) - 128);
  } else if (perm == 0) {
    for (int64_t i = 0; i < K; ++i) q[i] = int8_t(packed_code(wr, i, 4));
  } else {
    // Chunk of `perm` elements = perm/2 bytes: low nibbles (even elements) first, then high nibbles.
    const int h = perm / 2;
    for (int64_t base = 0; base < K; base += perm) {
      const uint8_t* b = wr + base / 2;
      for (int j = 0; j < h; ++j) q[base + j] = int8_t(b[j] & 0xF);
      for (int j = 0; j < h; ++j) q[base + h + j] = int8_t(b[j] >> 4);
    }
  }
}

void fast_rows(const Weight& W, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y, int64_t ldy,
               float*) {
  const int64_t K = W.in, G = W.group, ng = K / G;
  thread_local std::vector<int8_t> qbuf;
  thread_local std::vector<float> sbuf;
  if (qbuf.size() < size_t(K)) qbuf.resize(size_t(K));
  if (sbuf.size() < size_t(2 * ng)) sbuf.resize(size_t(2 * ng));
  int8_t* q = qbuf.data();
  float* sw = sbuf.data();
  float* bw = sw + ng;
  for (int64_t r = r0; r < r1; ++r) {
    unpack_row(W, r, xq.perm, q);
    for (int64_t g = 0; g < ng; ++g) {
      sw[g] = load_float(W.scales, W.dtype, size_t(r * ng + g));
      bw[g] = load_float(W.biases, W.dtype, size_t(r * ng + g));
      if (W.bits == 8) bw[g] += 128.0f * sw[g];
    }
    for (int64_t c = 0; c < n; ++c) {
      const int8_t* qx = xq.q + c * xq.K;
      const float* dx = xq.d + c * xq.nblk;
      const float* sx = xq.sx + c * xq.ngp;
      float acc = 0;
      for (int64_t g = 0; g < ng; ++g) {
        // Blocks never straddle groups (xb ≤ group), and permutation stays within a block.
        for (int64_t b0 = g * G; b0 < (g + 1) * G; b0 += xq.xb) {
          int32_t dot = 0;
          for (int64_t i = b0; i < b0 + xq.xb; ++i) dot += int32_t(q[i]) * int32_t(qx[i]);
          acc += sw[g] * dx[b0 / xq.xb] * float(dot);
        }
        acc += bw[g] * sx[g];
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
    if (W.bits == 4) {
      for (int64_t i = g * G; i < (g + 1) * G; i += 2) {
        out[i] = std::fma(s, float(wr[i / 2] & 0xF), b);
        out[i + 1] = std::fma(s, float(wr[i / 2] >> 4), b);
      }
    } else if (W.bits == 8) {
      for (int64_t i = g * G; i < (g + 1) * G; ++i) out[i] = std::fma(s, float(wr[i]), b);
    } else {
      for (int64_t i = g * G; i < (g + 1) * G; ++i) out[i] = std::fma(s, float(packed_code(wr, i, W.bits)), b);
    }
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
  static const Kernels k{"scalar", quantize_x, fast_rows, row_f32, dot_rows, gemv_exact, read_sum, nullptr, nullptr, nullptr};
  return k;
}

}  // namespace rapid::kern
