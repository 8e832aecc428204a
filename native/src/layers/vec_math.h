// Small vector primitives for the layers (dot, axpy, argmax, exp, GLU), with an AVX2+FMA path chosen at
// run time and a portable scalar path. One dispatch for the whole process, so every row of every
// batch goes through the same arithmetic (batch invariance).
#pragma once
#include <cstdint>
#include "layers/activations.h"

namespace rapid::vec {

// True when the AVX2+FMA path is in use.
bool simd_enabled();

float dot(const float* a, const float* b, int64_t n);
// y[i] += a * x[i]
void axpy(float a, const float* x, float* y, int64_t n);
// The first index of the largest value (NaN never wins; 0 when x[0] is NaN or n <= 0): the scan
// `a = 0; if (x[i] > x[a]) a = i` exactly, vectorized.
int64_t argmax(const float* x, int64_t n);
// x[i] = exp(x[i] - shift); returns the sum of the results.
float exp_shift_sum(float* x, int64_t n, float shift);
// w[i] = exp(float(x[i] * scale) - shift): the product rounded to float first, so the same bits as scaling x into
// w and then exp_shift_sum(w, n, shift), in one pass (the sampler's weights).
void scaled_exp(const float* x, float* w, int64_t n, float scale, float shift);
// gate[i] = act(gate[i]) * up[i]
void glu(float* gate, const float* up, int64_t n, Activation a);

}  // namespace rapid::vec
