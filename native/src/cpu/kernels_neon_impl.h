// The NEON kernel bodies, included twice by cpu/kernels_neon.cpp: once for plain ARMv8 NEON and once
// inside an armv8.2-a+dotprod target region (kDot = true). Not a header to include anywhere else: it
// has no include guard and expects <arm_neon.h>, cpu/kernels.h and tensor/dtype.h to be included,
// and `constexpr bool kDot` to be declared, by the including namespace.
//
// Batch invariance: every output (row r, activation row c) is computed by the same lane arithmetic
// whatever the tile it falls in (columns are lanes, rows are independent accumulators), so decode
// and batched prefill agree bit for bit. The int8 block sums are exact integers, so the sdot and the
// plain-NEON variants give bit-identical results too; only their inner products differ.

// 4 values of a float tensor (F32/F16/BF16) starting at element i, as f32 (both conversions exact).
inline float32x4_t load4(const void* base, DType t, int64_t i) {
  if (t == DType::BF16) return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(static_cast<const uint16_t*>(base) + i), 16));
  if (t == DType::F16) return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(static_cast<const uint16_t*>(base) + i)));
  return vld1q_f32(static_cast<const float*>(base) + i);
}

// n values of a float tensor starting at element `start` → out[0..n).
inline void cvt_floats(const void* base, DType t, int64_t start, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, load4(base, t, start + i));
  for (; i < n; ++i) out[i] = load_float(base, t, size_t(start + i));
}

// ---------------------------------------------------------------------------------------------
// Activation quantization (Fast path): the arithmetic of the scalar and AVX2 versions (round to
// nearest even, d = amax / 127, Σ of the quantized values per group), laid out as xq.perm asks.

inline int8x16_t narrow16(const int32x4_t* v) {
  const int16x8_t lo = vcombine_s16(vqmovn_s32(v[0]), vqmovn_s32(v[1]));
  const int16x8_t hi = vcombine_s16(vqmovn_s32(v[2]), vqmovn_s32(v[3]));
  return vcombine_s8(vqmovn_s16(lo), vqmovn_s16(hi));
}

