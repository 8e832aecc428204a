#include "layers/moe.h"
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include "layers/vec_math.h"

namespace rapid {

namespace {

std::string shape_of(std::initializer_list<int64_t> dims) {
  std::string s = "[";
  for (int64_t d : dims) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + "]";
}

// A 2-D Weight view of expert e inside a stacked [E, out, in] tensor (dense or affine).
Weight expert_view(const Weight& stacked, int64_t e, int64_t rows_per_expert, int64_t row0, int64_t rows,
                   const std::string& name) {
  Weight w = stacked;
  w.out = rows;
  w.name = name + "[" + std::to_string(e) + "]";
  const int64_t r = e * rows_per_expert + row0;  // first row of this view in the flattened [E*out, in]
  if (stacked.kind == WeightKind::Dense) {
    w.data = static_cast<const uint8_t*>(stacked.data) + size_t(r) * size_t(stacked.in) * dtype_size(stacked.dtype);
  } else {
    const size_t row_bytes = size_t(stacked.in) * size_t(stacked.bits) / 8;
    const size_t grp_bytes = size_t(stacked.in / stacked.group) * dtype_size(stacked.dtype);
    w.data = static_cast<const uint8_t*>(stacked.data) + size_t(r) * row_bytes;
    w.scales = static_cast<const uint8_t*>(stacked.scales) + size_t(r) * grp_bytes;
    w.biases = static_cast<const uint8_t*>(stacked.biases) + size_t(r) * grp_bytes;
  }
  return w;
}

// A stacked [E, out, in] tensor at `<path>.weight` (+ .scales/.biases) as one Weight of shape
// [E*out, in]; checks E and the logical [out, in]. Quant params: qc.for_module(path).
Weight load_stacked(const Checkpoint& ck, const QuantConfig& qc, const std::string& path, int64_t E, int64_t out,
                    int64_t in) {
  const TensorView& wt = ck.get(path + ".weight");
  const TensorView* sc = ck.find(path + ".scales");
  Weight w;
  w.name = path;
  if (wt.shape.size() != 3 || wt.shape[0] != E || wt.shape[1] != out)
    throw std::runtime_error("module " + path + " has weight shape " + wt.shape_str() + ", expected " +
                             (sc ? shape_of({E, out, -1}) + " (packed)" : shape_of({E, out, in})));
  if (!sc) {
    if (!is_float_dtype(wt.dtype) || wt.shape[2] != in)
      throw std::runtime_error("module " + path + " has shape " + wt.shape_str() + " dtype " + dtype_name(wt.dtype) +
                               ", expected float " + shape_of({E, out, in}));
    w.kind = WeightKind::Dense;
    w.dtype = wt.dtype;
    w.out = E * out;
    w.in = in;
    w.data = wt.data;
    return w;
  }
  std::optional<QuantParams> op = qc.for_module(path);
  const QuantParams p = op ? *op : qc.global;
  if (p.mode != "affine" || !quant_supported(p))
    throw std::runtime_error(path + ": unsupported quantization " + p.mode + " " + std::to_string(p.bits) +
                             "-bit group " + std::to_string(p.group_size));
  const TensorView* bi = ck.find(path + ".biases");
  if (!bi) throw std::runtime_error(path + ": affine quantized but " + path + ".biases is missing in " + ck.dir());
  if (wt.dtype != DType::U32 || !is_float_dtype(sc->dtype) || bi->dtype != sc->dtype)
    throw std::runtime_error(path + ": quantized tensors must be U32 weight and matching float scales/biases");
  if (wt.shape[2] * 32 != in * p.bits || sc->shape != std::vector<int64_t>{E, out, in / p.group_size} ||
      bi->shape != sc->shape || in % p.group_size != 0)
    throw std::runtime_error(path + ": packed shapes inconsistent with affine " + std::to_string(p.bits) +
                             "-bit group " + std::to_string(p.group_size) + " for " + shape_of({E, out, in}) +
                             ": weight " + wt.shape_str() + ", scales " + sc->shape_str());
  set_affine_view(w, wt, *sc, *bi, E * out, in, p);  // experts stacked: [E*out, in]
  return w;
}

// Copies t [E, a, b] into dst as [E, b, a] (same dtype): the hub's x·W layout to the kernels' W·x one.
void transpose_last2(const TensorView& t, uint8_t* dst) {
  const int64_t E = t.shape[0], a = t.shape[1], b = t.shape[2];
  const size_t es = dtype_size(t.dtype);
  for (int64_t e = 0; e < E; ++e) {
    const uint8_t* src = t.data + size_t(e * a * b) * es;
    uint8_t* d = dst + size_t(e * a * b) * es;
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < b; ++j) std::memcpy(d + size_t(j * a + i) * es, src + size_t(i * b + j) * es, es);
  }
}

}  // namespace

