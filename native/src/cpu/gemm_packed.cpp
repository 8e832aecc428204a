// Packed dense GEMM driver: load-time panel packing, cache blocking, threading, and the portable tile.
// Work items are (up to kNcPanels panels) x (kRowTiles register tiles of rows), handed out through an
// atomic counter. In an item, each tile's rows are packed once into [k][mr] (L2) and swept over every
// panel of the item, so y is written once; k is sliced only past kKcMax, continuing the fma chains from y.
#include "cpu/gemm_packed.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string_view>

#include "cpu/gemm_packed_tiles.h"
#include "cpu/matmul_fast.h"

namespace rapid {
namespace {

// Measured on Zen4, one thread, process CPU time, bf16 [1152, 4304] x 4096 rows: k slices of 256 with
// 8-panel items 52 GFLOP/s, whole-k 8 panels 80, 16 panels 90, 32 panels 97 (torch's sgemm: 90).
constexpr int64_t kKcMax = 8192;   // k slices only past this (each slice re-reads and re-writes y)
constexpr int64_t kNcPanels = 32;  // panels per work item: 512 output columns share one packed x tile
constexpr int64_t kRowTiles = 16;  // register tiles of rows per work item
constexpr int kScalarMr = 4;

size_t elem_bytes(DType d) { return d == DType::F32 ? 4 : 2; }

template <DType D>
float widen(const void* w, int64_t i) {
  if constexpr (D == DType::F32) return static_cast<const float*>(w)[i];
  const uint16_t h = static_cast<const uint16_t*>(w)[i];
  if constexpr (D == DType::F16) return f16_to_f32(h);
  return bf16_to_f32(h);
}

// The portable tile: the same fma chains as the SIMD tiles, so every family gives the same bits.
template <DType D>
void scalar_tile(const float* xp, int m, const void* w, int64_t kc, float* y, int64_t ldy, bool acc) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < 16; ++j) {
      float c = acc ? y[i * ldy + j] : 0.0f;
      for (int64_t k = 0; k < kc; ++k) c = std::fma(xp[k * kScalarMr + i], widen<D>(w, k * 16 + j), c);
      y[i * ldy + j] = c;
    }
}

void scalar_any(const float* xp, int m, const void* w, DType dt, int64_t kc, float* y, int64_t ldy, bool acc) {
  if (dt == DType::BF16) scalar_tile<DType::BF16>(xp, m, w, kc, y, ldy, acc);
  else if (dt == DType::F16) scalar_tile<DType::F16>(xp, m, w, kc, y, ldy, acc);
  else scalar_tile<DType::F32>(xp, m, w, kc, y, ldy, acc);
}

const gemmk::Tiles& tiles_for(const char* isa) {
  static const gemmk::Tiles scalar{"scalar", kScalarMr, scalar_any};
  const std::string_view name = isa != nullptr ? isa : "";
#if defined(__x86_64__)
  if (name == "avx512-vnni") return gemmk::avx512_tiles();
  if (name == "avx2") return gemmk::avx2_tiles();
#endif
  (void)name;
  return scalar;
}

// src [out, in] -> dst [panels][in][16], columns past `out` zero (computed, never stored).
template <class E>
void pack_panels(const E* src, int64_t out, int64_t in, E* dst) {
  const int64_t panels = (out + kPackedPanel - 1) / kPackedPanel;
  for (int64_t p = 0; p < panels; ++p) {
    E* panel = dst + p * in * kPackedPanel;  // [in][16]
    for (int64_t j = 0; j < kPackedPanel; ++j) {
      const int64_t o = p * kPackedPanel + j;
      if (o < out) {
        const E* row = src + o * in;  // [in]
        for (int64_t k = 0; k < in; ++k) panel[k * kPackedPanel + j] = row[k];
      } else {
        for (int64_t k = 0; k < in; ++k) panel[k * kPackedPanel + j] = E(0);
      }
    }
  }
}

}  // namespace

