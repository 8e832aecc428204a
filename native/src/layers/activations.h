// Pointwise activations in f32, written to match PyTorch's formulas (not approximations of them).
#pragma once
#include <cmath>
#include <cstdint>

namespace rapid {

enum class Activation : uint8_t { Silu, GeluTanh };

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

// torch.nn.functional.gelu(x, approximate="tanh").
inline float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

inline const char* activation_name(Activation a) { return a == Activation::Silu ? "silu" : "gelu_tanh"; }

// gate[i] = act(gate[i]) * up[i] over n elements: the GLU product of SwiGLU/GeGLU.
inline void glu_inplace(float* gate, const float* up, int64_t n, Activation a) {
  if (a == Activation::Silu)
    for (int64_t i = 0; i < n; ++i) gate[i] = silu(gate[i]) * up[i];
  else
    for (int64_t i = 0; i < n; ++i) gate[i] = gelu_tanh(gate[i]) * up[i];
}

}  // namespace rapid
