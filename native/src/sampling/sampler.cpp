#include "sampling/sampler.h"
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include "layers/vec_math.h"
#include "sampling/rng.h"

namespace rapid {

std::string validate_sample_params(const SampleParams& p, int64_t vocab) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) return "temperature must be a finite number >= 0";
  if (!(p.top_p > 0 && p.top_p <= 1)) return "topP must be in (0, 1]";
  if (p.top_k < 0) return "topK must be >= 0";
  if (!(p.min_p >= 0 && p.min_p <= 1)) return "minP must be in [0, 1]";
  if (!(p.repetition_penalty > 0) || !std::isfinite(p.repetition_penalty)) return "repetitionPenalty must be > 0";
  if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty)) return "penalties must be finite";
  for (const auto* list : {&p.prompt_tokens, &p.output_tokens})
    for (int32_t t : *list)
      if (t < 0 || t >= vocab)
        return "penalty token id " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")";
  if (!p.bitmask.empty() && int64_t(p.bitmask.size()) != (vocab + 31) / 32)
    return "bitmask has " + std::to_string(p.bitmask.size()) + " words, expected " + std::to_string((vocab + 31) / 32);
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
  return out;
}

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

  // Max and log-normalizer of the processed logits (logprob reference distribution).
  int32_t argmax = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[argmax]) argmax = int32_t(i);
  const float mx = logits[argmax];
  if (!std::isfinite(mx)) throw std::runtime_error("logits contain no finite value (NaN or all masked)");

  SampleOutput out;
  if (p.temperature == 0.0f) {
    out.token = argmax;
  } else {
    // Weights exp((l - mx)/T) for the whole vocabulary, vectorized; masked tokens get exactly 0.
    const float invT = 1.0f / p.temperature;
    std::vector<float> w(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) w[size_t(i)] = logits[i] == -INFINITY ? -INFINITY : logits[i] * invT;
    vec::exp_shift_sum(w.data(), vocab, mx * invT);
    for (int64_t i = 0; i < vocab; ++i)
      if (logits[i] == -INFINITY) w[size_t(i)] = 0.0f;

    std::vector<std::pair<float, int32_t>> cand;  // (weight, token) in draw order
    if (p.top_k > 0 || p.top_p < 1.0f) {
      std::vector<std::pair<float, int32_t>> all;  // (logit, token) of allowed tokens
      all.reserve(size_t(vocab));
      for (int64_t i = 0; i < vocab; ++i)
        if (logits[i] != -INFINITY) all.push_back({logits[i], int32_t(i)});
      int64_t k = p.top_k > 0 ? std::min<int64_t>(p.top_k, int64_t(all.size())) : int64_t(all.size());
      double z = 0;  // normalizer: over the top-k set (HF: top-k, then softmax for top-p), else all
      if (p.top_k == 0)
        for (float x : w) z += x;
      // top-p alone: grow a sorted prefix until it holds the nucleus, instead of sorting the vocabulary.
      int64_t sorted = p.top_k > 0 ? k : std::min<int64_t>(k, 256);
      for (;;) {
        std::partial_sort(all.begin(), all.begin() + sorted, all.end(), better);
        if (p.top_p >= 1.0f || sorted == k) break;
        double cum = 0;
        for (int64_t i = 0; i < sorted; ++i) cum += w[size_t(all[size_t(i)].second)] / z;
        if (cum >= double(p.top_p)) break;
        sorted = std::min<int64_t>(k, sorted * 4);
      }
      k = std::min(k, sorted);
      if (p.top_k > 0)
        for (int64_t i = 0; i < k; ++i) z += w[size_t(all[size_t(i)].second)];
      double before = 0;
      for (int64_t i = 0; i < k; ++i) {
        const float wi = w[size_t(all[size_t(i)].second)];
        if (p.top_p < 1.0f && i > 0 && before >= double(p.top_p)) break;  // nucleus: mass before i < top_p
        before += wi / z;
        cand.push_back({wi, all[size_t(i)].second});
      }
    } else {
      for (int64_t i = 0; i < vocab; ++i)
        if (w[size_t(i)] > 0.0f) cand.push_back({w[size_t(i)], int32_t(i)});
    }
    if (p.min_p > 0) {
      float wmax = 0;
      for (auto& c : cand) wmax = std::max(wmax, c.first);
      const float thr = p.min_p * wmax;  // min-p is a ratio to the top probability: normalizer cancels
      cand.erase(std::remove_if(cand.begin(), cand.end(), [&](auto& c) { return c.first < thr; }), cand.end());
    }
    double total = 0;
    for (auto& c : cand) total += c.first;
    const double u = u01 * total;
    double acc = 0;
    out.token = cand.back().second;
    for (auto& c : cand) {
      acc += c.first;
      if (u < acc) { out.token = c.second; break; }
    }
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