size_t MoeExperts::expert_bytes(int64_t e) const {
  return weight_bytes(gate[size_t(e)]) + weight_bytes(up[size_t(e)]) + weight_bytes(down[size_t(e)]);
}

MoeRouter load_moe_router(const Checkpoint& ckpt, const QuantConfig& qc, const std::string& path, int64_t n_experts,
                          int64_t hidden, RouterOptions opt) {
  if (opt.top_k <= 0 || opt.top_k > n_experts)
    throw std::runtime_error(path + ": top_k " + std::to_string(opt.top_k) + " is outside [1, " +
                             std::to_string(n_experts) + "]");
  if (!opt.input_scale.empty() && int64_t(opt.input_scale.size()) != hidden)
    throw std::runtime_error(path + ": router input scale has " + std::to_string(opt.input_scale.size()) +
                             " elements, expected " + std::to_string(hidden));
  if (!opt.per_expert_scale.empty() && int64_t(opt.per_expert_scale.size()) != n_experts)
    throw std::runtime_error(path + ": per-expert scale has " + std::to_string(opt.per_expert_scale.size()) +
                             " elements, expected " + std::to_string(n_experts));
  MoeRouter r;
  r.gate = load_linear(ckpt, qc, path, n_experts, hidden, false);
  r.opt = std::move(opt);
  return r;
}

void moe_route(ThreadPool& pool, const MoeRouter& r, const float* x, int64_t n, Precision, int32_t* idx, float* w) {
  const int64_t E = r.n_experts(), H = r.gate.in();
  const int k = r.opt.top_k;
  const RouterOptions& o = r.opt;
  std::vector<float> xin;  // [n, hidden] transformed router input (Gemma 4)
  if (o.input_rmsnorm) {
    xin.resize(size_t(n * H));
    for (int64_t t = 0; t < n; ++t) {
      const float* xr = x + t * H;
      float* yr = xin.data() + t * H;
      float ss = 0;
      for (int64_t i = 0; i < H; ++i) ss += xr[i] * xr[i];
      const float inv = 1.0f / std::sqrt(ss / float(H) + o.input_eps);
      for (int64_t i = 0; i < H; ++i)
        yr[i] = xr[i] * inv * (o.input_scale.empty() ? 1.0f : o.input_scale[size_t(i)]) * o.input_mult;
    }
    x = xin.data();
  }
  std::vector<float> logits(size_t(n * E));  // [n, n_experts]
  // Routing is discrete and the gate is small: always Exact, so activation quantization never flips a choice.
  linear(pool, r.gate, x, logits.data(), n, Precision::Exact);
  for (int64_t t = 0; t < n; ++t) {
    float* pr = logits.data() + t * E;  // [n_experts] → probabilities in place
    float mx = pr[0];
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, pr[e]);
    float sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += (pr[e] = std::exp(pr[e] - mx));
    for (int64_t e = 0; e < E; ++e) pr[e] /= sum;
    int32_t* ir = idx + t * k;
    float* wr = w + t * k;
    float top_sum = 0;
    for (int j = 0; j < k; ++j) {  // k selection passes: k ≤ 8 and E ≤ 256, cheaper than a sort
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int q = 0; q < j; ++q) taken |= (ir[q] == e);
        if (!taken && (best < 0 || pr[e] > pr[best])) best = e;
      }
      ir[j] = int32_t(best);
      wr[j] = pr[best];
      top_sum += pr[best];
    }
    for (int j = 0; j < k; ++j) {
      if (o.renormalize) wr[j] /= top_sum;
      if (!o.per_expert_scale.empty()) wr[j] *= o.per_expert_scale[size_t(ir[j])];
    }
  }
}

