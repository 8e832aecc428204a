// Speculative verification of one row: its last k tokens are a draft d1..dk, so the forward gave logits at
// the k+1 positions [last, d1..dk]. Position i samples exactly as a plain decode of output token counter+i
// would (same counter-based draw, penalties over the output with d1..di appended), and the draft is
// accepted while the sample equals it. With a deterministic draft (q a point mass) this is standard
// speculative sampling: d is kept with probability p(d) and on rejection the token is drawn from p with d
// removed, renormalised; seeded outputs are the very tokens a run without a draft samples.
#pragma once
#include <cstdint>
#include <vector>
#include "sampling/sampler.h"

namespace rapid {

struct VerifyOutcome {
  int32_t accepted = 0;  // draft tokens kept, in [0, k]
  int32_t token = -1;    // the sample after them (the correction, or the bonus when all k are kept)
};

// The sampling parameters of verification position i (0..k): counter + i; the draft's first i tokens
// join the output tokens the penalties read.
SampleParams params_at(const SampleParams& p, const int32_t* draft, int64_t i);

// logits [k + 1, vocab] (read only); draft [k]. Throws as sample_token does.
VerifyOutcome verify_draft(const float* logits, int64_t vocab, const SampleParams& p, const int32_t* draft, int64_t k);

// The outcome from the k + 1 tokens already sampled at each position (a device sampled them all).
VerifyOutcome accept_prefix(const int32_t* sampled, const int32_t* draft, int64_t k);

}  // namespace rapid
