// The decoder-only transformer shared by the text families (Qwen2, Qwen3, Llama/Mistral, Gemma 3) and
// the text lanes of the VLMs (Qwen2.5-VL, Qwen3-VL, Gemma 3): pre-norm blocks of GQA attention over the
// paged KV pool and a gated MLP, plus spliced image embeddings, DeepStack rows and mRoPE positions.
// A family file reads its config into DecoderConfig, names its tensors, and the blocks here do the rest.
#pragma once
#include <memory>
#include <string>
#include <vector>
#include "format/json.h"
#include "format/safetensors.h"
#include "layers/linear.h"
#include "layers/mlp.h"
#include "layers/moe.h"
#include "layers/norm.h"
#include "layers/rope.h"
#include "models/model.h"
#include "quant/mlx_quant.h"
#include "vision/vision.h"

namespace rapid {

struct DecoderConfig {
  int64_t vocab = 0, hidden = 0, ffn = 0;
  int n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t max_positions = 0;
  float rms_eps = 1e-6f;
  bool norm_offset = false;     // Gemma: (1 + w)
  bool qkv_bias = false;        // Qwen2; Llama attention_bias
  bool o_bias = false;          // Llama attention_bias
  bool qk_norm = false;         // Qwen3, Gemma 3: RMSNorm over head_dim before RoPE
  bool sandwich_norms = false;  // Gemma 3: post_attention/pre_feedforward/post_feedforward norms
  Activation act = Activation::Silu;
  float embed_scale = 1.0f;     // Gemma: sqrt(hidden), rounded to the weight dtype
  float attn_scale = 0;         // multiplies q·k
  float final_softcap = 0;      // 0 = none; else logits = cap·tanh(logits/cap)
  std::vector<int> window;      // [n_layers] sliding window W, 0 = full attention
  std::vector<int> rope_of;     // [n_layers] index into ropes
  std::vector<RopeSpec> ropes;
  std::vector<int> mrope_sections;  // non-empty: positions are [3, n] (T, H, W) and ropes map sections to axes
  int deepstack_layers = 0;     // Qwen3-VL: decoder layers after which DeepStack features are added
  bool embedding_only = false;  // Qwen3Model (Qwen3-Embedding): no LM head; ModelInfo::embedding_only
  // Llama-4 query scaling (Ministral 3), after RoPE: q *= 1 + beta·ln(1 + floor(pos / period)); beta 0 = off.
  float q_pos_beta = 0;
  int64_t q_pos_period = 0;
  // Mixture of experts (Qwen3-MoE, Qwen3-VL-MoE): layers with moe_layer[l] != 0 run a MoeBlock (router
  // "<layer>.mlp.gate", experts "<layer>.mlp.experts" / "<layer>.mlp.switch_mlp") in place of the MLP.
  std::vector<uint8_t> moe_layer;  // [n_layers] or empty (no MoE)
  int64_t n_experts = 0, moe_ffn = 0;
  RouterOptions router;
};

// One decoder layer's weights (views into the mapped checkpoint; norms and biases converted to f32).
struct DecoderLayer {
  NormWeight input_norm;      // [hidden]
  NormWeight post_attn_norm;  // [hidden] Llama: before the MLP; Gemma: after attention
  NormWeight pre_ffn_norm;    // [hidden] Gemma only
  NormWeight post_ffn_norm;   // [hidden] Gemma only
  NormWeight q_norm, k_norm;  // [head_dim] Qwen3/Gemma
  Linear q, k, v, o;          // q [heads*hd, hidden], k/v [kv*hd, hidden], o [hidden, heads*hd]
  GatedMlp mlp;               // dense layers
  MoeBlock moe;               // MoE layers (moe_layer[l])
  bool is_moe = false;
};

// Everything a decoder forward reads, for backends that place the weights on another device (CUDA).
struct DecoderParts {
  const DecoderConfig* cfg = nullptr;
  const Weight* embed = nullptr;       // [vocab, hidden]
  const Weight* head = nullptr;        // [vocab, hidden] (the embedding when tied)
  const NormWeight* final_norm = nullptr;
  const std::vector<DecoderLayer>* layers = nullptr;
};

// Key prefixes found in the checkpoint: the text decoder ("model.") and the head ("lm_head").
struct DecoderNames {
  std::string model;  // e.g. "model", "language_model.model", "model.language_model"; "" for a bare Qwen3Model
  std::string head;   // e.g. "lm_head", "language_model.lm_head"; empty when tied/absent
};

// Picks the text-decoder prefix by probing for "<prefix>.embed_tokens.weight" and the head by probing
// for "<head>.weight" (or .scales); throws listing the tried prefixes when none matches.
DecoderNames find_decoder_names(const Checkpoint& ckpt, bool tie_word_embeddings);

// Reads the keys every family shares (sizes, eps, head_dim, max positions, layer_types windows).
// `c` is the text config; family-specific fields are filled by the caller.
DecoderConfig read_common_config(const Json& c, const std::string& arch);

// Builds the model: maps tensors, checks every shape, fills ModelInfo. `vision` (may be null) is the
// checkpoint's vision tower, reading the same mapped files.
std::unique_ptr<Model> make_decoder(std::shared_ptr<const Checkpoint> ckpt, const QuantConfig& qc, DecoderConfig cfg,
                                    const DecoderNames& names, ModelInfo info, std::unique_ptr<VisionEncoder> vision);

// "text_config" when present (multimodal wrappers), else the config itself.
const Json& text_config(const Json& config);

// The tail every family loader shares: tied or separate head (tie_word_embeddings from the top-level
// config, else the text config, else `tie_default`), the quantization config, the vision tower when
// `vision_family` is set and the checkpoint holds tower weights, then make_decoder.
std::unique_ptr<Model> finish_decoder(std::shared_ptr<const Checkpoint> ckpt, const Json& config, const Json& text,
                                      DecoderConfig d, const std::string& arch, const char* family, bool tie_default,
                                      const char* vision_family = nullptr);

// True when the checkpoint holds vision-tower tensors in any supported layout (vision_tower.*,
// model.vision_tower.*, visual.*, model.visual.*).
bool has_vision_tower(const Checkpoint& ckpt);

// The pooled output of a forward: out[i] = final_norm(h[rows[i]]) [rows.size(), hidden]. Nothing when rows is empty.
void final_hidden(ThreadPool& pool, const std::vector<float>& h, int64_t hidden, const std::vector<int64_t>& rows,
                  const NormWeight& final_norm, float* out);

// The head of a forward: only the `rows` of h [T, hidden] go through final_norm and head, giving
// logits [rows.size(), vocab]; then cap·tanh(logits/cap) when softcap > 0. Nothing when rows is empty.
void head_logits(ThreadPool& pool, const std::vector<float>& h, int64_t hidden, const std::vector<int64_t>& rows,
                 const NormWeight& final_norm, const Weight& head, int64_t vocab, float softcap, float* logits,
                 Precision prec);

// transformers 4.x Qwen configs without layer_types: with use_sliding_window, layers from
// max_window_layers on use the sliding window.
void apply_max_window_layers(const Json& c, DecoderConfig& d);

}  // namespace rapid
