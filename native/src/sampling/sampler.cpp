#include "sampling/sampler.h"
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include "layers/vec_math.h"
#include "sampling/rank_draw.h"
#include "sampling/rng.h"

namespace rapid {

std::string validate_sample_params(const SampleParams& p, int64_t vocab) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) return "temperature must be a finite number >= 0";
  // 1/T must stay far from float's range: a smaller T would turn the weights into NaN.
  if (p.temperature > 0 && p.temperature < kMinTemperature) {
    char floor[32];
    std::snprintf(floor, sizeof floor, "%g", double(kMinTemperature));
    return std::string("temperature must be 0 (greedy) or at least ") + floor;
  }
  if (!(p.top_p > 0 && p.top_p <= 1)) return "topP must be in (0, 1]";
  if (p.top_k < 0) return "topK must be >= 0";
  if (!(p.min_p >= 0 && p.min_p <= 1)) return "minP must be in [0, 1]";
  if (!(p.repetition_penalty > 0) || !std::isfinite(p.repetition_penalty)) return "repetitionPenalty must be a finite number > 0";
  if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty)) return "penalties must be finite";
  for (const auto* list : {&p.prompt_tokens, &p.output_tokens})
    for (int32_t t : *list)
      if (t < 0 || t >= vocab)
        return "penalty token id " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")";
  if (!p.bitmask.empty() && int64_t(p.bitmask.size()) != (vocab + 31) / 32)
    return "bitmask has " + std::to_string(p.bitmask.size()) + " words, expected " + std::to_string((vocab + 31) / 32);
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    const TokenBias& b = p.logit_bias[i];
    if (b.token < 0 || b.token >= vocab)
      return "logitBias token id " + std::to_string(b.token) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")";
    if (i > 0 && b.token <= p.logit_bias[i - 1].token) return "logitBias token ids must be strictly ascending";
    if (!std::isfinite(b.bias)) return "logitBias values must be finite";
  }
  return "";
}

std::vector<TokenPenalty> token_penalties(const SampleParams& p) {
  const bool rep = p.repetition_penalty != 1.0f, sub = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  std::vector<std::pair<int32_t, bool>> seen;  // (token, from the output)
  if (rep)
    for (int32_t t : p.prompt_tokens) seen.push_back({t, false});
  if (rep || sub)
    for (int32_t t : p.output_tokens) seen.push_back({t, true});
  std::sort(seen.begin(), seen.end());
  std::vector<TokenPenalty> out;
  for (size_t i = 0; i < seen.size();) {
    size_t j = i, in_output = 0;
    for (; j < seen.size() && seen[j].first == seen[i].first; ++j) in_output += seen[j].second ? 1 : 0;
    const float s = in_output > 0 && sub ? p.presence_penalty + p.frequency_penalty * float(in_output) : 0.0f;
    out.push_back({seen[i].first, rep ? 1 : 0, s});
    i = j;
  }
  if (p.logit_bias.empty()) return out;
  // Merge the bias (ascending ids, as `out`): a biased token gets its own entry or joins its penalty's.
  std::vector<TokenPenalty> merged;
  merged.reserve(out.size() + p.logit_bias.size());
  size_t a = 0;
  for (const TokenBias& b : p.logit_bias) {
    while (a < out.size() && out[a].token < b.token) merged.push_back(out[a++]);
    if (a < out.size() && out[a].token == b.token) {
      merged.push_back({b.token, out[a].repetition, out[a].subtract - b.bias});
      ++a;
    } else {
      merged.push_back({b.token, 0, -b.bias});
    }
  }
  merged.insert(merged.end(), out.begin() + std::ptrdiff_t(a), out.end());
  return merged;
}

// Penalties and logit bias (token_penalties).
static void apply_penalties(float* logits, const SampleParams& p) {
  for (const TokenPenalty& e : token_penalties(p)) {
    float& l = logits[e.token];
    if (e.repetition) l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    l -= e.subtract;
  }
}

// Descending by value, ascending id on ties: a total order, so results never depend on sort internals.
static bool better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

SampleOutput sample_token(float* logits, int64_t vocab, const SampleParams& p) {
  return sample_token_at(logits, vocab, p, uniform_draw(p.seed, p.counter));
}

// The selection itself, on a row whose bitmask, penalties and bias are applied (read only).
static SampleOutput sample_edited(const float* logits, int64_t vocab, const SampleParams& p, double u01);

SampleOutput sample_row(const float* logits, int64_t vocab, const SampleParams& p) {
  if (p.bitmask.empty() && !has_penalties(p)) return sample_edited(logits, vocab, p, uniform_draw(p.seed, p.counter));
  // The thread's own, kept between rows: a fresh vocab-sized vector per row cost page faults and a memset.
  thread_local std::vector<float> copy;
  copy.assign(logits, logits + vocab);
  return sample_token(copy.data(), vocab, p);
}

SampleOutput sample_token_at(float* logits, int64_t vocab, const SampleParams& p, double u01) {
  if (!p.bitmask.empty()) {
    bool any = false;
    for (int64_t i = 0; i < vocab; ++i) {
      if (!((p.bitmask[size_t(i >> 5)] >> (i & 31)) & 1u)) logits[i] = -INFINITY;
      else any = true;
    }
    if (!any) throw std::runtime_error("grammar bitmask allows no token");
  }
  apply_penalties(logits, p);
  return sample_edited(logits, vocab, p, u01);
}

static SampleOutput sample_edited(const float* logits, int64_t vocab, const SampleParams& p, double u01) {
  // Max and log-normalizer of the processed logits (logprob reference distribution).
  const int32_t argmax = int32_t(vec::argmax(logits, vocab));
  const float mx = logits[argmax];
  if (!std::isfinite(mx)) throw std::runtime_error("logits contain no finite value (NaN or all masked)");

  SampleOutput out;
  if (p.temperature == 0.0f) {
    out.token = argmax;
  } else {
    // Weights exp((l - mx)/T) for the whole vocabulary, vectorized. The buffers
    // are the thread's own and kept between calls: a fresh 600 KB vector per row cost more in page faults than
    // the arithmetic.
    const float invT = 1.0f / p.temperature;
    thread_local std::vector<float> w_buf;
    w_buf.resize(size_t(vocab));
    float* w = w_buf.data();
    // A masked logit's weight is exp's floor (~1e-38): fixed-point 0, and rank_draw never takes a masked token.
    vec::scaled_exp(logits, w, vocab, invT, mx * invT);

    out.token = rank_draw(logits, w, vocab, invT, mx * invT, p, u01);
    // NaN weights (a temperature below validate_sample_params' floor, extreme penalties) leave no candidate.
    if (out.token < 0) throw std::runtime_error("no token has a finite, positive weight at this temperature");
  }

  if (p.logprobs >= 0) {
    double z = 0;
    for (int64_t i = 0; i < vocab; ++i) z += std::exp(double(logits[i] - mx));
    const float lz = float(std::log(z)) + mx;
    out.logprob = logits[out.token] - lz;
    if (p.logprobs > 0) {
      std::vector<std::pair<float, int32_t>> all(static_cast<size_t>(vocab));
      for (int64_t i = 0; i < vocab; ++i) all[size_t(i)] = {logits[i], int32_t(i)};
      const int64_t k = std::min<int64_t>(p.logprobs, vocab);
      std::partial_sort(all.begin(), all.begin() + k, all.end(), better);
      for (int64_t i = 0; i < k; ++i) out.top.push_back({all[size_t(i)].second, all[size_t(i)].first - lz});
    }
  }
  return out;
}

}  // namespace rapid
