#include "sampling/sampler.h"
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include "layers/vec_math.h"
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

// The number of entries of `all` (logit, token), moved to its front, whose weight w[token] lies in a binary-
// exponent bin at or above the first bin where the mass from the top reaches top_p of z, plus one bin of margin
// (all.size() when the weights hold a NaN or the mass is spread too thin for the bins to help).
static int64_t nucleus_superset(std::vector<std::pair<float, int32_t>>& all, const float* w, double z, float top_p) {
  constexpr int kBins = 64;  // bin b holds weights in [2^-(b+1), 2^-b); the last one everything smaller
  auto bin = [](float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    const int b = 127 - int(u >> 23);  // weights are in [0, 1]
    return b < 0 ? 0 : b >= kBins ? kBins - 1 : b;
  };
  double mass[kBins] = {};
  for (const auto& e : all) {
    const float x = w[e.second];
    if (std::isnan(x)) return int64_t(all.size());
    mass[bin(x)] += x;
  }
  double cum = 0;
  int last = kBins;
  for (int b = 0; b < kBins - 2; ++b) {
    cum += mass[b];
    if (cum >= double(top_p) * z * (1.0 + 1e-9)) {
      last = b + 1;
      break;
    }
  }
  if (last >= kBins - 1) return int64_t(all.size());
  // Stable: the entries stay in id order, which radix_sort_desc relies on for ties.
  return std::stable_partition(all.begin(), all.end(), [&](const auto& e) { return bin(w[e.second]) <= last; }) -
         all.begin();
}