void quantize_x(const float* x, int64_t K, int xb, int perm, int group, int64_t ngp, int8_t* q, float* d,
                float* sx) {
  for (int64_t g = 0; g < ngp; ++g) sx[g] = 0;
  const int nv = xb / 4;  // float vectors per block (8 or 16)
  for (int64_t b = 0; b < K / xb; ++b) {
    const float* xs = x + b * xb;
    float32x4_t v[16];
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int j = 0; j < nv; ++j) {
      v[j] = vld1q_f32(xs + 4 * j);
      m = vmaxq_f32(m, vabsq_f32(v[j]));
    }
    const float amax = vmaxvq_f32(m);
    d[b] = amax / 127.0f;
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    int32x4_t iv[16];
    int32x4_t isum = vdupq_n_s32(0);
    for (int j = 0; j < nv; ++j) {
      iv[j] = vcvtnq_s32_f32(vmulq_n_f32(v[j], id));
      isum = vaddq_s32(isum, iv[j]);
    }
    sx[b * xb / group] += d[b] * float(vaddvq_s32(isum));
    int8x16_t nat[4];  // natural order, 16 elements each
    for (int k = 0; k < xb / 16; ++k) nat[k] = narrow16(iv + 4 * k);
    int8_t* qb = q + b * xb;
    if (perm == 0) {
      for (int k = 0; k < xb / 16; ++k) vst1q_s8(qb + 16 * k, nat[k]);
    } else {
      // Each chunk of `perm` elements: its evens, then its odds.
      const int per = perm / 16;  // vectors per chunk (2 or 4)
      for (int c = 0; c < xb / perm; ++c) {
        const int8x16_t* n = nat + c * per;
        int8_t* out = qb + c * perm;
        for (int k = 0; k < per; k += 2) {
          vst1q_s8(out + 8 * k, vuzp1q_s8(n[k], n[k + 1]));
          vst1q_s8(out + perm / 2 + 8 * k, vuzp2q_s8(n[k], n[k + 1]));
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Fast path: int8 weight codes · int8 activations per x block, then f32 scales and the bias term.

// int32 lanes whose sum is Σ w·x over 16·M int8 pairs. |w·x| ≤ 128·127, so two products fit int16.
template <int M>
inline int32x4_t block_dot(const int8x16_t* w, const int8x16_t* x) {
  int32x4_t acc = vdupq_n_s32(0);
  for (int k = 0; k < M; ++k) {
    if constexpr (kDot) {
      acc = vdotq_s32(acc, w[k], x[k]);
    } else {
      int16x8_t p = vmull_s8(vget_low_s8(w[k]), vget_low_s8(x[k]));
      p = vmlal_high_s8(p, w[k], x[k]);
      acc = vpadalq_s16(acc, p);
    }
  }
  return acc;
}

struct FastTile {
  const uint8_t* w[4];   // weight rows
  const float* sw[4];    // their f32 scales [ng]
  const float* bw[4];    // their f32 biases [ng] (8-bit: b + 128 s)
  const int8_t* xq[4];   // activation rows (only the first C are read)
  const float* dT;       // block scales of this tile's 4 columns: dT[blk * ldd + lane]
  const float* sxT;      // group sums of this tile's 4 columns: sxT[g * ldd + lane]
  int64_t ldd, nblk, ng, bpg;
};

// R weight rows × C (1..4) activation rows; lane c of acc[r] is output (r, c). XB: 32 or 64.
template <int BITS, int XB, int R, int C>
void fast_tile(const FastTile& t, float* y, int64_t ldy) {
  constexpr int M = XB / 16;  // int8 vectors per block
  const uint8x16_t lo4 = vdupq_n_u8(0x0F);
  const uint8x16_t flip = vdupq_n_u8(0x80);
  float32x4_t acc[R];
  for (int r = 0; r < R; ++r) acc[r] = vdupq_n_f32(0.0f);
  for (int64_t blk = 0; blk < t.nblk; ++blk) {
    const int64_t g = blk / t.bpg;
    const float32x4_t dv = vld1q_f32(t.dT + blk * t.ldd);
    int8x16_t xv[C][M];
    for (int c = 0; c < C; ++c)
      for (int k = 0; k < M; ++k) xv[c][k] = vld1q_s8(t.xq[c] + blk * XB + 16 * k);
    for (int r = 0; r < R; ++r) {
      int8x16_t wv[M];
      if constexpr (BITS == 4) {
        // XB/2 bytes: low nibbles pair with the block's first half of x (evens), high with the second.
        for (int k = 0; k < M / 2; ++k) {
          const uint8x16_t v = vld1q_u8(t.w[r] + blk * (XB / 2) + 16 * k);
          wv[k] = vreinterpretq_s8_u8(vandq_u8(v, lo4));
          wv[M / 2 + k] = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
        }
      } else {
        for (int k = 0; k < M; ++k) wv[k] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(t.w[r] + blk * XB + 16 * k), flip));
      }
      int32x4_t p[4];
      for (int c = 0; c < C; ++c) p[c] = block_dot<M>(wv, xv[c]);
      for (int c = C; c < 4; ++c) p[c] = vdupq_n_s32(0);
      const int32x4_t s = vpaddq_s32(vpaddq_s32(p[0], p[1]), vpaddq_s32(p[2], p[3]));  // lane c: block sum of c
      acc[r] = vfmaq_f32(acc[r], vcvtq_f32_s32(s), vmulq_n_f32(dv, t.sw[r][g]));
    }
  }
  for (int64_t g = 0; g < t.ng; ++g) {
    const float32x4_t sx = vld1q_f32(t.sxT + g * t.ldd);
    for (int r = 0; r < R; ++r) acc[r] = vfmaq_n_f32(acc[r], sx, t.bw[r][g]);
  }
  for (int r = 0; r < R; ++r) {
    float o[4];
    vst1q_f32(o, acc[r]);
    for (int c = 0; c < C; ++c) y[c * ldy + r] = o[c];
  }
}

using TileFn = void (*)(const FastTile&, float*, int64_t);

template <int BITS, int XB>
TileFn pick_tile(int R, int C) {
  static const TileFn t[4][4] = {
      {fast_tile<BITS, XB, 1, 1>, fast_tile<BITS, XB, 1, 2>, fast_tile<BITS, XB, 1, 3>, fast_tile<BITS, XB, 1, 4>},
      {fast_tile<BITS, XB, 2, 1>, fast_tile<BITS, XB, 2, 2>, fast_tile<BITS, XB, 2, 3>, fast_tile<BITS, XB, 2, 4>},
      {fast_tile<BITS, XB, 3, 1>, fast_tile<BITS, XB, 3, 2>, fast_tile<BITS, XB, 3, 3>, fast_tile<BITS, XB, 3, 4>},
      {fast_tile<BITS, XB, 4, 1>, fast_tile<BITS, XB, 4, 2>, fast_tile<BITS, XB, 4, 3>, fast_tile<BITS, XB, 4, 4>}};
  return t[R - 1][C - 1];
}

void fast_rows(const Weight& W, const XQuant& xq, int64_t n, int64_t r0, int64_t r1, float* y, int64_t ldy,
               float* scratch) {
  const int64_t K = W.in, ng = K / W.group, ngp = xq.ngp;
  const size_t row_bytes = size_t(K) * size_t(W.bits) / 8;
  const uint8_t* wbase = static_cast<const uint8_t*>(W.data);
  // Decode streams 4 weight rows against one x row; batches reuse 4 x rows over 2 weight rows
  // (x registers: 4 columns × 4 vectors; 32 NEON registers in all).
  const int RT = n == 1 ? 4 : 2;
  // Panel of activation rows sized to stay in L2 while every weight row of this thread passes by.
  int64_t P = (160 * 1024) / (K > 0 ? K : 1);
  P = P < 4 ? 4 : (P / 4) * 4;
  FastTile t{};
  t.ldd = xq.ldd;
  t.nblk = xq.nblk;
  t.ng = ng;
  t.bpg = W.group / xq.xb;
  for (int64_t c0 = 0; c0 < n; c0 += P) {
    const int64_t c1 = c0 + P < n ? c0 + P : n;
    for (int64_t r = r0; r < r1; r += RT) {
      const int R = r + RT <= r1 ? RT : int(r1 - r);
      for (int i = 0; i < R; ++i) {
        float* sw = scratch + i * ngp;
        float* bw = scratch + (4 + i) * ngp;
        cvt_floats(W.scales, W.dtype, (r + i) * ng, ng, sw);
        cvt_floats(W.biases, W.dtype, (r + i) * ng, ng, bw);
        if (W.bits == 8)
          for (int64_t g = 0; g < ng; ++g) bw[g] += 128.0f * sw[g];
        t.w[i] = wbase + size_t(r + i) * row_bytes;
        t.sw[i] = sw;
        t.bw[i] = bw;
      }
      for (int64_t c = c0; c < c1; c += 4) {
        const int C = c + 4 <= c1 ? 4 : int(c1 - c);
        t.dT = xq.dT + c;
        t.sxT = xq.sxT + c;
        for (int j = 0; j < C; ++j) t.xq[j] = xq.q + (c + j) * xq.K;
        TileFn f = W.bits == 4 ? (xq.xb == 32 ? pick_tile<4, 32>(R, C) : pick_tile<4, 64>(R, C))
                               : (xq.xb == 32 ? pick_tile<8, 32>(R, C) : pick_tile<8, 64>(R, C));
        f(t, y + c * ldy + r, ldy);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Exact path: rows converted to f32, then an f32 dot micro-kernel.

const float* row_f32(const Weight& W, int64_t r, float* out) {
  const int64_t K = W.in;
  if (W.kind == WeightKind::Dense) {
    if (W.dtype == DType::F32) return static_cast<const float*>(W.data) + r * K;
    cvt_floats(W.data, W.dtype, r * K, K, out);
    return out;
  }
  const int64_t G = W.group, ng = K / G;
  const uint8_t* wr = static_cast<const uint8_t*>(W.data) + size_t(r) * size_t(K) * size_t(W.bits) / 8;
  for (int64_t g = 0; g < ng; ++g) {
    const float s = load_float(W.scales, W.dtype, size_t(r * ng + g));
    const float b = load_float(W.biases, W.dtype, size_t(r * ng + g));
    const float32x4_t bv = vdupq_n_f32(b);
    float* o = out + g * G;
    // Codes of 16 elements (u8x16, natural order) → 16 floats fma(s, q, b), as the scalar kernel.
    auto emit16 = [&](uint8x16_t q, float* dst) {
      const uint16x8_t h0 = vmovl_u8(vget_low_u8(q)), h1 = vmovl_high_u8(q);
      vst1q_f32(dst, vfmaq_n_f32(bv, vcvtq_f32_u32(vmovl_u16(vget_low_u16(h0))), s));
      vst1q_f32(dst + 4, vfmaq_n_f32(bv, vcvtq_f32_u32(vmovl_high_u16(h0)), s));
      vst1q_f32(dst + 8, vfmaq_n_f32(bv, vcvtq_f32_u32(vmovl_u16(vget_low_u16(h1))), s));
      vst1q_f32(dst + 12, vfmaq_n_f32(bv, vcvtq_f32_u32(vmovl_high_u16(h1)), s));
    };
    if (W.bits == 4) {
      const uint8_t* p = wr + g * G / 2;
      for (int64_t j = 0; j < G; j += 16) {
        const uint8x8_t v = vld1_u8(p + j / 2);  // element 2k in the low nibble of byte k, 2k+1 in the high
        const uint8x8_t lo = vand_u8(v, vdup_n_u8(0x0F)), hi = vshr_n_u8(v, 4);
        emit16(vcombine_u8(vzip1_u8(lo, hi), vzip2_u8(lo, hi)), o + j);
      }
    } else if (W.bits == 8) {
      const uint8_t* p = wr + g * G;
      for (int64_t j = 0; j < G; j += 16) emit16(vld1q_u8(p + j), o + j);
    } else {
      for (int64_t j = 0; j < G; ++j) o[j] = __builtin_fmaf(s, float(packed_code(wr, g * G + j, W.bits)), b);
    }
  }
  return out;
}

// y[c*ldy + r] = w_r · x_c for R rows × C columns; the same two 4-lane FMA chains for every pair.
template <int R, int C>
inline void dot_tile(const float* const* w, const float* x, int64_t ldx, int64_t K, float* y, int64_t ldy) {
  float32x4_t a0[R][C], a1[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a0[r][c] = a1[r][c] = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 8 <= K; i += 8) {
    float32x4_t w0[R], w1[R];
    for (int r = 0; r < R; ++r) {
      w0[r] = vld1q_f32(w[r] + i);
      w1[r] = vld1q_f32(w[r] + i + 4);
    }
    for (int c = 0; c < C; ++c) {
      const float32x4_t x0 = vld1q_f32(x + c * ldx + i), x1 = vld1q_f32(x + c * ldx + i + 4);
      for (int r = 0; r < R; ++r) {
        a0[r][c] = vfmaq_f32(a0[r][c], w0[r], x0);
        a1[r][c] = vfmaq_f32(a1[r][c], w1[r], x1);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float s = vaddvq_f32(vaddq_f32(a0[r][c], a1[r][c]));
      for (int64_t k = i; k < K; ++k) s = __builtin_fmaf(w[r][k], x[c * ldx + k], s);
      y[c * ldy + r] = s;
    }
}

void dot_rows(const float* const* w, int R, const float* x, int64_t ldx, int64_t n, int64_t K, float* y,
              int64_t ldy) {
  int64_t c = 0;
  if (R == 2) {
    for (; c + 4 <= n; c += 4) dot_tile<2, 4>(w, x + c * ldx, ldx, K, y + c * ldy, ldy);
    for (; c < n; ++c) dot_tile<2, 1>(w, x + c * ldx, ldx, K, y + c * ldy, ldy);
  } else {
    for (; c + 4 <= n; c += 4) dot_tile<1, 4>(w, x + c * ldx, ldx, K, y + c * ldy, ldy);
    for (; c < n; ++c) dot_tile<1, 1>(w, x + c * ldx, ldx, K, y + c * ldy, ldy);
  }
}

// Decode: two rows at a time through row_f32 + dot_rows, so it matches batched prefill bit for bit.
void gemv_exact(const Weight& W, const float* x, int64_t r0, int64_t r1, float* y, float* scratch) {
  const int64_t K = W.in;
  for (int64_t r = r0; r < r1; r += 2) {
    const int R = r + 2 <= r1 ? 2 : 1;
    const float* w[2] = {row_f32(W, r, scratch), R == 2 ? row_f32(W, r + 1, scratch + K) : nullptr};
    dot_rows(w, R, x, K, 1, K, y + r, 1);
  }
}

uint64_t read_sum(const uint64_t* p, size_t n) {
  uint64x2_t a0 = vdupq_n_u64(0), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    a0 = vaddq_u64(a0, vld1q_u64(p + i));
    a1 = vaddq_u64(a1, vld1q_u64(p + i + 2));
    a2 = vaddq_u64(a2, vld1q_u64(p + i + 4));
    a3 = vaddq_u64(a3, vld1q_u64(p + i + 6));
  }
  uint64_t s = vaddvq_u64(vaddq_u64(vaddq_u64(a0, a1), vaddq_u64(a2, a3)));
  for (; i < n; ++i) s += p[i];
  return s;
}
