// The CPU sampler (sampling/sampler.cpp, rank_draw.cpp) against a plain restatement of its rules: the same
// weights, the whole vocabulary sorted by (logit descending, id ascending), top-k, then the nucleus (up to the
// first entry whose running fixed-point weight reaches ceil(top_p * z)), min-p, one draw. The sampler sorts only
// the bins of a log-weight histogram that a cut or the draw lands in; every token must equal the plain version's,
// for spread, flat, peaked, tied and signed-zero logits, large and small vocabularies. Also checks token_penalties (one entry per token, the counts, which penalties apply, logit bias).
// Build: g++ -O2 -std=c++20 -Wall -Wextra -Werror -Inative/src native/test/sampler_test.cpp
//          native/src/sampling/sampler.cpp native/src/sampling/rank_draw.cpp
//          native/src/layers/vec_math.cpp -o /tmp/sampler_test
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "check.h"
#include "layers/vec_math.h"
#include "sample_grid.h"
#include "sampling/fixed_weight.h"
#include "sampling/sampler.h"

using namespace rapid;

namespace {

// sample_token_at's rules without shortcuts (no bitmask, no penalties, no logprobs).
int32_t plain_sample(std::vector<float> l, const SampleParams& p, double u01) {
  const int64_t vocab = int64_t(l.size());
  int32_t argmax = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (l[size_t(i)] > l[size_t(argmax)]) argmax = int32_t(i);
  if (p.temperature == 0.0f) return argmax;
  const float mx = l[size_t(argmax)], invT = 1.0f / p.temperature;
  std::vector<float> w(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) w[size_t(i)] = l[size_t(i)] == -INFINITY ? -INFINITY : l[size_t(i)] * invT;
  vec::exp_shift_sum(w.data(), vocab, mx * invT);
  for (int64_t i = 0; i < vocab; ++i)
    if (l[size_t(i)] == -INFINITY) w[size_t(i)] = 0.0f;
  // Fixed-point weights (sampling/fixed_weight.h): every sum exact, in any order.
  std::vector<std::pair<uint64_t, int32_t>> cand;  // (weight, token) in draw order
  if (p.top_k > 0 || p.top_p < 1.0f) {
    std::vector<std::pair<float, int32_t>> all;
    for (int64_t i = 0; i < vocab; ++i)
      if (l[size_t(i)] > -INFINITY) all.push_back({l[size_t(i)], int32_t(i)});
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    const int64_t k = p.top_k > 0 ? std::min<int64_t>(p.top_k, int64_t(all.size())) : int64_t(all.size());
    uint64_t z = 0;
    for (int64_t j = 0; j < k; ++j) z += fixed_weight(w[size_t(all[size_t(j)].second)]);
    // The nucleus ends at the first entry whose running weight reaches ceil(top_p * z).
    const uint64_t t = p.top_p < 1.0f ? nucleus_target(p.top_p, z) : z;
    uint64_t through = 0;
    for (int64_t j = 0; j < k; ++j) {
      const float wj = w[size_t(all[size_t(j)].second)];
      through += fixed_weight(wj);
      cand.push_back({wj >= p.min_p ? fixed_weight(wj) : 0, all[size_t(j)].second});
      if (p.top_p < 1.0f && through >= t) break;
    }
  } else {
    for (int64_t i = 0; i < vocab; ++i)
      cand.push_back({w[size_t(i)] >= p.min_p ? fixed_weight(w[size_t(i)]) : 0, int32_t(i)});  // id order
  }
  uint64_t total = 0;
  for (auto& c : cand) total += c.first;
  const uint64_t target = draw_target(u01, total);
  uint64_t acc = 0;
  for (auto& c : cand) {
    acc += c.first;
    if (target < acc) return c.second;
  }
  return -1;
}

std::vector<float> make_row(std::mt19937& g, int64_t vocab, int kind) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(vocab));
  for (float& v : x) v = nd(g);
  switch (kind) {
    case 0: for (float& v : x) v *= 3.0f; break;                         // spread
    case 1: for (float& v : x) v *= 0.05f; break;                        // flat: the nucleus is most of the row
    case 2: for (float& v : x) v *= 0.5f; x[size_t(vocab / 3)] = 9.0f; break;  // peaked
    case 3: for (float& v : x) v = std::round(v * 2.0f) / 2.0f; break;   // many exact ties
    case 4: for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0) ? 0.0f : (i % 3 == 1 ? -0.0f : -1.0f); break;  // +-0
    case 5: for (size_t i = 0; i < x.size(); i += 4) x[i] = -INFINITY; break;  // masked (-inf)
    default: break;
  }
  return x;
}

