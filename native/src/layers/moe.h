// Mixture-of-experts block shared by the MoE families (Qwen3-MoE, Qwen3-VL-MoE, Gemma 4 26B-A4B):
// a router (fp32 softmax over gate logits, top-k, optional renormalisation and per-expert scale)
// and stacked gated experts run grouped by expert, so each active expert's weights are read ONCE
// per forward whatever the number of tokens routed to it. Expert weights are views into the
// checkpoint's stacked [E, out, in] tensors (dense or MLX affine), never copies (one exception:
// the hub's transposed [E, in, out] dense layout, transposed once at load).
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "cpu/matmul.h"
#include "layers/activations.h"
#include "layers/linear.h"
#include "quant/mlx_quant.h"
#include "tensor/weight.h"

namespace rapid {

// How a router turns hidden rows into (weights, indices). Defaults are Qwen3-MoE's.
struct RouterOptions {
  int top_k = 8;
  bool renormalize = true;  // divide the top-k probabilities by their sum (norm_topk_prob)
  // Gemma 4: the router input is rmsnorm_noscale(x) · input_scale · input_mult before the gate.
  bool input_rmsnorm = false;
  float input_eps = 1e-6f;
  std::vector<float> input_scale;       // [hidden] or empty (= 1)
  float input_mult = 1.0f;              // e.g. hidden^-0.5
  std::vector<float> per_expert_scale;  // [n_experts] or empty; multiplies the final weights
};

struct MoeRouter {
  Linear gate;  // [n_experts, hidden]; may be affine-quantized (mlx-community: forced 8-bit)
  RouterOptions opt;
  int64_t n_experts() const { return gate.out(); }
};

// Loads `<path>` ("…mlp.gate" for Qwen, "…router.proj" for Gemma 4) as the gate Linear and checks
// [n_experts, hidden]. Options are the caller's (Gemma 4 fills input_scale / per_expert_scale).
MoeRouter load_moe_router(const Checkpoint& ckpt, const QuantConfig& qc, const std::string& path,
                          int64_t n_experts, int64_t hidden, RouterOptions opt);

// idx [n, top_k], w [n, top_k]: for each row, the top_k experts in descending probability order
// (ties: lower index first) and their weights. Row-independent (batch invariant).
void moe_route(ThreadPool& pool, const MoeRouter& r, const float* x, int64_t n, Precision p, int32_t* idx,
               float* w);

// The experts: per-expert Weight views into stacked tensors.
struct MoeExperts {
  int64_t n_experts = 0, hidden = 0, ffn = 0;
  Activation act = Activation::Silu;
  std::vector<Weight> gate, up, down;  // [n_experts] each; gate/up [ffn, hidden], down [hidden, ffn]
  std::vector<uint8_t> owned;          // transposed copy for the hub [E, in, out] layout, else empty
  std::string layout;                  // "fused", "fused-hub", "switch" or "per-expert" (diagnostics)
  size_t expert_bytes(int64_t e) const;  // bytes one pass over expert e reads (gate + up + down)
};

// Loads the experts of one layer, trying the layouts in this order (E experts, hidden H, expert FFN I):
//  1. `<fused>.gate_up_proj` + `<fused>.down_proj` (3-D dense): transformers-saved [E, 2I, H] + [E, H, I],
//     or the hub's transposed [E, H, 2I] + [E, I, H], told apart by the shapes (gate = first I);
//  2. `<split>.{gate,up,down}_proj.weight` stacked [E, out, in] (+ .scales/.biases: MLX SwitchLinear);
//  3. `<fused>.N.{gate,up,down}_proj.weight` per expert (Qwen3-MoE hub files).
// `split` may be empty. Throws naming the tried paths when none matches, or naming the shape that is off.
// Qwen: fused = "…mlp.experts", split = "…mlp.switch_mlp"; Gemma 4: fused = "…experts",
// split = "…experts.switch_glu".
MoeExperts load_moe_experts(const Checkpoint& ckpt, const QuantConfig& qc, const std::string& fused,
                            const std::string& split, int64_t n_experts, int64_t hidden, int64_t ffn,
                            Activation act);

// Work counters of expert execution, accumulated across calls until reset (one forward = one step).
struct MoeStats {
  int64_t expert_runs = 0;      // (layer, expert) pairs whose weights were read: one per active expert per call
  int64_t active_experts = 0;   // distinct experts named by the routing, summed over calls
  int64_t routed_rows = 0;      // token·top_k assignments, summed over calls
  int64_t expert_bytes = 0;     // expert weight bytes read by the matmuls
};

// Reusable buffers (kept by the model across layers/steps; contents never carry meaning between calls).
struct MoeScratch {
  std::vector<float> xg, g, u, yo;  // gathered rows / expert intermediates / expert outputs
  std::vector<int32_t> order, count, start;
  std::vector<int32_t> pos_of, fill;  // [S] slot → expert-ordered row; [E] next free row per expert
  std::vector<int32_t> idx;  // [n, top_k] routing of moe_block_forward
  std::vector<float> wts;    // [n, top_k]
};

// y [n, hidden] = Σ_j w[t, j] · expert_{idx[t, j]}(x[t]) for every row t. Tokens are grouped by
// expert; each expert named at least once runs ONE gate/up/down pass over all its rows (gather →
// matmul → weighted scatter). Each row's terms are summed in its own j order, so a row's result
// does not depend on the other rows (batch invariant, bitwise). `idx` entries outside
// [0, n_experts) throw. stats (optional) is incremented.
void moe_experts_forward(ThreadPool& pool, const MoeExperts& ex, const float* x, int64_t n, const int32_t* idx,
                         const float* w, int top_k, float* y, Precision p, MoeScratch& s,
                         MoeStats* stats = nullptr);

// A whole block (Qwen3-MoE): route x, then run the experts on the same x. y [n, hidden].
struct MoeBlock {
  MoeRouter router;
  MoeExperts experts;
};
void moe_block_forward(ThreadPool& pool, const MoeBlock& b, const float* x, int64_t n, float* y, Precision p,
                       MoeScratch& s, MoeStats* stats = nullptr);

}  // namespace rapid
