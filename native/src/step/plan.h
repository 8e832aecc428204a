// The step contract in C++: a plain-data batch plan in, per-request results out, rows keyed by
// requestId. Mirrors NativeStepPlan / NativeStepResult of src/native/types.ts.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>
#include "sampling/sampler.h"

namespace rapid {

struct StepRow {
  std::string request_id;
  std::string error;                 // set by the plan's conversion: a malformed value; this row fails alone
  std::vector<int32_t> tokens;       // [n] new tokens this step
  std::vector<int32_t> positions;    // [pos_axes * n] axis-major
  std::vector<int32_t> block_table;  // KV blocks of the sequence, in order
  int64_t context_len = 0;           // tokens already in KV
  bool has_sample = false;
  SampleParams sample;
  bool mask_pending = false;         // sample.bitmask arrives after the forward (MaskSource)
  bool want_logits = false;          // raw logits of every token of the row
  int64_t draft = 0;                 // the row's last `draft` tokens are a speculative draft (step/verify.h)
  bool want_hidden = false;          // pooling: the hidden state (after the final norm) of the row's last token
  // Image embeddings: token embed_offsets[i] takes row i of embed_data instead of its token embedding.
  bool has_embeds = false;
  std::vector<int32_t> embed_offsets;  // [m] strictly increasing, < n
  std::vector<float> embed_data;       // [m, hidden]
  std::vector<float> embed_deepstack;  // [deepstack_layers, m, hidden] (Qwen3-VL), else empty
  std::vector<int32_t> bidirectional;  // [2k] pairs [start, end) of token offsets attending both ways
};

struct StepPlan {
  std::vector<StepRow> rows;
  // Set when some row's mask is pending: the step's id for the late supply and the bounded wait.
  bool pending_masks = false;
  uint64_t mask_step_id = 0;
  double mask_timeout_ms = 0;
};

struct StepRowResult {
  std::string request_id;
  bool has_token = false;
  int32_t token = -1;
  int32_t accepted = -1;      // draft rows: draft tokens kept before `token` (>= 0)
  bool has_logprob = false;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top_logprobs;
  std::vector<float> logits;  // [n * vocab] when want_logits
  std::vector<float> hidden;  // [hidden_size] when want_hidden
  std::string error;          // non-empty: this row failed (the others did not)
};

struct StepResult {
  std::vector<StepRowResult> rows;  // same order as the plan
  double forward_ms = 0;
  double sample_ms = 0;
  double mask_wait_ms = 0;          // time sampling waited for pending masks after the forward
  int64_t tokens = 0;               // tokens in the forward
  int64_t dispatches = 0;           // CPU thread-pool parallel regions the forward ran
  bool ahead = false;               // the forward was already enqueued ahead by the previous step (DeviceLogits::ahead)
  // MoE models: the forward's expert work (Model::moe_stats); expert_runs < 0 for other models.
  int64_t expert_runs = -1, active_experts = 0, routed_rows = 0, expert_bytes = 0;
};

}  // namespace rapid
