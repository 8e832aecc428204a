// Op test of sample_rows (cuda/sample.cu) against the CPU sampler (sampling/sampler.cpp, the reference):
// for every vocabulary size, logit distribution (spread, peaked, ties, all equal, masked, flat, NaN/inf) and setting
// (temperature, top-k, top-p, min-p, repetition/presence/frequency penalties, logit bias, greedy after them), the
// device's token is the CPU's for the same draw u, or, where the two differ, the CPU itself picks the device's
// token for a draw within 1e-6 of u (the rounding of the exponentials moves a boundary by that much). Also:
// one row alone == the same row in the full launch (bitwise), and so are launches of 16, 30 and 60 rows (a row
// split over 8, 4, 2 or 1 blocks), a second launch == the first, rows with nothing allowed give -1, and the launch
// time for 1 / 8 / 64 rows of a 151,936-token vocabulary, spread logits (N(0, 3)), peaked ones (one dominant token,
// as trained models' usually are) and flat ones (N(0, 0.6), as random-weight models'), next to argmax_rows':
// informational.
// Build: node scripts/build-cuda.mjs --tests (build/cuda/tests/cuda_sample_test).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>
#include "cuda/cuda_kernels.h"
#include "cuda_test_util.h"
#include "sample_grid.h"
#include "sampling/rng.h"
#include "sampling/sampler.h"

using namespace rapid;
namespace cu = rapid::cuda;
using namespace rapid::cuda::test;