// Sorts entries [0, n) of `all` into `better`'s order (logit descending, id ascending) by an LSD radix sort on
// order-preserving keys: entries that arrive in id order keep it among equal logits (the sort is stable). For a
// long nucleus, instead of partial sorts that grow 4x at a time. -0 ties +0 as in `better`; NaN sorts last.
static void radix_sort_desc(std::vector<std::pair<float, int32_t>>& all, int64_t n) {
  auto key = [](float v) -> uint32_t {  // ascending key = descending logit
    if (std::isnan(v)) return 0xffffffffu;
    if (v == 0.0f) v = 0.0f;
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    return ~((u & 0x80000000u) ? ~u : (u | 0x80000000u));
  };
  thread_local std::vector<std::pair<float, int32_t>> tmp;
  tmp.resize(size_t(n));
  std::pair<float, int32_t>* src = all.data();
  std::pair<float, int32_t>* dst = tmp.data();
  for (int shift = 0; shift < 32; shift += 8) {
    size_t count[257] = {};
    for (int64_t i = 0; i < n; ++i) ++count[((key(src[i].first) >> shift) & 255u) + 1];
    for (int b = 0; b < 256; ++b) count[b + 1] += count[b];
    for (int64_t i = 0; i < n; ++i) dst[count[(key(src[i].first) >> shift) & 255u]++] = src[i];
    std::swap(src, dst);
  }
  // Four passes: the result is back in `all`.
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
    // Weights exp((l - mx)/T) for the whole vocabulary, vectorized; masked tokens get exactly 0. The buffers
    // are the thread's own and kept between calls: a fresh 600 KB vector per row cost more in page faults than
    // the arithmetic.
    const float invT = 1.0f / p.temperature;
    thread_local std::vector<float> w_buf;
    w_buf.resize(size_t(vocab));
    float* w = w_buf.data();
    for (int64_t i = 0; i < vocab; ++i) w[i] = logits[i] == -INFINITY ? -INFINITY : logits[i] * invT;
    vec::exp_shift_sum(w, vocab, mx * invT);
    for (int64_t i = 0; i < vocab; ++i)
      if (logits[i] == -INFINITY) w[i] = 0.0f;

    if (p.top_k > 0 || p.top_p < 1.0f) {
      thread_local std::vector<std::pair<float, int32_t>> all;  // (logit, token) of allowed tokens
      thread_local std::vector<std::pair<float, int32_t>> cand;  // (weight, token) in draw order
      all.clear();
      cand.clear();
      for (int64_t i = 0; i < vocab; ++i)
        if (logits[i] != -INFINITY) all.push_back({logits[i], int32_t(i)});
      const int64_t n_all = int64_t(all.size());
      double z = 0;  // normalizer: over the top-k set (HF: top-k, then softmax for top-p), else all
      if (p.top_k == 0)
        for (int64_t i = 0; i < vocab; ++i) z += w[i];
      // top-p alone: the nucleus lies among the largest weights. A histogram of the weights by binary exponent
      // gives a floor above which more than top_p of the mass lies (plus one bin of margin); those entries are a
      // prefix of the sorted order (weights rise with logits), so sorting only them yields the same nucleus.
      int64_t range = n_all;  // entries [0, range) of `all` take part in the sort
      if (p.top_k == 0 && p.top_p < 1.0f) range = nucleus_superset(all, w, z, p.top_p);
      // Grow a sorted prefix until it holds the nucleus, instead of sorting the vocabulary; a long candidate
      // range is radix-sorted whole at once.
      constexpr int64_t kRadixFrom = 4096;
      // With top-k the range is every entry and one partial sort gives the k best (the nucleus is cut below).
      int64_t k = 0, sorted = 0;
      for (;;) {
        k = p.top_k > 0 ? std::min<int64_t>(p.top_k, range) : range;
        const bool radix = p.top_k == 0 && range > kRadixFrom;
        sorted = p.top_k > 0 || radix ? k : std::min<int64_t>(k, 256);
        if (radix) radix_sort_desc(all, range);
        double cum = 0;  // mass of the sorted prefix (top-p alone)
        for (;;) {
          if (!radix) std::partial_sort(all.begin(), all.begin() + sorted, all.begin() + range, better);
          if (p.top_k > 0 || p.top_p >= 1.0f) break;
          cum = 0;
          for (int64_t i = 0; i < sorted; ++i) cum += w[all[size_t(i)].second] / z;
          if (sorted == k || cum >= double(p.top_p)) break;
          sorted = std::min<int64_t>(k, sorted * 4);
        }
        // A superset that rounding left short of the nucleus: sort among every entry instead.
        if (range == n_all || cum >= double(p.top_p)) break;
        range = n_all;
      }
      k = std::min(k, sorted);
      if (p.top_k > 0)
        for (int64_t i = 0; i < k; ++i) z += w[all[size_t(i)].second];
      double before = 0;
      for (int64_t i = 0; i < k; ++i) {
        const float wi = w[all[size_t(i)].second];
        if (p.top_p < 1.0f && i > 0 && before >= double(p.top_p)) break;  // nucleus: mass before i < top_p
        before += wi / z;
        cand.push_back({wi, all[size_t(i)].second});
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
        if (u < acc) {
          out.token = c.second;
          break;
        }
      }
    } else {
      // No truncation by rank: the candidates are the positive weights in id order (min-p as a floor relative
      // to the largest), drawn in place.
      float thr = 0.0f;
      if (p.min_p > 0) {
        float wmax = 0;
        for (int64_t i = 0; i < vocab; ++i)
          if (w[i] > 0.0f) wmax = std::max(wmax, w[i]);
        thr = p.min_p * wmax;
      }
      const auto candidate = [&](int64_t i) { return w[i] > 0.0f && !(w[i] < thr); };
      double total = 0;
      int32_t last = -1;
      for (int64_t i = 0; i < vocab; ++i)
        if (candidate(i)) total += w[i], last = int32_t(i);
      // NaN weights (a temperature below validate_sample_params' floor, extreme penalties) leave no candidate.
      if (last < 0) throw std::runtime_error("no token has a finite, positive weight at this temperature");
      const double u = u01 * total;
      double acc = 0;
      out.token = last;
      for (int64_t i = 0; i < vocab; ++i) {
        if (!candidate(i)) continue;
        acc += w[i];
        if (u < acc) {
          out.token = int32_t(i);
          break;
        }
      }
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
