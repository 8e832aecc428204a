#include "cpu/segment_attention.h"
#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>
#include "cpu/gemm_packed.h"
#include "cpu/matmul.h"
#include "layers/vec_math.h"

namespace rapid {

void segment_attention(ThreadPool& pool, const float* q, int64_t ldq, const float* k, const float* v, int64_t ldkv,
                       float* out, int64_t ldo, int n_heads, int n_kv_heads, int head_dim, float scale,
                       const std::vector<int64_t>& cu) {
  if (cu.size() < 2) return;
  if (n_kv_heads < 1 || n_heads % n_kv_heads != 0)
    throw std::invalid_argument("segment_attention: " + std::to_string(n_heads) + " heads are not a multiple of " +
                                std::to_string(n_kv_heads) + " kv heads");
  const int64_t hd = head_dim, group = n_heads / n_kv_heads;
  const int64_t n_seg = int64_t(cu.size()) - 1;
  constexpr int64_t P = kPackedPanel;
  auto up = [](int64_t a) { return (a + kPackedPanel - 1) / kPackedPanel * kPackedPanel; };
  // Per (kv head, segment), K and V in the packed GEMM's panels, so both products run on it: K as a
  // weight [len, hd] (keys are the output columns), V as a weight [hd, len]. Memory is linear in n.
  std::vector<int64_t> kofs{0}, vofs{0};  // per segment, in floats within one kv head's slab
  for (int64_t s = 0; s < n_seg; ++s) {
    const int64_t len = cu[size_t(s) + 1] - cu[size_t(s)];
    kofs.push_back(kofs.back() + up(len) * hd);
    vofs.push_back(vofs.back() + up(hd) * len);
  }
  std::vector<float> kp(size_t(n_kv_heads * kofs.back()));  // [kv heads][segments of [len/16][hd][16]]
  std::vector<float> vp(size_t(n_kv_heads * vofs.back()));  // [kv heads][segments of [hd/16][len][16]]
  pool.parallel_for(int64_t(n_kv_heads) * n_seg, [&](int64_t a, int64_t b) {
    for (int64_t task = a; task < b; ++task) {
      const int64_t g = task / n_seg, s = task % n_seg;
      const int64_t t0 = cu[size_t(s)], len = cu[size_t(s) + 1] - t0;
      float* kd = kp.data() + g * kofs.back() + kofs[size_t(s)];  // [up(len)/16][hd][16]
      float* vd = vp.data() + g * vofs.back() + vofs[size_t(s)];  // [up(hd)/16][len][16]
      for (int64_t i = 0; i < up(len); ++i) {
        const float* kr = k + (t0 + i) * ldkv + g * hd;  // [hd], key i
        float* col = kd + (i / P) * hd * P + i % P;
        for (int64_t d = 0; d < hd; ++d) col[d * P] = i < len ? kr[d] : 0.0f;
      }
      for (int64_t i = 0; i < len; ++i) {
        const float* vr = v + (t0 + i) * ldkv + g * hd;  // [hd], value i
        for (int64_t d0 = 0; d0 < hd; d0 += P) {
          float* dst = vd + (d0 / P) * len * P + i * P;  // [16]
          for (int64_t j = 0; j < P; ++j) dst[j] = d0 + j < hd ? vr[d0 + j] : 0.0f;
        }
      }
    }
  });

  // Tasks: (segment, head, block of up to kQB queries): scores stay [kQB, len].
  constexpr int64_t kQB = 64;
  struct Task {
    int64_t seg, head, q0, q1;
  };
  std::vector<Task> tasks;
  for (int64_t s = 0; s < n_seg; ++s)
    for (int64_t h = 0; h < n_heads; ++h)
      for (int64_t q0 = cu[size_t(s)]; q0 < cu[size_t(s) + 1]; q0 += kQB)
        tasks.push_back({s, h, q0, std::min(cu[size_t(s) + 1], q0 + kQB)});
  const char* isa = matmul_kernel_name();
  std::atomic<size_t> next{0};
  pool.run([&](int, int) {
    thread_local std::vector<float> scores;
    for (size_t ti = next.fetch_add(1); ti < tasks.size(); ti = next.fetch_add(1)) {
      const Task& tk = tasks[ti];
      const int64_t g = tk.head / group;
      const int64_t t0 = cu[size_t(tk.seg)], len = cu[size_t(tk.seg) + 1] - t0;
      const int64_t nq = tk.q1 - tk.q0;
      if (scores.size() < size_t(nq * len)) scores.resize(size_t(nq * len));
      float* S = scores.data();  // [nq, len]
      PackedDense kw;            // [len, hd] view: S = Q · Kᵀ
      kw.out = len;
      kw.in = hd;
      kw.panels = up(len) / P;
      kw.data = kp.data() + g * kofs.back() + kofs[size_t(tk.seg)];
      // Nested inside pool.run, so these GEMMs run inline on this thread.
      gemm_packed(pool, kw, q + tk.q0 * ldq + tk.head * hd, ldq, S, len, nq, isa);
      for (int64_t i = 0; i < nq; ++i) {
        float* r = S + i * len;  // [len]
        float mx = -INFINITY;
        for (int64_t j = 0; j < len; ++j) {
          r[j] *= scale;
          mx = std::max(mx, r[j]);
        }
        const float sum = vec::exp_shift_sum(r, len, mx);
        for (int64_t j = 0; j < len; ++j) r[j] /= sum;
      }
      PackedDense vw;  // [hd, len] view: O = P · V
      vw.out = hd;
      vw.in = len;
      vw.panels = up(hd) / P;
      vw.data = vp.data() + g * vofs.back() + vofs[size_t(tk.seg)];
      gemm_packed(pool, vw, S, len, out + tk.q0 * ldo + tk.head * hd, ldo, nq, isa);
    }
  });
}

}  // namespace rapid