MoeExperts load_moe_experts(const Checkpoint& ck, const QuantConfig& qc, const std::string& fused,
                            const std::string& split, int64_t E, int64_t H, int64_t I, Activation act) {
  MoeExperts ex;
  ex.n_experts = E;
  ex.hidden = H;
  ex.ffn = I;
  ex.act = act;
  ex.gate.resize(size_t(E));
  ex.up.resize(size_t(E));
  ex.down.resize(size_t(E));
  const TensorView* gu = ck.find(fused + ".gate_up_proj");
  const TensorView* dn = ck.find(fused + ".down_proj");
  if (gu && dn) {
    // transformers-saved: gate_up [E, 2I, H], down [E, H, I]; hub: [E, H, 2I], [E, I, H]. When H == 2I
    // the gate_up shapes coincide but down's differ (I != H), and vice versa, so both are checked.
    const bool saved = gu->shape == std::vector<int64_t>{E, 2 * I, H} && dn->shape == std::vector<int64_t>{E, H, I};
    const bool hub = gu->shape == std::vector<int64_t>{E, H, 2 * I} && dn->shape == std::vector<int64_t>{E, I, H};
    if ((!saved && !hub) || !is_float_dtype(gu->dtype) || gu->dtype != dn->dtype)
      // Both tensors by full name: either may be the wrong one.
      throw std::runtime_error(fused + ".gate_up_proj " + gu->shape_str() + " and " + fused + ".down_proj " +
                               dn->shape_str() + " match neither " + shape_of({E, 2 * I, H}) + " + " +
                               shape_of({E, H, I}) + " nor the hub's " + shape_of({E, H, 2 * I}) + " + " +
                               shape_of({E, I, H}) + " (float)");
    const uint8_t* gu_data = gu->data;
    const uint8_t* dn_data = dn->data;
    if (!saved) {  // hub layout: one transposed copy at load, then the same views
      ex.owned.resize(gu->nbytes + dn->nbytes);
      transpose_last2(*gu, ex.owned.data());
      transpose_last2(*dn, ex.owned.data() + gu->nbytes);
      gu_data = ex.owned.data();
      dn_data = ex.owned.data() + gu->nbytes;
    }
    Weight wgu{WeightKind::Dense, gu->dtype, E * 2 * I, H, gu_data, nullptr, nullptr, 0, 0, fused + ".gate_up_proj", nullptr, nullptr};
    Weight wdn{WeightKind::Dense, dn->dtype, E * H, I, dn_data, nullptr, nullptr, 0, 0, fused + ".down_proj", nullptr, nullptr};
    for (int64_t e = 0; e < E; ++e) {
      ex.gate[size_t(e)] = expert_view(wgu, e, 2 * I, 0, I, wgu.name + ".gate");
      ex.up[size_t(e)] = expert_view(wgu, e, 2 * I, I, I, wgu.name + ".up");
      ex.down[size_t(e)] = expert_view(wdn, e, H, 0, H, wdn.name);
    }
    ex.layout = saved ? "fused" : "fused-hub";
    return ex;
  }
  if (!split.empty() && (ck.has(split + ".gate_proj.weight"))) {
    const Weight g = load_stacked(ck, qc, split + ".gate_proj", E, I, H);
    const Weight u = load_stacked(ck, qc, split + ".up_proj", E, I, H);
    const Weight d = load_stacked(ck, qc, split + ".down_proj", E, H, I);
    for (int64_t e = 0; e < E; ++e) {
      ex.gate[size_t(e)] = expert_view(g, e, I, 0, I, g.name);
      ex.up[size_t(e)] = expert_view(u, e, I, 0, I, u.name);
      ex.down[size_t(e)] = expert_view(d, e, H, 0, H, d.name);
    }
    ex.layout = "switch";
    return ex;
  }
  if (ck.has(fused + ".0.gate_proj.weight")) {
    for (int64_t e = 0; e < E; ++e) {
      const std::string p = fused + "." + std::to_string(e);
      ex.gate[size_t(e)] = load_linear(ck, qc, p + ".gate_proj", I, H, false).w;
      ex.up[size_t(e)] = load_linear(ck, qc, p + ".up_proj", I, H, false).w;
      ex.down[size_t(e)] = load_linear(ck, qc, p + ".down_proj", H, I, false).w;
    }
    ex.layout = "per-expert";
    return ex;
  }
  throw std::runtime_error("missing expert tensors in " + ck.dir() + " (tried " + fused + ".gate_up_proj + " + fused +
                           ".down_proj" + (split.empty() ? "" : ", " + split + ".{gate,up,down}_proj.weight") + ", " +
                           fused + ".0.gate_proj.weight)");
}

