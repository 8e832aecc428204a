// The truncation settings both sampler suites sweep (the CPU's sampler_test.cpp, the GPU's cuda_sample_test.cu):
// f(params) for every temperature x top-k x top-p x min-p of the given lists, nested in that order.
#pragma once
#include <initializer_list>
#include "sampling/sampler.h"

namespace rapid::test {

template <class F>
void for_each_truncation(std::initializer_list<float> temperatures, std::initializer_list<int> top_ks,
                         std::initializer_list<float> top_ps, std::initializer_list<float> min_ps, F&& f) {
  for (float t : temperatures)
    for (int k : top_ks)
      for (float tp : top_ps)
        for (float mp : min_ps) {
          SampleParams p;
          p.temperature = t;
          p.top_k = k;
          p.top_p = tp;
          p.min_p = mp;
          f(p);
        }
}

}  // namespace rapid::test
