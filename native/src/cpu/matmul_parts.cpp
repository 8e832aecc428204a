// Fused matmuls (cpu/matmul_parts.h) on the Fast path's kernels; anything the fusion does not cover
// (Exact precision, mixed formats, the batched GEMM's row counts) runs as separate matmul() calls.
#include "cpu/matmul_parts.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "cpu/matmul_fast.h"
#include "cpu/row_split.h"

namespace rapid {
namespace {

// Whether the parts can share one quantization of x and the per-range kernels (fast_rows_on): the same x
// layout (bits, group, in) and either fewer rows than the row-major GEMM takes or interleaved copies for
// all (the interleaved GEMM has no lower or upper bound on the rows).
bool fusable(const MatmulPart* parts, int count, int64_t n, Precision p) {
  if (p != Precision::Fast || n < 1) return false;
  const kern::Kernels& k = detail::active_kernels();
  const Weight& w0 = *parts[0].w;
  const bool any_n = k.gemm_interleaved(w0.bits) != nullptr && interleaved_gemv_enabled();
  if (n >= kern::kGemmMinRows && !any_n) return false;
  for (int i = 0; i < count; ++i) {
    const Weight& w = *parts[i].w;
    if (!w.valid()) throw std::runtime_error("matmul: weight " + w.name + " is not loaded");
    if (w.in != w0.in) throw std::runtime_error("matmul: fused weights " + w0.name + " and " + w.name + " differ in width");
    if (!detail::fast_path_ok(w) || w.bits != w0.bits || w.group != w0.group) return false;
    if (n >= kern::kGemmMinRows && w.interleaved == nullptr) return false;
  }
  return true;
}

size_t scratch_for(const MatmulPart* parts, int count) {
  size_t s = 0;
  for (int i = 0; i < count; ++i) s = std::max(s, kern::fast_scratch_floats(*parts[i].w));
  return s;
}

}  // namespace

void matmul_parts(ThreadPool& pool, const MatmulPart* parts, int count, const float* x, int64_t n, Precision p) {
  if (count <= 0 || n == 0) return;
  if (!fusable(parts, count, n, p)) {
    for (int i = 0; i < count; ++i) matmul(pool, *parts[i].w, x, parts[i].y, n, p);
    return;
  }
  const kern::Kernels& k = detail::active_kernels();
  const int64_t K = parts[0].w->in;
  const kern::XQuant xq = detail::quantize_activations(pool, k, *parts[0].w, x, K, n);
  std::vector<int64_t> off(size_t(count) + 1, 0);  // [count + 1] first row of each part in the joint row space
  for (int i = 0; i < count; ++i) off[size_t(i) + 1] = off[size_t(i)] + parts[i].w->out;
  const int64_t rows = off[size_t(count)];
  const size_t scratch = scratch_for(parts, count);
  std::vector<const InterleavedRows*> il(size_t(count), nullptr);  // [count]
  bool any_il = false;
  for (int i = 0; i < count; ++i) any_il |= (il[size_t(i)] = detail::interleaved_for(pool, k, *parts[i].w, n)) != nullptr;
  split_rows(pool, rows, n * K, [&](int64_t b, int64_t e) {
    float* s = detail::thread_scratch(scratch);
    for (int i = 0; i < count; ++i) {
      const int64_t r0 = std::max(b, off[size_t(i)]), r1 = std::min(e, off[size_t(i) + 1]);
      if (r0 < r1)
        detail::fast_rows_on(k, il[size_t(i)], *parts[i].w, xq, n, r0 - off[size_t(i)], r1 - off[size_t(i)], parts[i].y,
                             parts[i].w->out, s);
    }
  }, any_il ? detail::kInterleavedAlign : 4);
}

void matmul_pair(ThreadPool& pool, const Weight& a, const Weight& b, const float* x, float* ya, float* yb,
                 int64_t n, Precision p, const std::function<void(int64_t r0, int64_t r1)>& epilogue) {
  if (n == 0) return;
  if (a.out != b.out) throw std::runtime_error("matmul: paired weights " + a.name + " and " + b.name + " differ in rows");
  const MatmulPart parts[2] = {{&a, ya}, {&b, yb}};
  const int64_t rows = a.out;
  if (!fusable(parts, 2, n, p)) {
    matmul(pool, a, x, ya, n, p);
    matmul(pool, b, x, yb, n, p);
    // The GLU alone, split like rows of n elements: inline while small (a decode row), as the elementwise ops.
    split_rows(pool, rows, n, epilogue, 8);
    return;
  }
  const kern::Kernels& k = detail::active_kernels();
  const int64_t K = a.in;
  const kern::XQuant xq = detail::quantize_activations(pool, k, a, x, K, n);
  const size_t scratch = scratch_for(parts, 2);
  const InterleavedRows* ila = detail::interleaved_for(pool, k, a, n);
  const InterleavedRows* ilb = detail::interleaved_for(pool, k, b, n);
  split_rows(pool, rows, 2 * n * K, [&](int64_t r0, int64_t r1) {
    float* s = detail::thread_scratch(scratch);
    detail::fast_rows_on(k, ila, a, xq, n, r0, r1, ya, rows, s);
    detail::fast_rows_on(k, ilb, b, xq, n, r0, r1, yb, rows, s);
    epilogue(r0, r1);
  }, ila != nullptr || ilb != nullptr ? detail::kInterleavedAlign : 8);
}

std::string decode_matmul_description() {
  const kern::Kernels& k = detail::active_kernels();  // sets the prefetch distance on first use
  const int pf = kern::g_prefetch_rows;
  const bool il = k.gemv4_interleaved != nullptr && interleaved_gemv_enabled();
  const bool il8 = il && k.gemv8_interleaved != nullptr;
  const size_t il_pf = pf > 0 ? k.gemv4_prefetch_bytes : 0;
  return "q/k/v and gate/up+GLU fused (one pool dispatch each), rows in per-thread slices, " +
         (pf > 0 ? "row-major GEMVs prefetch " + std::to_string(pf) + " rows ahead"
                 : std::string("no software prefetch")) +
         (il ? ", 4-bit GEMV and batched GEMM on 16-row interleaved copies" : "") + (il8 ? ", 8-bit on 8-row ones" : "") +
         (il && il_pf > 0 ? " (the GEMV prefetches " + std::to_string(il_pf / 1024) + " KB ahead)" : "");
}

}  // namespace rapid
