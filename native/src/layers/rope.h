// Rotary position embeddings, rotate_half layout (dimension i pairs with i + rot_dim/2), applied
// at explicit per-token positions. inv_freq is precomputed once per distinct RoPE configuration.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rapid {

class Json;

struct RopeSpec {
  int head_dim = 0;
  int rot_dim = 0;                 // rotated leading dims (== head_dim unless partial rotary)
  std::vector<float> inv_freq;     // [rot_dim/2]
  float attention_scaling = 1.0f;  // multiplies cos and sin (1 for default/linear/llama3)
  std::string type = "default";    // for info/errors
  // Hook for mRoPE: frequency j takes its position from axis sections_axis[j] (empty = 1-D).
  std::vector<uint8_t> section_axis;
};

// default RoPE: inv_freq_j = theta^(-2j/rot_dim), divided by `linear_factor` (rope_type "linear").
RopeSpec rope_default(int head_dim, int rot_dim, double theta, double linear_factor);

// Builds the spec from a HF rope parameter object ({rope_type|type, rope_theta, factor, ...}),
// theta_default used when it has no rope_theta. Supports default, linear, llama3, yarn; throws otherwise.
RopeSpec rope_from_params(const Json* params, int head_dim, double theta_default, const std::string& where);

// mRoPE (Qwen2.5-VL / Qwen3-VL): maps each frequency to a position axis (0 T, 1 H, 2 W).
// Chunked (Qwen2.5-VL): j < s0 → T, j < s0+s1 → H, else W. Interleaved (Qwen3-VL,
// transformers apply_interleaved_mrope): j%3 == 1 && j < 3*s1 → H, j%3 == 2 && j < 3*s2 → W, else T.
// Throws unless the three sections sum to rot_dim/2.
void set_mrope_sections(RopeSpec& spec, const std::vector<int>& sections, bool interleaved, const std::string& where);

// cos/sin of every token's angles, computed once per step and shared by all layers using the spec.
struct RopeTable {
  int half = 0;
  int head_dim = 0;
  std::vector<float> cos, sin;  // [n, half]
};

// positions: [axes, n] axis-major; axis 0 only unless spec.section_axis maps frequencies to axes.
RopeTable rope_table(const RopeSpec& spec, const int32_t* positions, int64_t n);

// x [n, n_heads, head_dim]: rotates the leading rot_dim dims of each head of token t.
void apply_rope(float* x, int64_t n, int n_heads, const RopeTable& table);

}  // namespace rapid