std::shared_ptr<const PackedDense> pack_dense(const Weight& W) {
  if (W.kind != WeightKind::Dense || !W.valid() || W.out <= 0 || W.in <= 0) return nullptr;
  if (W.dtype != DType::F32 && W.dtype != DType::BF16 && W.dtype != DType::F16) return nullptr;
#if !defined(__x86_64__)
  // Only x86 has register tiles; elsewhere (NEON) the row kernels beat the packed scalar tile.
  return nullptr;
#endif
  auto P = std::make_shared<PackedDense>();
  const size_t es = elem_bytes(W.dtype);
  P->dtype = W.dtype;
  P->out = W.out;
  P->in = W.in;
  P->panels = (W.out + kPackedPanel - 1) / kPackedPanel;
  const size_t bytes = size_t(P->panels * W.in * kPackedPanel) * es;
  P->buf.reset(new uint8_t[bytes + 64]);
  uint8_t* dst = P->buf.get() + (64 - reinterpret_cast<uintptr_t>(P->buf.get()) % 64) % 64;
  P->data = dst;
  if (es == 4) pack_panels(static_cast<const uint32_t*>(W.data), W.out, W.in, reinterpret_cast<uint32_t*>(dst));
  else pack_panels(static_cast<const uint16_t*>(W.data), W.out, W.in, reinterpret_cast<uint16_t*>(dst));
  return P;
}

void gemm_packed(ThreadPool& pool, const PackedDense& P, const float* x, int64_t ldx, float* y, int64_t ldy,
                 int64_t n, const char* isa) {
  if (n <= 0 || P.out <= 0) return;
  const gemmk::Tiles& T = tiles_for(isa);
  const int mr = T.mr;
  const int64_t K = P.in;
  const size_t es = elem_bytes(P.dtype);
  const uint8_t* base = static_cast<const uint8_t*>(P.data);
  const int64_t slices = (K + kKcMax - 1) / kKcMax, kcs = (K + slices - 1) / slices;  // even k slices
  const int64_t rb = int64_t(mr) * kRowTiles;  // rows per work item
  const int64_t groups = (P.panels + kNcPanels - 1) / kNcPanels, row_blocks = (n + rb - 1) / rb;
  const int64_t items = groups * row_blocks;

  // One work item: panels of group g x rows of block b. xp: [kcs][mr]; tmp: [mr][16].
  auto run_item = [&](int64_t item, float* xp, float* tmp) {
    const int64_t g = item / row_blocks, b = item % row_blocks;
    const int64_t p0 = g * kNcPanels, p1 = std::min(P.panels, p0 + kNcPanels);
    const int64_t r0 = b * rb, r1 = std::min(n, r0 + rb);
    for (int64_t pc = 0; pc < K; pc += kcs) {
      const int64_t kc = std::min(kcs, K - pc);
      for (int64_t ic = r0; ic < r1; ic += mr) {
        const int m = int(std::min<int64_t>(mr, r1 - ic));
        for (int i = 0; i < m; ++i) {  // xp [kc][mr] <- x rows ic.., columns pc..
          const float* xr = x + (ic + i) * ldx + pc;
          for (int64_t k = 0; k < kc; ++k) xp[k * mr + i] = xr[k];
        }
        for (int64_t p = p0; p < p1; ++p) {
          const void* w = base + size_t((p * K + pc) * kPackedPanel) * es;  // [kc][16]
          const int64_t col = p * kPackedPanel, cols = std::min(kPackedPanel, P.out - col);
          float* yt = y + ic * ldy + col;  // [m][cols] at stride ldy
          if (cols == kPackedPanel) {
            T.tile(xp, m, w, P.dtype, kc, yt, ldy, pc > 0);
            continue;
          }
          // Last, partial panel: through a full-width tile so no store passes the row's end.
          for (int i = 0; i < m; ++i) std::memcpy(tmp + i * kPackedPanel, yt + i * ldy, size_t(cols) * 4);
          T.tile(xp, m, w, P.dtype, kc, tmp, kPackedPanel, pc > 0);
          for (int i = 0; i < m; ++i) std::memcpy(yt + i * ldy, tmp + i * kPackedPanel, size_t(cols) * 4);
        }
      }
    }
  };

  const size_t scratch = size_t(kcs * mr + mr * kPackedPanel);
  // Below ~1M multiply-adds a parallel region costs more than it saves.
  const bool parallel = pool.size() > 1 && items > 1 && double(n) * double(K) * double(P.out) >= 1e6;
  if (!parallel) {
    float* s = detail::thread_scratch(scratch);
    for (int64_t it = 0; it < items; ++it) run_item(it, s, s + kcs * mr);
    return;
  }
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    float* s = detail::thread_scratch(scratch);
    for (int64_t it = next.fetch_add(1); it < items; it = next.fetch_add(1)) run_item(it, s, s + kcs * mr);
  });
}

}  // namespace rapid