namespace {

std::mt19937 g_rng(4321);

// One logits row of a named shape.
std::vector<float> make_row(int64_t vocab, int kind) {
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> x(size_t(vocab), 0.0f);
  for (float& v : x) v = 3.0f * n01(g_rng);
  switch (kind) {
    case 0: break;                                                  // spread
    case 1: for (float& v : x) v *= 0.3f; x[size_t(vocab / 3)] = 12.0f; break;  // one dominant token
    case 2: for (float& v : x) v = std::round(v * 2.0f) / 2.0f; break;          // many exact ties
    case 3: std::fill(x.begin(), x.end(), 0.25f); break;            // all equal: the order is the ids
    case 4:                                                         // -inf sprinkled (never candidates)
      for (int64_t i = 3; i < vocab; i += 5) x[size_t(i)] = -INFINITY;
      break;
    case 5:                                                         // NaN (also at id 0) and +inf
      for (int64_t i = 0; i < vocab; i += 37) x[size_t(i)] = NAN;
      x[5] = INFINITY;
      break;
    case 6: for (float& v : x) v *= 0.2f; break;                    // flat (random-weight models' logits)
    default: break;
  }
  return x;
}

struct Case {
  std::vector<float> logits;
  SampleParams p;
  std::string name;
};

std::string describe(const SampleParams& p) {
  char b[180];
  std::snprintf(b, sizeof b, "T=%g k=%d p=%g minp=%g rep=%g pres=%g freq=%g mask=%d bias=%zu", double(p.temperature), p.top_k,
                double(p.top_p), double(p.min_p), double(p.repetition_penalty), double(p.presence_penalty),
                double(p.frequency_penalty), p.bitmask.empty() ? 0 : 1, p.logit_bias.size());
  return b;
}

// Every row of cases through sample_rows in one launch, packed by sample_row_of as the decoder packs them.
std::vector<int32_t> run_device(const std::vector<Case>& cases, int64_t vocab, float* ms = nullptr, int reps = 1) {
  const int64_t n = int64_t(cases.size()), words = (vocab + 31) / 32;
  std::vector<float> logits;
  std::vector<cu::SampleRow> rows;
  std::vector<TokenPenalty> pens;
  std::vector<uint32_t> masks;
  int32_t pen_rows = 0, n_masks = 0;
  for (int64_t i = 0; i < n; ++i) {
    const SampleParams& p = cases[size_t(i)].p;
    logits.insert(logits.end(), cases[size_t(i)].logits.begin(), cases[size_t(i)].logits.end());
    int32_t mask = -1;
    if (!p.bitmask.empty()) {
      mask = n_masks++;
      masks.insert(masks.end(), p.bitmask.begin(), p.bitmask.end());
    }
    rows.push_back(cu::sample_row_of(p, i, mask, pens, pen_rows));
  }
  Dev<float> dl(logits), scratch(size_t(std::max<int32_t>(pen_rows, 1)) * size_t(vocab));
  Dev<cu::SampleRow> dr(rows);
  Dev<TokenPenalty> dp(pens);
  Dev<uint32_t> dm(masks.empty() ? std::vector<uint32_t>(size_t(words), 0u) : masks);
  Dev<int32_t> dt{size_t(n)};
  cu::sample_rows(dl.p, vocab, dr.p, n, dm.p, dp.p, scratch.p, dt.p, nullptr);
  device_sync();
  if (ms) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) cu::sample_rows(dl.p, vocab, dr.p, n, dm.p, dp.p, scratch.p, dt.p, nullptr);
    device_sync();
    *ms = float(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  return dt.download();
}

std::vector<Case> make_cases(int64_t vocab) {
  const int64_t words = (vocab + 31) / 32;
  std::vector<Case> cases;
  std::uniform_int_distribution<int64_t> any_id(0, vocab - 1);
  uint64_t counter = 1;
  auto add = [&](int kind, SampleParams p, const std::string& name) {
    p.seed = 0x5eed0000ull + uint64_t(cases.size());
    p.counter = counter++;
    cases.push_back({make_row(vocab, kind), p, name});
  };
  for (int kind : {0, 1, 2, 3, 4, 6}) {
    rapid::test::for_each_truncation({0.7f, 1.0f, 1.6f}, {0, 1, 3, 40, int(vocab) + 7}, {1.0f, 0.95f, 0.5f, 0.05f}, {0.0f, 0.1f},
                              [&](const SampleParams& p) { add(kind, p, "kind " + std::to_string(kind)); });
    // Masks: about a third allowed; only five allowed (one of them the row's max when it is not masked).
    for (int sparse = 0; sparse < 2; ++sparse)
      for (float tp : {1.0f, 0.9f}) {
        SampleParams p;
        p.temperature = 1.0f;
        p.top_p = tp;
        p.top_k = sparse ? 0 : 50;
        p.bitmask.assign(size_t(words), 0u);
        for (int64_t i = 0; i < vocab; ++i)
          if (sparse ? (i % (vocab / 5) == 7) : (g_rng() % 3 == 0)) p.bitmask[size_t(i >> 5)] |= 1u << (i & 31);
        add(kind, p, "mask kind " + std::to_string(kind));
      }
    // Penalties over a prompt and an output that repeats tokens; greedy after penalties too.
    for (int variant = 0; variant < 4; ++variant) {
      SampleParams p;
      p.temperature = variant == 3 ? 0.0f : 0.9f;
      p.top_p = variant == 1 ? 0.8f : 1.0f;
      p.top_k = variant == 2 ? 20 : 0;
      p.repetition_penalty = variant == 2 ? 1.0f : 1.3f;
      p.presence_penalty = variant == 0 ? 0.0f : 0.5f;
      p.frequency_penalty = variant == 0 ? 0.0f : 0.25f;
      for (int j = 0; j < 30; ++j) p.prompt_tokens.push_back(int32_t(any_id(g_rng)));
      for (int j = 0; j < 20; ++j) p.output_tokens.push_back(int32_t(any_id(g_rng) % 64));  // repeats
      p.output_tokens.push_back(int32_t(vocab / 3));  // the dominant token of kind 1
      add(kind, p, "penalties kind " + std::to_string(kind));
    }
    // Logit bias (token_penalties' list, as penalties): alone greedy and drawn, on penalised tokens, on masked ones.
    for (int variant = 0; variant < 4; ++variant) {
      SampleParams p;
      p.temperature = variant == 0 ? 0.0f : 0.9f;
      p.top_k = variant == 2 ? 20 : 0;
      p.top_p = variant == 1 ? 0.8f : 1.0f;
      for (int32_t t = 0; t < 64; t += 5) p.output_tokens.push_back(t);
      if (variant == 2) p.presence_penalty = 0.5f;  // the bias joins the penalty of tokens 0, 5, 10, ...
      p.logit_bias = {{0, 3.0f}, {10, -2.0f}, {int32_t(vocab / 3), -100.0f}, {int32_t(vocab / 2), 2.5f}, {int32_t(vocab - 1), 1.0f}};
      if (variant == 3) {  // a mask: +100 on a masked token stays masked
        p.bitmask.assign(size_t(words), 0u);
        for (int64_t i = 0; i < vocab; i += 3) p.bitmask[size_t(i >> 5)] |= 1u << (i & 31);
        p.logit_bias.back().bias = 100.0f;
        if ((vocab - 1) % 3 == 0) p.logit_bias.back().token = int32_t(vocab - 2);
      }
      add(kind, p, "logit bias kind " + std::to_string(kind));
    }
  }
  // NaN and +inf: the host sampler refuses such a row (or sorts NaN arbitrarily); the device never picks them.
  for (float tp : {1.0f, 0.9f}) {
    SampleParams p;
    p.temperature = 1.0f;
    p.top_p = tp;
    add(5, p, "robust NaN/inf");
  }
  // Nothing allowed: all masked; all NaN.
  {
    SampleParams p;
    p.temperature = 1.0f;
    p.bitmask.assign(size_t(words), 0u);
    add(0, p, "all masked");
    Case c{std::vector<float>(size_t(vocab), NAN), SampleParams{}, "all NaN"};
    c.p.temperature = 0.8f;
    c.p.top_p = 0.9f;
    cases.push_back(c);
  }
  return cases;
}

void test_vocab(int64_t vocab) {
  const std::vector<Case> cases = make_cases(vocab);
  const std::vector<int32_t> got = run_device(cases, vocab);
  const std::string vs = " vocab " + std::to_string(vocab);
  int exact = 0, boundary = 0, wrong = 0, errors_ok = 0, errors_bad = 0;
  std::string detail;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    std::vector<float> row(c.logits);
    int32_t want = -1;
    bool cpu_failed = false;
    try {
      want = sample_token(row.data(), vocab, c.p).token;
    } catch (const std::exception&) {
      cpu_failed = true;
    }
    // Rows with nothing allowed give -1; rows with NaN/+inf give a finite logit's id.
    if (c.name.rfind("all", 0) == 0 || c.name.rfind("robust", 0) == 0) {
      const bool ok = c.name.rfind("all", 0) == 0 ? got[i] == -1
                                                   : got[i] >= 0 && got[i] < vocab && std::isfinite(c.logits[size_t(got[i])]);
      if (ok) ++errors_ok;
      else ++errors_bad, detail += c.name + " got " + std::to_string(got[i]) + "; ";
      continue;
    }
    if (cpu_failed) {
      ++wrong;
      detail += c.name + " [" + describe(c.p) + "]: the CPU sampler threw; ";
      continue;
    }
    if (got[i] == want) {
      ++exact;
      continue;
    }
    const double u = uniform_draw(c.p.seed, c.p.counter);
    bool near = false;
    for (double d : {-1e-6, 1e-6}) {
      std::vector<float> r2(c.logits);
      near = near || (c.p.temperature > 0 && sample_token_at(r2.data(), vocab, c.p, std::clamp(u + d, 0.0, 0.999999999)).token == got[i]);
    }
    if (near) ++boundary;
    else {
      ++wrong;
      if (wrong <= 6) detail += c.name + " [" + describe(c.p) + "] got " + std::to_string(got[i]) + " want " + std::to_string(want) + "; ";
    }
  }
  char sum[160];
  std::snprintf(sum, sizeof sum, "%d exact, %d at a boundary, %d wrong, %d/%d no-token rows right", exact, boundary, wrong,
                errors_ok, errors_ok + errors_bad);
  report_bool("sample_rows == CPU sampler" + vs, wrong == 0 && errors_bad == 0 && boundary * 100 <= int(cases.size()),
              std::string(sum) + (detail.empty() ? "" : " | " + detail));

