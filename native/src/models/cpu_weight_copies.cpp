// Load-time CPU weight copies of a decoder (models/cpu_weight_copies.h).
#include "models/cpu_weight_copies.h"

#include "cpu/gemv_interleaved.h"
#include "models/decoder.h"

namespace rapid {

int64_t make_cpu_weight_copies(const Model& model, ThreadPool& pool, Precision p) {
  const DecoderParts* parts = model.decoder_parts();
  if (p != Precision::Fast || parts == nullptr || parts->layers == nullptr) return 0;
  int64_t made = 0;
  auto copy = [&](const Weight& w) { made += interleave_at_load(w, pool) ? 1 : 0; };
  for (const DecoderLayer& l : *parts->layers) {
    for (const Linear* lin : {&l.q, &l.k, &l.v, &l.o}) copy(lin->w);
    if (!l.is_moe)
      for (const Linear* lin : {&l.mlp.gate, &l.mlp.up, &l.mlp.down}) copy(lin->w);
  }
  if (parts->head != nullptr) copy(*parts->head);
  return made;
}

}  // namespace rapid
