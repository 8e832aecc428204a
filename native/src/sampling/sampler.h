// Per-row token selection from one logits row: bitmask → penalties → logit bias → (greedy | temperature →
// top-k → top-p → min-p → counter-based draw), plus logprobs.
// Logprobs are the log-softmax of the logits after the bitmask, penalties and logit bias, before temperature
// and truncation (so greedy and sampled rows report comparable numbers, and a token forced by a +100 bias
// reports the distribution it was drawn from; masked tokens are -inf).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rapid {

// One entry of a row's logit bias (OpenAI `logit_bias`): `bias` is added to the token's logit.
struct TokenBias {
  int32_t token;
  float bias;
};

struct SampleParams {
  float temperature = 0;          // 0 = greedy (argmax, lowest id on ties)
  float top_p = 1;                // 1 = off
  int top_k = 0;                  // 0 = off
  float min_p = 0;                // 0 = off
  float repetition_penalty = 1;   // HF: over prompt + output tokens, logit>0 ? l/p : l*p
  float presence_penalty = 0;     // OpenAI: over output tokens, -= p if count > 0
  float frequency_penalty = 0;    // OpenAI: over output tokens, -= f * count
  uint64_t seed = 0;
  uint64_t counter = 0;
  int logprobs = -1;              // -1 none; 0 sampled token only; k > 0 plus top-k alternatives
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> output_tokens;
  std::vector<uint32_t> bitmask;  // empty = no grammar; else ceil(vocab/32) words, bit set = allowed
  std::vector<TokenBias> logit_bias;  // sparse, strictly ascending token ids; empty = none
};

struct SampleOutput {
  int32_t token = -1;
  float logprob = 0;                          // valid when logprobs >= 0
  std::vector<std::pair<int32_t, float>> top;  // [logprobs] best first (ties: lower id first)
};

// Whether any per-token adjustment applies: a penalty (they read the row's prompt and output tokens) or a logit
// bias. Both travel as token_penalties' list, so the device samplers handle them on one path.
inline bool has_penalties(const SampleParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f ||
         !p.logit_bias.empty();
}

// True when sample_token reduces to the (masked) argmax: greedy, no penalties, no logprobs. A device
// backend can then pick the token where the logits are.
inline bool is_plain_argmax(const SampleParams& p) { return p.temperature == 0.0f && p.logprobs < 0 && !has_penalties(p); }

// One token's penalty: the logit l becomes (repetition ? (l > 0 ? l / rp : l * rp) : l) - subtract, with rp the
// row's repetition_penalty. A plain struct: device backends copy the list as is.
struct TokenPenalty {
  int32_t token;
  int32_t repetition;  // 1 = the repetition penalty applies (the token is in the prompt or the output)
  float subtract;      // presence_penalty (if in the output) + frequency_penalty * its count in the output - bias
};

// p's penalties and logit bias as one entry per affected token, ascending ids (empty when p has neither). The
// bias is folded into `subtract`, so it is added after the repetition penalty.
std::vector<TokenPenalty> token_penalties(const SampleParams& p);

// The smallest temperature other than 0 (greedy): the request layer maps smaller ones to 0
// (src/engine/sampling-params.ts, SAMPLING_LIMITS.greedyBelowTemperature).
inline constexpr float kMinTemperature = 1e-5f;

// Checks ranges (token ids < vocab, bitmask length, finite params); returns "" or an error message.
std::string validate_sample_params(const SampleParams& p, int64_t vocab);

// logits [vocab] is modified in place (used as scratch). Throws std::runtime_error if the bitmask
// allows no token.
SampleOutput sample_token(float* logits, int64_t vocab, const SampleParams& p);

// sample_token with the uniform draw u in [0, 1) given (sample_token draws uniform_draw(p.seed, p.counter)):
// lets a test probe how close a draw is to a candidate boundary.
SampleOutput sample_token_at(float* logits, int64_t vocab, const SampleParams& p, double u);

// sample_token on a row it leaves as it is: read in place when nothing edits it (no bitmask, penalties or bias),
// else edited in a copy (the thread's own buffer).
SampleOutput sample_row(const float* logits, int64_t vocab, const SampleParams& p);

}  // namespace rapid