void test_against_plain() {
  std::mt19937 g(11);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  int draws = 0, differ = 0, unedited_differ = 0;
  for (int64_t vocab : {int64_t(37), int64_t(1000), int64_t(151936)}) {
    for (int kind = 0; kind <= 5; ++kind) {
      const std::vector<float> row = make_row(g, vocab, kind);
      const auto draw = [&](const SampleParams& p) {
        const double u = u01(g);
        std::vector<float> a(row);
        const int32_t got = sample_token_at(a.data(), vocab, p, u).token;
        const int32_t want = plain_sample(row, p, u);
        // The read-only entry (in place here: no bitmask, penalties or bias) picks sample_token's token.
        std::vector<float> b(row);
        unedited_differ += sample_row(row.data(), vocab, p).token != sample_token(b.data(), vocab, p).token;
        ++draws;
        if (got != want && ++differ <= 5)
          std::fprintf(stderr, "  vocab %lld kind %d T %g k %d p %g min_p %g u %.6f: %d, plain %d\n", (long long)vocab, kind,
                       double(p.temperature), p.top_k, double(p.top_p), double(p.min_p), u, got, want);
      };
      rapid::test::for_each_truncation({0.6f, 1.0f, 1.8f}, {0, 1, 7, 64}, {1.0f, 0.995f, 0.9f, 0.4f}, {0.0f, 0.1f}, draw);
    }
  }
  CHECK(differ == 0, "%d of %d draws differ from the plain sampler", differ, draws);
  CHECK(unedited_differ == 0, "sample_row equals sample_token (%d of %d differ)", unedited_differ, draws);
  std::printf("sampler == plain rules: %d draws\n", draws);
}

void test_token_penalties() {
  SampleParams p;
  p.prompt_tokens = {5, 3, 5, 9};
  p.output_tokens = {3, 7, 3, 3};
  CHECK(token_penalties(p).empty(), "no penalty set: no entries");
  p.repetition_penalty = 1.5f;
  std::vector<TokenPenalty> e = token_penalties(p);
  CHECK(e.size() == 4 && e[0].token == 3 && e[1].token == 5 && e[2].token == 7 && e[3].token == 9, "repetition: prompt + output, once each");
  bool rep_only = true;
  for (const auto& x : e) rep_only = rep_only && x.repetition == 1 && x.subtract == 0.0f;
  CHECK(rep_only, "repetition alone subtracts nothing");
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  e = token_penalties(p);
  CHECK(e.size() == 2 && e[0].token == 3 && e[1].token == 7, "presence/frequency: output tokens only");
  CHECK(e.size() == 2 && e[0].subtract == 0.5f + 0.25f * 3.0f && e[1].subtract == 0.5f + 0.25f && e[0].repetition == 0,
        "presence + frequency x count");
  // Applied through the sampler: greedy picks the best logit after the penalties.
  std::vector<float> l = {0, 0, 0, 2.0f, 0, 0, 0, 1.9f, 0, 0};
  SampleParams q;
  q.output_tokens = {3};
  q.presence_penalty = 0.2f;
  CHECK(sample_token(l.data(), int64_t(l.size()), q).token == 7, "a presence penalty moves greedy off a used token");

  // Logit bias merges into the list: its own entry (no repetition) or subtracted from its token's penalty.
  p.logit_bias = {{0, 2.0f}, {3, 1.0f}, {8, -4.0f}};
  e = token_penalties(p);
  CHECK(e.size() == 4 && e[0].token == 0 && e[1].token == 3 && e[2].token == 7 && e[3].token == 8, "bias merged in id order");
  CHECK(e.size() == 4 && e[0].subtract == -2.0f && e[0].repetition == 0 && e[1].subtract == 0.5f + 0.25f * 3.0f - 1.0f &&
            e[2].subtract == 0.5f + 0.25f && e[3].subtract == 4.0f,
        "bias values: -bias alone, penalty - bias on a penalised token");
  SampleParams b;
  b.logit_bias = {{9, 100.0f}};
  CHECK(has_penalties(b) && !is_plain_argmax(b), "a bias alone is a per-token adjustment");
  std::vector<float> l2 = {0, 0, 0, 2.0f, 0, 0, 0, 1.9f, 0, 0};
  CHECK(sample_token(l2.data(), int64_t(l2.size()), b).token == 9, "+100 forces a token under greedy");
  CHECK(validate_sample_params(b, 10).empty(), "a valid bias");
  CHECK(!validate_sample_params(b, 9).empty(), "a bias id outside the vocabulary is refused");
  b.logit_bias = {{4, 1.0f}, {4, 1.0f}};
  CHECK(!validate_sample_params(b, 10).empty(), "repeated bias ids are refused");
}