void moe_experts_forward(ThreadPool& pool, const MoeExperts& ex, const float* x, int64_t n, const int32_t* idx,
                         const float* w, int top_k, float* y, Precision p, MoeScratch& s, MoeStats* stats) {
  const int64_t E = ex.n_experts, H = ex.hidden, I = ex.ffn, S = n * top_k;  // S routed slots
  s.count.assign(size_t(E), 0);
  for (int64_t i = 0; i < S; ++i) {
    if (idx[i] < 0 || idx[i] >= E)
      throw std::runtime_error("moe: expert index " + std::to_string(idx[i]) + " outside [0, " + std::to_string(E) + ")");
    ++s.count[size_t(idx[i])];
  }
  // Counting sort of the slots by expert (stable: rows keep batch order inside an expert's group).
  s.start.assign(size_t(E) + 1, 0);
  for (int64_t e = 0; e < E; ++e) s.start[size_t(e) + 1] = s.start[size_t(e)] + s.count[size_t(e)];
  s.order.resize(size_t(S));   // [S] slot ids in expert order
  s.pos_of.resize(size_t(S));  // [S] slot id → its row in the expert-ordered outputs
  s.fill.assign(s.start.begin(), s.start.end() - 1);
  for (int64_t i = 0; i < S; ++i) {
    const int32_t at = s.fill[size_t(idx[i])]++;
    s.order[size_t(at)] = int32_t(i);
    s.pos_of[size_t(i)] = at;
  }
  s.xg.resize(size_t(S * H));  // [S, hidden] gathered inputs, expert-ordered
  s.g.resize(size_t(S * I));   // [S, ffn]
  s.u.resize(size_t(S * I));   // [S, ffn]
  s.yo.resize(size_t(S * H));  // [S, hidden] expert outputs, expert-ordered
  for (int64_t i = 0; i < S; ++i)
    std::memcpy(s.xg.data() + i * H, x + (s.order[size_t(i)] / top_k) * H, size_t(H) * sizeof(float));
  int64_t runs = 0, active = 0, bytes = 0;
  for (int64_t e = 0; e < E; ++e) active += s.count[size_t(e)] > 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t c = s.count[size_t(e)], r0 = s.start[size_t(e)];
    if (c == 0) continue;
    // One pass over expert e's weights for all c of its rows.
    float* xg = s.xg.data() + r0 * H;  // [c, hidden]
    float* g = s.g.data() + r0 * I;    // [c, ffn]
    float* u = s.u.data() + r0 * I;    // [c, ffn]
    matmul(pool, ex.gate[size_t(e)], xg, g, c, p);
    matmul(pool, ex.up[size_t(e)], xg, u, c, p);
    for (int64_t r = 0; r < c; ++r) vec::glu(g + r * I, u + r * I, I, ex.act);  // per row: same arithmetic for every row
    matmul(pool, ex.down[size_t(e)], g, s.yo.data() + r0 * H, c, p);
    ++runs;
    bytes += int64_t(ex.expert_bytes(e));
  }
  // Each row sums its own k terms in j order: independent of which rows shared its experts.
  pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* yr = y + t * H;  // [hidden]
      std::fill(yr, yr + H, 0.0f);
      for (int j = 0; j < top_k; ++j) {
        const int64_t slot = t * top_k + j;
        vec::axpy(w[slot], s.yo.data() + int64_t(s.pos_of[size_t(slot)]) * H, yr, H);
      }
    }
  });
  if (stats) {
    stats->expert_runs += runs;
    stats->active_experts += active;
    stats->routed_rows += S;
    stats->expert_bytes += bytes;
  }
}

void moe_block_forward(ThreadPool& pool, const MoeBlock& b, const float* x, int64_t n, float* y, Precision p,
                       MoeScratch& s, MoeStats* stats) {
  const int k = b.router.opt.top_k;
  s.idx.resize(size_t(n * k));
  s.wts.resize(size_t(n * k));
  moe_route(pool, b.router, x, n, p, s.idx.data(), s.wts.data());
  moe_experts_forward(pool, b.experts, x, n, s.idx.data(), s.wts.data(), k, y, p, s, stats);
}

}  // namespace rapid
