#include "step/verify.h"

namespace rapid {

SampleParams params_at(const SampleParams& p, const int32_t* draft, int64_t i) {
  SampleParams q = p;
  q.counter = p.counter + uint64_t(i);
  // Only penalties read the output list; leave it alone otherwise (it may be absent).
  if (i > 0 && has_penalties(p)) q.output_tokens.insert(q.output_tokens.end(), draft, draft + i);
  return q;
}

VerifyOutcome verify_draft(const float* logits, int64_t vocab, const SampleParams& p, const int32_t* draft, int64_t k) {
  VerifyOutcome out;
  for (int64_t i = 0; i <= k; ++i) {
    const int32_t t = i == 0 ? sample_row(logits, vocab, p).token
                             : sample_row(logits + i * vocab, vocab, params_at(p, draft, i)).token;
    if (i < k && t == draft[i]) continue;
    out.accepted = int32_t(i);
    out.token = t;
    return out;
  }
  return out;  // unreachable: position k always returns
}

VerifyOutcome accept_prefix(const int32_t* sampled, const int32_t* draft, int64_t k) {
  int64_t i = 0;
  while (i < k && sampled[i] == draft[i]) ++i;
  return {int32_t(i), sampled[i]};
}

}  // namespace rapid