  // Batch invariance and determinism: a second full launch, and every 7th row alone.
  const std::vector<int32_t> again = run_device(cases, vocab);
  report_bool("sample_rows repeat launch identical" + vs, again == got);
  bool inv = true;
  for (size_t i = 0; i < cases.size(); i += 7) inv = inv && run_device({cases[i]}, vocab)[0] == got[i];
  report_bool("sample_rows row alone == in batch" + vs, inv);
  // Every split of a row: launches of 16, 30 and 60 rows take clusters of 8, 4 and 2 blocks per row on an H200
  // (the full launch one block per row).
  for (size_t chunk : {size_t(16), size_t(30), size_t(60)}) {
    bool same = true;
    for (size_t i = 0; i < cases.size(); i += chunk) {
      const std::vector<Case> sub(cases.begin() + i, cases.begin() + std::min(cases.size(), i + chunk));
      const std::vector<int32_t> t = run_device(sub, vocab);
      for (size_t j = 0; j < t.size(); ++j) same = same && t[j] == got[i + j];
    }
    report_bool("sample_rows launches of " + std::to_string(chunk) + " rows == full launch" + vs, same);
  }
}

void time_rows() {
  const int64_t vocab = 151936;
  for (int kind : {0, 1, 6}) {
    for (int setting = 0; setting < 4; ++setting) {
      for (int n : {1, 8, 64}) {
        std::vector<Case> cases;
        for (int i = 0; i < n; ++i) {
          SampleParams p;
          p.temperature = 0.8f;
          if (setting == 1) p.top_p = 0.9f;
          if (setting == 2) p.top_k = 40, p.top_p = 0.95f;
          if (setting == 3) p.top_p = 0.95f;
          p.seed = uint64_t(i);
          p.counter = 3;
          cases.push_back({make_row(vocab, kind), p, ""});
        }
        float ms = 0;
        run_device(cases, vocab, &ms, 20);
        if (setting == 0) {  // greedy's pick over the same rows, for comparison
          std::vector<float> logits;
          for (const Case& c : cases) logits.insert(logits.end(), c.logits.begin(), c.logits.end());
          Dev<float> dl(logits);
          Dev<int32_t> dt{size_t(n)};
          cu::argmax_rows(dl.p, n, vocab, nullptr, nullptr, dt.p, nullptr);
          device_sync();
          const auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < 20; ++i) cu::argmax_rows(dl.p, n, vocab, nullptr, nullptr, dt.p, nullptr);
          device_sync();
          const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 20;
          std::printf("TIME argmax_rows (greedy)                    %-7s vocab %lld rows %2d: %8.1f us per launch\n",
                      kind == 0 ? "spread" : kind == 1 ? "peaked" : "flat", (long long)vocab, n, us);
        }
        const char* what = setting == 0   ? "T 0.8"
                           : setting == 1 ? "T 0.8, top-p 0.9"
                           : setting == 2 ? "T 0.8, top-k 40, top-p 0.95"
                                          : "T 0.8, top-p 0.95";
        std::printf("TIME sample_rows %-28s %-7s vocab %lld rows %2d: %8.1f us per launch\n", what,
                    kind == 0 ? "spread" : kind == 1 ? "peaked" : "flat", (long long)vocab, n, ms * 1e3);
      }
    }
  }
}

}  // namespace

int main() {
  return run_op_test([] {
    for (int64_t vocab : {int64_t(1000), int64_t(32003), int64_t(151936)}) test_vocab(vocab);
    time_rows();
  });
}
