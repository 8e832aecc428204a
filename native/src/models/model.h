// The Model interface every family implements: config facts, weights, and one forward over a mixed
// batch (prefill chunks and decode tokens together) that returns logits only for the requested tokens.
// A model sees spans of tokens and KV blocks, never requests.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include "cpu/matmul.h"
#include "kv/kv_pool.h"
#include "layers/attention.h"
#include "layers/moe.h"
#include "vision/vision.h"

namespace rapid {

struct ModelInfo {
  std::string architecture;  // config.json architectures[0]
  std::string family;        // registry name
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int num_layers = 0;
  int64_t context_length = 0;  // max_position_embeddings
  std::string quantization;    // QuantConfig::describe()
  size_t weight_bytes = 0;     // bytes of mapped checkpoint files
  int pos_axes = 1;            // 1, or 3 for mRoPE (positions are [3, n] axis-major per row)
  std::vector<int> mrope_sections;
  bool accepts_embeds = false;  // a VLM checkpoint: rows may splice image embeddings
  bool embedding_only = false;  // an embedding model (Qwen3Model): no LM head; rows return hidden states, never sample
  int deepstack_layers = 0;     // Qwen3-VL: DeepStack rows each embedded token carries
};

// One token whose embedding is replaced by an image feature row (and, Qwen3-VL, DeepStack rows).
struct TokenEmbed {
  int64_t token = 0;                  // index into the batch [0, T)
  const float* data = nullptr;        // [hidden]
  const float* deepstack = nullptr;   // row k at deepstack + k * ds_stride, k < deepstack_layers
  int64_t ds_stride = 0;              // floats between consecutive DeepStack layers
};

// One forward's input: all rows' new tokens concatenated.
struct Batch {
  std::vector<int32_t> tokens;      // [T]
  std::vector<int32_t> positions;   // [pos_axes, T] axis-major
  std::vector<SeqSpan> spans;       // one per row, in batch order
  std::vector<int64_t> logit_rows;  // token indices into [0, T) whose logits are wanted
  std::vector<TokenEmbed> embeds;   // spliced image features, by batch token (borrowed from the plan)
  // Pooling: token indices into [0, T) whose hidden state after the final norm forward writes to `hidden`
  // [hidden_rows.size(), hidden_size] (an output the executor owns, like the logits buffer).
  std::vector<int64_t> hidden_rows;
  float* hidden = nullptr;
};

struct DecoderParts;

struct SampleParams;
class OpsModel;

// Logits that stay on a device after forward (CUDA): the executor fetches only the rows that must
// reach the host and samples the others where the logits are.
class DeviceLogits {
 public:
  virtual ~DeviceLogits() = default;
  // out[i, vocab] = logits of the forward's logit row rows[i]. Waits for the forward.
  virtual void copy_rows(const std::vector<int64_t>& rows, float* out) = 0;
  // tokens[i] = the token sample_token picks from logit row rows[i] under *params[i] (bitmask, penalties,
  // temperature, top-k/p, min-p, seed and counter; logprobs are not computed), -1 when no allowed finite logit.
  // Waits for the forward.
  virtual void sample(const std::vector<int64_t>& rows, const std::vector<const SampleParams*>& params, int32_t* tokens) = 0;
  // Whether the last forward had been enqueued ahead by the step before it (its batch was the one expected).
  virtual bool ahead() const { return false; }
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // The KV layout the pool must provide, one entry per decoder layer.
  virtual std::vector<KvLayerSpec> kv_layers() const = 0;
  // logits [batch.logit_rows.size(), vocab]. Writes the batch's K/V into the pool.
  virtual void forward(const Batch& batch, KvPool& kv, ThreadPool& pool, Precision p, float* logits) = 0;
  // The vision tower + projector of a VLM checkpoint (mapping the same files), else null.
  virtual const VisionEncoder* vision() const { return nullptr; }
  // Images through vision() on this model's backend (encode_images: batched forwards, one embedding per image,
  // in order): the CPU backend over `pool` here; a GPU model runs them on its own. Throws std::logic_error
  // without a vision tower, std::invalid_argument for a bad image.
  virtual std::vector<ImageEmbedding> encode_images(const std::vector<ImageInput>& images, ThreadPool& pool,
                                                    Precision p);
  // Expert work of the last forward (MoE models), else null: lets a step report what it read.
  virtual const MoeStats* moe_stats() const { return nullptr; }
  // The generic decoder's weights and config (families built by make_decoder), else null.
  virtual const DecoderParts* decoder_parts() const { return nullptr; }
  // Families written over the op backend (models/ops_model.h), else null: a device backend runs their forward.
  virtual OpsModel* ops_model() { return nullptr; }
  virtual const OpsModel* ops_model() const { return nullptr; }
  // Non-null: forward takes logits == nullptr and leaves them on the device, read through this.
  virtual DeviceLogits* device_logits() { return nullptr; }
};

}  // namespace rapid
