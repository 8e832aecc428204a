// The draw of a sampled row (temperature > 0) from its weights, without a sort of the vocabulary: top-k, top-p and
// min-p select by rank in the sorted order (logit descending, id ascending) through a histogram of log-weight
// distance from the top; only the few bins a cut or the draw falls in are gathered and sorted.
#pragma once
#include <cstdint>
#include "sampling/sampler.h"

namespace rapid {

// logits [vocab]: the processed logits (masked tokens -inf; NaN is never a candidate); w [vocab]: their weights
// exp(l·inv_t - mx_t) (0 where masked), the top one 1; u in [0, 1). The token p's truncation and u pick with
// fixed-point weights (sampling/fixed_weight.h), the rules the CUDA sampler follows; -1 when no token has a
// positive weight.
int32_t rank_draw(const float* logits, const float* w, int64_t vocab, float inv_t, float mx_t, const SampleParams& p, double u);

}  // namespace rapid