// vec::argmax (greedy's pick) against the plain scan on every length up to 70 and a vocabulary-sized row, with
// ties, signed zeros, infinities and NaNs (also at index 0, which the scan then keeps).
void test_argmax() {
  std::mt19937 rng(7);
  const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, 1.0f};
  int mismatches = 0;
  for (int64_t n : {int64_t(1), int64_t(2), int64_t(7), int64_t(8), int64_t(9), int64_t(17), int64_t(70), int64_t(151936)})
    for (int trial = 0; trial < (n > 70 ? 40 : 400); ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      const int mode = trial % 4;  // 0: spread, 1: few distinct values (ties), 2: specials sprinkled, 3: all equal
      for (float& v : x) {
        v = mode == 1 ? float(rng() % 3) : std::normal_distribution<float>(0, 3)(rng);
        if (mode == 2 && rng() % 5 == 0) v = special[rng() % 7];
        if (mode == 3) v = -0.0f;
      }
      if (trial % 7 == 0) x[0] = NAN;
      if (trial % 11 == 0) x[size_t(rng() % uint64_t(n))] = -0.0f;
      int64_t want = 0;
      for (int64_t i = 1; i < n; ++i)
        if (x[size_t(i)] > x[size_t(want)]) want = i;
      mismatches += vec::argmax(x.data(), n) != want;
    }
  CHECK(mismatches == 0, "vec::argmax equals the plain scan (%d mismatches)", mismatches);
}


// fixed_weight on the host equals floor(w · 2^40) computed in double (the definition), clamped to [0, 2^40] with
// NaN, negatives and subnormals at 0, and so the device's bit-level version: every float exponent in range, its
// edges, and random mantissas.
void test_fixed_weight() {
  const auto want = [](float w) -> uint64_t {
    if (!(w > 0.0f) || w < 0x1p-126f) return 0;
    const double x = std::floor(double(w) * 0x1p40);
    return x >= 0x1p40 ? uint64_t(1) << kFixBits : uint64_t(x);
  };
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  int bad = 0, n = 0;
  const auto check = [&](float w) {
    ++n;
    if (fixed_weight(w) != want(w)) ++bad;
  };
  for (float w : {0.0f, -0.0f, -1.0f, 1.0f, 2.0f, 0x1p-40f, 0x1p-41f, 0x1.fffffep-1f, 0x1.fffffep-41f, 0x1p-126f,
                  0x1p-149f, INFINITY, -INFINITY, NAN})
    check(w);
  for (int e = -160; e <= 2; ++e)
    for (int k = 0; k < 64; ++k) check(std::ldexp(1.0f + float(bits(rng) & 0x7fffff) * 0x1p-23f, e));
  for (int k = 0; k < 100000; ++k) {
    float w;
    const uint32_t b = bits(rng) & 0x3f800000u ? bits(rng) & 0x3fffffffu : bits(rng);
    std::memcpy(&w, &b, sizeof w);
    check(w);
  }
  CHECK(bad == 0, "fixed_weight equals floor(w * 2^40) in [0, 2^40] (%d of %d differ)", bad, n);
}

// vec::scaled_exp is scaling into a buffer then exp_shift_sum, bit for bit (the sampler's weights before and
// after the fused pass), at lengths around the vector width.
void test_scaled_exp() {
  std::mt19937 g(5);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  int bad = 0, n_all = 0;
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(8), int64_t(9), int64_t(1000), int64_t(151936)}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = nd(g);
    x[0] = -INFINITY;
    for (float scale : {1.25f, 1.0f / 0.7f, 0.5f}) {
      const float shift = 9.0f * scale;
      std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) a[size_t(i)] = x[size_t(i)] * scale;
      vec::exp_shift_sum(a.data(), n, shift);
      vec::scaled_exp(x.data(), b.data(), n, scale, shift);
      bad += std::memcmp(a.data(), b.data(), size_t(n) * sizeof(float)) != 0;
      ++n_all;
    }
  }
  CHECK(bad == 0, "scaled_exp equals scale-then-exp_shift_sum bitwise (%d of %d rows differ)", bad, n_all);
}

// sample_row on rows the sampler edits (penalties, bias, a bitmask): the token of sample_token on a copy, and the
// row itself untouched.
void test_sample_row_edited() {
  std::mt19937 g(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int64_t vocab = 1000;
  std::vector<float> row(static_cast<size_t>(vocab));
  for (float& v : row) v = nd(g);
  const std::vector<float> before(row);
  int differ = 0, n = 0;
  for (int variant = 0; variant < 3; ++variant)
    for (uint64_t counter = 0; counter < 50; ++counter) {
      SampleParams p;
      p.temperature = 0.9f;
      p.top_p = 0.9f;
      p.seed = 17;
      p.counter = counter;
      if (variant == 0) {
        p.repetition_penalty = 1.3f;
        p.prompt_tokens = {1, 5, 9};
        p.output_tokens = {5, 7};
      } else if (variant == 1) {
        p.logit_bias = {{3, 5.0f}, {400, -2.0f}};
      } else {
        p.bitmask.assign(size_t((vocab + 31) / 32), 0x55555555u);
      }
      std::vector<float> copy(row);
      differ += sample_row(row.data(), vocab, p).token != sample_token(copy.data(), vocab, p).token;
      ++n;
    }
  CHECK(differ == 0, "sample_row equals sample_token on edited rows (%d of %d differ)", differ, n);
  CHECK(row == before, "sample_row leaves the row as it was");
}
}  // namespace

int main() {
  test_fixed_weight();
  test_scaled_exp();
  test_argmax();
  test_against_plain();
  test_sample_row_edited();
  test_token_penalties();
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
