// The generic decoder (models/decoder.*) on an NVIDIA GPU: the host model's weights are copied to the
// device once, the KV pool lives there, and one forward is one stream of kernel launches (captured
// into a CUDA graph per (tokens, logit rows) shape, so a decode step is a single launch). Logits stay
// on the device; the executor fetches only the rows it must sample on the host. While the host waits for a
// step's tokens and hands them back, the GPU may already run the next step (try_ahead): one more token of every
// row, its inputs those tokens, copied on the device. It is used only when the next step asks for exactly that
// batch and those draws, so results never depend on it; otherwise it is dropped (the rows' next slots it wrote
// are rewritten before anything reads them).
#include <cuda_runtime.h>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>
#include "cuda/ahead_policy.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_ops.h"
#include "cuda/cuda_ops_model.h"
#include "cuda/launch.cuh"
#include "cuda/matmul_mma.h"
#include "cuda/moe.h"
#include "cuda/rope_rows.h"
#include "cuda/tiled_codes.h"
#include "layers/rope.h"
#include "models/decoder.h"
#include "quant/mlx_quant.h"
#include "sampling/sampler.h"

namespace rapid::cuda {
namespace {

__global__ void add_kernel(float* __restrict__ h, const float* __restrict__ o, int64_t n) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) h[i] += o[i];
}

// h[n] += o[n] (the sandwich-norm residual adds of Gemma 3).
void add_inplace(float* h, const float* o, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  launch(add_kernel, dim3(unsigned((n + 255) / 256)), dim3(256), 0, s, "add_inplace", h, o, n);
}

// tokens[i] = the token the previous step sampled for its row i: src[i] >= 0 its argmax row, else drawn row -src[i]-1.
__global__ void ahead_tokens_kernel(int32_t* __restrict__ tokens, const int32_t* __restrict__ src,
                                    const int32_t* __restrict__ argmax, const int32_t* __restrict__ drawn, int64_t n) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t t = src[i] >= 0 ? argmax[src[i]] : drawn[-src[i] - 1];
  tokens[i] = t < 0 ? 0 : t;  // a failed draw (-1): any valid id; that row's next step cannot match it
}

// Device or page-locked host memory (pinned: the device reads and writes it directly, copy_bytes), freed on
// destruction; reserve() only ever grows it, and a regrow drops the old contents.
struct DeviceMemory {
  static cudaError_t alloc(void** p, size_t n) { return cudaMalloc(p, n); }
  static void free(void* p) { cudaFree(p); }
};
struct PinnedMemory {
  static cudaError_t alloc(void** p, size_t n) { return cudaHostAlloc(p, n, cudaHostAllocDefault); }
  static void free(void* p) { cudaFreeHost(p); }
};

template <class Memory>
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { release(); }
  void reserve(size_t bytes, const char* what = "allocate staging memory") {
    if (bytes <= bytes_) return;
    release();
    check(Memory::alloc(&p_, bytes), what);
    bytes_ = bytes;
  }
  void release() {
    if (p_) Memory::free(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  size_t bytes() const { return bytes_; }
  template <typename T> T* as(size_t byte_offset = 0) const { return reinterpret_cast<T*>(static_cast<char*>(p_) + byte_offset); }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};
using DeviceBuffer = Buffer<DeviceMemory>;
using PinnedBuffer = Buffer<PinnedMemory>;

struct DevLayer {
  const float *input_norm = nullptr, *post_attn_norm = nullptr, *pre_ffn_norm = nullptr, *post_ffn_norm = nullptr;
  const float *q_norm = nullptr, *k_norm = nullptr;  // [head_dim] or null
  DevWeight q, k, v, o, gate, up, down;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;  // [out] or null
  int act = 0;
  bool glu_fused = true;  // gate and up share one format: one fused launch; else two matmuls + glu
  bool rope_epilogue = false;  // q/k/v's launch applies RoPE and writes the KV pool (q, k rows in rope_pair_rows order)
  bool is_moe = false;  // the MLP is a mixture of experts (moe; gate/up/down unset)
  DevMoe moe;
};

// Per-layer quantization overrides can store gate and up differently (one 8-bit, one dense, ...).
bool same_format(const Weight& a, const Weight& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.bits == b.bits && a.group == b.group && a.out == b.out && a.in == b.in;
}

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

// Most rows a step enqueued ahead may have (RAPID_CUDA_AHEAD overrides; 0 turns it off).
constexpr int64_t kAheadMaxRows = 1024;

// Byte offsets of the per-step integer metadata inside one buffer (fixed while the capacities are).
struct MetaLayout {
  // Uploaded per step, in one copy: tokens .. floats (the prefix before mask_of; floats: the RoPE tables and q
  // scales, `fbytes`). mask_of is uploaded by a sampling with masks, and tokens_out is written on the device (a step
  // ahead reads the previous step's argmax tokens from it).
  size_t tokens = 0, slot = 0, table_off = 0, q_pos = 0, kv_end = 0, logit_rows = 0, tables = 0, ahead_src = 0,
         floats = 0, mask_of = 0, tokens_out = 0, total = 0;
  MetaLayout() = default;
  MetaLayout(int64_t Tc, int64_t Mc, int64_t Bc, size_t fbytes) {
    size_t o = 0;
    auto take = [&](int64_t n) { const size_t at = o; o += align_up(size_t(n) * sizeof(int32_t)); return at; };
    tokens = take(Tc);
    slot = take(Tc);
    table_off = take(Tc);
    q_pos = take(Tc);
    kv_end = take(Tc);
    logit_rows = take(Mc);
    tables = take(Bc);
    ahead_src = take(Tc);
    floats = o;
    o += align_up(fbytes);
    mask_of = take(Mc);
    tokens_out = take(Mc);
    total = o;
  }
};

// A batch that owns its block tables (Batch borrows them from the plan).
struct OwnedBatch {
  bool valid = false;
  std::vector<int32_t> tokens, positions;  // [T], [axes, T]
  std::vector<SeqSpan> spans;               // block_table -> tables[i]
  std::vector<std::vector<int32_t>> tables;
  std::vector<int64_t> logit_rows;
  void assign(const Batch& b) {
    valid = true;
    tokens = b.tokens;
    positions = b.positions;
    spans = b.spans;
    logit_rows = b.logit_rows;
    tables.resize(spans.size());
    for (size_t i = 0; i < spans.size(); ++i) {
      tables[i].assign(spans[i].block_table, spans[i].block_table + spans[i].n_blocks);
      spans[i].block_table = tables[i].data();
      spans[i].bidir = nullptr;
    }
  }
  Batch view() const {
    Batch b;
    b.tokens = tokens;
    b.positions = positions;
    b.spans = spans;
    b.logit_rows = logit_rows;
    return b;
  }
};

// The most keys a token of a batch with these spans sees: the end of its sequence's new tokens, or of a
// bidirectional span.
int64_t batch_keys(const std::vector<SeqSpan>& spans) {
  int64_t keys = 0;
  for (const SeqSpan& sp : spans) {
    keys = std::max(keys, sp.context_len + sp.n);
    for (int64_t j = 0; j < sp.n_bidir; ++j) keys = std::max(keys, sp.context_len + sp.bidir[2 * j + 1]);
  }
  return keys;
}

bool same_batch(const Batch& a, const OwnedBatch& b) {
  if (!b.valid || !a.embeds.empty() || !a.hidden_rows.empty() || a.tokens != b.tokens || a.positions != b.positions ||
      a.logit_rows != b.logit_rows || a.spans.size() != b.spans.size())
    return false;
  for (size_t i = 0; i < a.spans.size(); ++i) {
    const SeqSpan &x = a.spans[i], &y = b.spans[i];
    if (x.start != y.start || x.n != y.n || x.context_len != y.context_len || x.n_blocks != y.n_blocks ||
        x.n_bidir != 0 || !std::equal(x.block_table, x.block_table + x.n_blocks, y.block_table))
      return false;
  }
  return true;
}

// The fields a device draw depends on when no penalty applies (prompt and output tokens only feed penalties).
bool same_draw(const SampleParams& a, const SampleParams& b) {
  return a.temperature == b.temperature && a.top_p == b.top_p && a.top_k == b.top_k && a.min_p == b.min_p &&
         a.seed == b.seed && a.counter == b.counter && a.logprobs == b.logprobs && a.bitmask == b.bitmask &&
         !has_penalties(a) && !has_penalties(b);
}

// Host staging of one enqueued step (page-locked: copy_bytes kernels read and write it, the larger copies are
// async): its metadata with the RoPE tables, its sampling rows, and where its sampled tokens land. `done` is
// recorded after the step's last copy out of or into it.
struct Staging {
  PinnedBuffer meta, mask;
  cudaEvent_t done = nullptr;
};

// A sampling enqueued on the stream: where its tokens land in st->mask once st->done has fired.
struct PendingSample {
  Staging* st = nullptr;
  size_t o_tok = 0, o_dtok = 0;
  std::vector<int64_t> rows;
  std::vector<size_t> plain, drawn;  // indices into rows
};

class CudaDecoder final : public Model, public DeviceLogits {
 public:
  CudaDecoder(std::unique_ptr<Model> host, const KvPool& geometry, Precision precision)
      : host_(std::move(host)), parts_(*host_->decoder_parts()), cfg_(*parts_.cfg), precision_(precision),
        kv_dtype_(geometry.dtype()) {
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    const char* g = std::getenv("RAPID_CUDA_GRAPHS");
    use_graphs_ = !(g && std::string(g) == "0");
    ahead_max_rows_ = std::max(0L, env_long("RAPID_CUDA_AHEAD", kAheadMaxRows));
    const char* re = std::getenv("RAPID_CUDA_ROPE_EPILOGUE");
    rope_epilogue_on_ = !(re && std::string(re) == "0");
    for (Staging& st : stage_) check(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming), "cudaEventCreate");
    upload_weights();
    allocate_kv(geometry);
    // Split-K attention and the multi-block argmax: their scratch is taken now (never during a capture).
    paged_attention_reserve(stream_);
    argmax_reserve(stream_);
  }

  ~CudaDecoder() override {
    drop_graphs();
    if (stream_) {
      cudaStreamSynchronize(stream_);
      paged_attention_release(stream_);
      argmax_release(stream_);
      matmul_release(stream_);
    }
    for (void* p : allocations_) cudaFree(p);
    for (Staging& st : stage_)
      if (st.done) cudaEventDestroy(st.done);
    if (stream_) cudaStreamDestroy(stream_);
  }

  const ModelInfo& info() const override { return host_->info(); }
  std::vector<KvLayerSpec> kv_layers() const override { return host_->kv_layers(); }
  const VisionEncoder* vision() const override { return host_->vision(); }
  // The tower runs over the CUDA op backend (its weights uploaded on the first image, then kept).
  std::vector<ImageEmbedding> encode_images(const std::vector<ImageInput>& images, ThreadPool& pool,
                                            Precision p) override {
    if (!host_->vision()) return host_->encode_images(images, pool, p);  // the host's "no vision tower" error
    std::lock_guard<std::mutex> lk(tower_mu_);
    check(cudaSetDevice(0), "cudaSetDevice");
    if (!tower_ops_) tower_ops_ = make_cuda_ops();
    return rapid::encode_images(*host_->vision(), images, *tower_ops_, p);
  }
  DeviceLogits* device_logits() override { return this; }
  bool ahead() const override { return ahead_.live && ahead_.hit; }

  void forward(const Batch& b, KvPool& kv, ThreadPool& pool, Precision prec, float* logits) override {
    if (logits) throw std::logic_error("CUDA model: logits stay on the device (forward takes no host buffer)");
    if (prec != precision_)
      throw std::logic_error("CUDA model: loaded for one precision, asked to run another (its weight layout is per precision)");
    if (kv.num_blocks() != num_blocks_ || kv.block_size() != block_size_)
      throw std::logic_error("CUDA model: the KV pool geometry differs from the one the device storage was sized for");
    check(cudaSetDevice(0), "cudaSetDevice");
    const auto now = std::chrono::steady_clock::now();
    if (returned_) policy_.on_gap(std::chrono::duration<double, std::milli>(now - *returned_).count());
    returned_.reset();
    step_start_.reset();
    const int64_t T = int64_t(b.tokens.size()), m = int64_t(b.logit_rows.size());
    permuted_rows_ = false;
    for (int64_t i = 0; m == T && i < m; ++i) permuted_rows_ = permuted_rows_ || b.logit_rows[size_t(i)] != i;
    if (ahead_.live) {
      // The step enqueued ahead computed exactly this batch: its forward is this one (or is already running).
      if (!ahead_.hit && same_batch(b, ahead_.b)) {
        ahead_.hit = true;
        m_ = m;
        return;
      }
      drop_ahead(/*missed=*/true);
    }
    step_start_ = now;  // a step computed here (not ahead): its time is the policy's cost of a miss
    last_.valid = false;
    int64_t n_tables = 0;
    for (const SeqSpan& sp : b.spans) n_tables += sp.n_blocks;
    ensure_capacity(T, m, n_tables);
    m_ = m;
    upload_step(b, T, stage_[0]);

    const bool embeds = !b.embeds.empty();
    const int64_t keys = keys_bound(batch_keys(b.spans));
    if (embeds) upload_embeds(b);
    if (embeds) enqueue(T, m, int64_t(b.embeds.size()), math_mode(), keys);
    else launch_forward(T, m, keys);
    if (!b.hidden_rows.empty()) copy_hidden(b, pool);
    // A step that samples nothing (a prefill chunk) still reports its failures in this step.
    if (m == 0) check(cudaStreamSynchronize(stream_), "forward");
    // The next step may be enqueued ahead from it: only if every row samples (try_ahead's first condition), so a
    // prefill chunk's tokens are not copied for nothing.
    else if (!embeds && ahead_max_rows_ > 0 && m == int64_t(b.spans.size())) last_.assign(b);
  }

  // Pooled rows: their residual rows (h holds the whole step's stream after the last layer: the head reads it and
  // leaves it as is) come to the host and take the final norm there, as the CPU decoder's final_hidden does. A few
  // rows of hidden floats per step; waits for the forward.
  void copy_hidden(const Batch& b, ThreadPool& pool) {
    const int64_t H = cfg_.hidden, n = int64_t(b.hidden_rows.size()), T = int64_t(b.tokens.size());
    const float* h = scratch_.as<float>(off_h_);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = b.hidden_rows[size_t(i)];
      if (t < 0 || t >= T) throw std::out_of_range("CUDA model: hidden row out of range");
      check(cudaMemcpyAsync(b.hidden + i * H, h + t * H, size_t(H) * sizeof(float), cudaMemcpyDeviceToHost, stream_),
            "copy hidden rows to host");
    }
    check(cudaStreamSynchronize(stream_), "forward (hidden copy)");
    rms_norm_rows(pool, b.hidden, b.hidden, n, *parts_.final_norm);
  }

  void copy_rows(const std::vector<int64_t>& rows, float* out) override {
    const int64_t V = cfg_.vocab;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i] < 0 || rows[i] >= m_) throw std::out_of_range("CUDA model: logit row out of range");
      check(cudaMemcpyAsync(out + int64_t(i) * V, logits_.as<float>() + rows[i] * V, size_t(V) * sizeof(float),
                            cudaMemcpyDeviceToHost, stream_),
            "copy logits to host");
    }
    check(cudaStreamSynchronize(stream_), "forward (logit copy)");
  }

  // Plain greedy rows take the multi-block argmax; every other row one block of sample_rows. One upload of the
  // masks and the rows' parameters, one wait, two small downloads. Before the wait, the next step may be enqueued
  // ahead (try_ahead), so the GPU computes it while the host handles this one.
  void sample(const std::vector<int64_t>& rows, const std::vector<const SampleParams*>& params, int32_t* tokens) override {
    for (int64_t r : rows)
      if (r < 0 || r >= m_) throw std::out_of_range("CUDA model: logit row out of range");
    if (ahead_.live && ahead_.hit) {
      bool same = rows == ahead_.rows;
      for (size_t i = 0; same && i < rows.size(); ++i) same = same_draw(*params[i], ahead_.params[i]);
      if (same) {
        Ahead cur = std::move(ahead_);
        ahead_ = Ahead{};
        try_ahead(cur.b, rows, params, cur.ps);
        finish_sample(cur.ps, tokens);
        returned_ = std::chrono::steady_clock::now();
        return;
      }
      // The same forward with other draws: this step samples the logits the ahead step computed.
      last_ = std::move(ahead_.b);
      drop_ahead(/*missed=*/true, /*sync=*/false);
    }
    PendingSample ps = enqueue_sample(rows, params, stage_[0], m_);
    try_ahead(last_, rows, params, ps);
    finish_sample(ps, tokens);
    returned_ = std::chrono::steady_clock::now();
    if (step_start_) policy_.on_plain_step(std::chrono::duration<double, std::milli>(*returned_ - *step_start_).count());
  }

 private:
  // ---- load ----
  void* upload(const void* host, size_t bytes) {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc weights");
    allocations_.push_back(p);
    check(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice), "upload weights");
    return p;
  }
  // `perm`: the values in this order (perm[p] = the host index at p), as upload_weight's rows.
  const float* upload_floats(const std::vector<float>& v, const std::vector<int64_t>* perm = nullptr) {
    if (v.empty()) return nullptr;
    if (!perm) return static_cast<const float*>(upload(v.data(), v.size() * sizeof(float)));
    std::vector<float> o(perm->size());  // [out]
    for (size_t p = 0; p < perm->size(); ++p) o[p] = v[size_t((*perm)[p])];
    return static_cast<const float*>(upload(o.data(), o.size() * sizeof(float)));
  }
  // `tileable`: the kernels that read it take the tiled layout (the matmuls, embed_rows), so under Fast its codes and
  // scales are tiled.
  // `perm`: the rows in this order (perm[p] = the host row at row p), a copy of their own.
  DevWeight upload_weight(const Weight& w, bool tileable = true, const std::vector<int64_t>* perm = nullptr) {
    if (perm) return upload_permuted(w, *perm);
    // The tied head is the embedding: one device copy serves both (upload_weights says in which layout).
    for (const auto& [host, dev] : uploaded_)
      if (host == w.data) return dev;
    const DevWeight d = upload_copy(w, tileable);
    uploaded_.push_back({w.data, d});
    return d;
  }
  // A device copy of w of its own (no sharing with an earlier upload).
  DevWeight upload_copy(const Weight& w, bool tileable) {
    // The format check needs non-null scale pointers only: the host ones stand in until the upload.
    const bool tiled = tileable && precision_ == Precision::Fast && mma_format_supported(device_view(w, nullptr, w.scales, w.biases));
    return upload_for_matmul(w, tiled, [this](const void* p, size_t n) { return upload(p, n); });
  }
  DevWeight upload_permuted(const Weight& w, const std::vector<int64_t>& perm) {
    if (int64_t(perm.size()) != w.out) throw std::logic_error("upload_permuted: one index per row");
    const size_t code_row = weight_data_bytes(w) / size_t(w.out), scale_row = weight_scale_bytes(w) / size_t(w.out);
    std::vector<uint8_t> codes(code_row * size_t(w.out)), scales(scale_row * size_t(w.out)), biases(scales.size());
    for (size_t p = 0; p < perm.size(); ++p) {
      const size_t from = size_t(perm[p]);
      std::memcpy(codes.data() + p * code_row, static_cast<const uint8_t*>(w.data) + from * code_row, code_row);
      if (scale_row == 0) continue;
      std::memcpy(scales.data() + p * scale_row, static_cast<const uint8_t*>(w.scales) + from * scale_row, scale_row);
      std::memcpy(biases.data() + p * scale_row, static_cast<const uint8_t*>(w.biases) + from * scale_row, scale_row);
    }
    Weight c = w;
    c.data = codes.data();
    c.scales = scale_row ? scales.data() : nullptr;
    c.biases = scale_row ? biases.data() : nullptr;
    return upload_copy(c, /*tileable=*/true);  // its host copy dies here: never a dedup key
  }
  // Whether layer L's q/k/v launch can take the RoPE epilogue (RAPID_CUDA_ROPE_EPILOGUE=0 turns it off). Not for an
  // int8 pool: a code needs its whole head row's scale, which one epilogue thread does not see.
  bool rope_epilogue_for(const DecoderLayer& L, int layer) const {
    if (!rope_epilogue_on_ || precision_ != Precision::Fast || cfg_.qk_norm || cfg_.q_pos_beta != 0.0f ||
        kv_dtype_ == KvDtype::I8)
      return false;
    const int rot = cfg_.ropes[size_t(cfg_.rope_of[size_t(layer)])].rot_dim;
    // Host views, for the format only (nothing reads through them).
    const auto view = [](const Weight& w) { return device_view(w, w.data, w.scales, w.biases); };
    return can_rope_epilogue(view(L.q.w), view(L.k.w), view(L.v.w), cfg_.head_dim, rot, MathMode::Fast);
  }

  void upload_weights() {
    const int64_t free_before = free_bytes();
    if (int64_t(host_->info().weight_bytes) > free_before)
      throw std::runtime_error("the weights (" + std::to_string(host_->info().weight_bytes >> 20) +
                               " MiB) do not fit in the GPU's free memory (" + std::to_string(free_before >> 20) + " MiB)");
    // A tied embedding is tiled under Fast (embed_rows reads that layout too), so the head takes the tiled matmul
    // kernels; an embedding of its own stays row-major (only the gather reads it: tiling would buy nothing).
    embed_ = upload_weight(*parts_.embed, /*tileable=*/parts_.head->data == parts_.embed->data);
    head_ = upload_weight(*parts_.head);
    final_norm_ = upload_floats(parts_.final_norm->w);
    for (const DecoderLayer& L : *parts_.layers) {
      DevLayer d;
      d.rope_epilogue = rope_epilogue_for(L, int(layers_.size()));
      // Filled only under the epilogue; no vector temporaries in conditionals (g++ 13 -Wfree-nonheap-object).
      std::vector<int64_t> pq, pk;
      if (d.rope_epilogue) {
        pq = rope_pair_rows(L.q.w.out, cfg_.head_dim);
        pk = rope_pair_rows(L.k.w.out, cfg_.head_dim);
      }
      d.input_norm = upload_floats(L.input_norm.w);
      d.post_attn_norm = upload_floats(L.post_attn_norm.w);
      d.pre_ffn_norm = upload_floats(L.pre_ffn_norm.w);
      d.post_ffn_norm = upload_floats(L.post_ffn_norm.w);
      d.q_norm = upload_floats(L.q_norm.w);
      d.k_norm = upload_floats(L.k_norm.w);
      d.q = upload_weight(L.q.w, true, d.rope_epilogue ? &pq : nullptr);
      d.k = upload_weight(L.k.w, true, d.rope_epilogue ? &pk : nullptr);
      if (d.rope_epilogue) d.q.rope_rows = d.k.rope_rows = cfg_.head_dim;
      d.v = upload_weight(L.v.w);
      d.o = upload_weight(L.o.w);
      d.bq = upload_floats(L.q.bias, d.rope_epilogue ? &pq : nullptr);
      d.bk = upload_floats(L.k.bias, d.rope_epilogue ? &pk : nullptr);
      d.bv = upload_floats(L.v.bias);
      d.bo = upload_floats(L.o.bias);
      d.is_moe = L.is_moe;
      if (L.is_moe) {
        d.moe = upload_moe(L.moe, allocations_, precision_ == Precision::Fast);
        layers_.push_back(d);
        continue;
      }
      d.gate = upload_weight(L.mlp.gate.w);
      d.up = upload_weight(L.mlp.up.w);
      d.down = upload_weight(L.mlp.down.w);
      d.act = L.mlp.act == Activation::Silu ? 0 : 1;
      d.glu_fused = same_format(L.mlp.gate.w, L.mlp.up.w);
      split_glu_ |= !d.glu_fused;
      layers_.push_back(d);
    }
    uploaded_.clear();
  }
  // Per layer, in the CPU pool's order (kv/kv_pool.h): K codes, V codes [slots, n_kv, hd] of the pool's type, then for
  // int8 K and V scales [slots, n_kv] f16; each region starts on 256 bytes.
  void allocate_kv(const KvPool& g) {
    num_blocks_ = g.num_blocks();
    block_size_ = g.block_size();
    const size_t slots = size_t(num_blocks_) * size_t(block_size_);
    const size_t codes = align_up(slots * size_t(cfg_.n_kv_heads) * size_t(cfg_.head_dim) * kv_elem_bytes(kv_dtype_));
    const size_t scales = align_up(slots * size_t(cfg_.n_kv_heads) * kv_scale_bytes(kv_dtype_));
    const size_t per_layer = 2 * codes + 2 * scales;
    const size_t total = per_layer * size_t(cfg_.n_layers);
    const int64_t free = free_bytes();
    if (int64_t(total) > free - (int64_t(512) << 20))
      throw std::runtime_error("KV cache of " + std::to_string(total >> 20) + " MiB does not fit in the GPU's free memory (" +
                               std::to_string(free >> 20) + " MiB after the weights); lower --kv-cache-memory");
    void* p = nullptr;
    check(cudaMalloc(&p, total), "cudaMalloc KV cache");
    allocations_.push_back(p);
    // Zeroed so that a never-written slot is harmless (no NaN garbage reaches a softmax); finished before any
    // kernel of the non-blocking stream_ runs (the legacy stream's memset and weight DMA are not ordered with it).
    check(cudaMemset(p, 0, total), "cudaMemset KV cache");
    check(cudaDeviceSynchronize(), "cudaMemset KV cache (sync)");
    for (int l = 0; l < cfg_.n_layers; ++l) {
      char* base = static_cast<char*>(p) + per_layer * size_t(l);
      KvCache c;
      c.dtype = kv_dtype_;
      c.k = base;
      c.v = base + codes;
      if (scales > 0) {
        c.ks = reinterpret_cast<uint16_t*>(base + 2 * codes);
        c.vs = reinterpret_cast<uint16_t*>(base + 2 * codes + scales);
      }
      kv_.push_back(c);
    }
  }

  // ---- per step ----
  void ensure_capacity(int64_t T, int64_t m, int64_t n_tables) {
    if (T <= Tc_ && m <= Mc_ && n_tables <= Bc_) return;
    // Buffers move, so every captured graph (which holds their addresses) is dropped.
    drop_graphs();
    check(cudaStreamSynchronize(stream_), "sync before regrow");
    Tc_ = std::max<int64_t>({T, Tc_ * 2, 16});
    Mc_ = std::max<int64_t>({m, Mc_ * 2, 16});
    Bc_ = std::max<int64_t>({n_tables, Bc_ * 2, 256});
    const int64_t H = cfg_.hidden, qd = int64_t(cfg_.n_heads) * cfg_.head_dim, kd = int64_t(cfg_.n_kv_heads) * cfg_.head_dim;
    const size_t f = sizeof(float);
    off_h_ = 0;
    size_t o = align_up(size_t(Tc_ * H) * f);
    off_xn_ = o; o += align_up(size_t(Tc_ * H) * f);
    off_q_ = o; o += align_up(size_t(Tc_ * qd) * f);
    off_k_ = o; o += align_up(size_t(Tc_ * kd) * f);
    off_v_ = o; o += align_up(size_t(Tc_ * kd) * f);
    off_att_ = o; o += align_up(size_t(Tc_ * qd) * f);
    off_o_ = o; o += align_up(size_t(Tc_ * H) * f);
    off_g_ = o; o += align_up(size_t(Tc_ * cfg_.ffn) * f);
    off_u_ = o;  // the up projection of layers whose gate and up cannot run fused; none: no buffer
    if (split_glu_) o += align_up(size_t(Tc_ * cfg_.ffn) * f);
    off_sel_ = o; o += align_up(size_t(Mc_ * H) * f);
    scratch_.release();
    scratch_.reserve(o, "cudaMalloc activations");
    logits_.release();
    logits_.reserve(size_t(Mc_ * cfg_.vocab) * f, "cudaMalloc logits");
    // cos/sin [Tc, half] per RoPE spec, then q_scale [Tc]: offsets inside the metadata's floats.
    rope_off_.clear();
    size_t fo = 0;
    for (const RopeSpec& rs : cfg_.ropes) {
      const size_t n = align_up(size_t(Tc_) * size_t(rs.rot_dim / 2) * f);
      rope_off_.push_back({fo, fo + n});
      fo += 2 * n;
    }
    qscale_off_ = fo;
    fo += align_up(size_t(Tc_) * f);
    layout_ = MetaLayout(Tc_, Mc_, Bc_, fo);
    meta_.release();
    meta_.reserve(layout_.total, "cudaMalloc step metadata");
    moe_scratch_.release();  // the MoE layers' scratch for Tc_ tokens (every layer's block has one shape)
    for (const DevLayer& L : layers_)
      if (L.is_moe) moe_scratch_.reserve(std::max(moe_scratch_.bytes(), moe_scratch_bytes(L.moe, Tc_)), "cudaMalloc MoE scratch");
    for (Staging& st : stage_) st.meta.reserve(layout_.total);
    // Fast launches of more than one token prepare their activations in the stream's buffer: sized now, never in
    // a capture.
    matmul_reserve(stream_, Tc_, std::max<int64_t>({H, qd, cfg_.ffn}));
  }

  // The step's metadata and RoPE tables through `st` (first waiting for that staging's previous copies); src: a
  // step enqueued ahead, its tokens' places among the previous step's sampled tokens (ahead_tokens_kernel).
  void upload_step(const Batch& b, int64_t T, Staging& st, const std::vector<int32_t>* src = nullptr) {
    check(cudaEventSynchronize(st.done), "previous step");
    int32_t* tokens = st.meta.as<int32_t>(layout_.tokens);
    int32_t* slot = st.meta.as<int32_t>(layout_.slot);
    int32_t* table_off = st.meta.as<int32_t>(layout_.table_off);
    int32_t* q_pos = st.meta.as<int32_t>(layout_.q_pos);
    int32_t* kv_end = st.meta.as<int32_t>(layout_.kv_end);
    int32_t* logit_rows = st.meta.as<int32_t>(layout_.logit_rows);
    int32_t* tables = st.meta.as<int32_t>(layout_.tables);
    int64_t toff = 0;
    for (const SeqSpan& sp : b.spans) {
      std::memcpy(tables + toff, sp.block_table, size_t(sp.n_blocks) * sizeof(int32_t));
      for (int64_t i = 0; i < sp.n; ++i) {
        const int64_t t = sp.start + i, pos = sp.context_len + i;
        tokens[t] = b.tokens[size_t(t)];
        q_pos[t] = int32_t(pos);
        table_off[t] = int32_t(toff);
        slot[t] = int32_t(int64_t(sp.block_table[pos / block_size_]) * block_size_ + pos % block_size_);
        int64_t end = pos + 1;
        for (int64_t j = 0; j < sp.n_bidir; ++j)
          if (i >= sp.bidir[2 * j] && i < sp.bidir[2 * j + 1]) end = sp.context_len + sp.bidir[2 * j + 1];
        kv_end[t] = int32_t(end);
      }
      toff += sp.n_blocks;
    }
    for (size_t i = 0; i < b.logit_rows.size(); ++i) logit_rows[i] = int32_t(b.logit_rows[i]);
    if (src) std::memcpy(st.meta.as<int32_t>(layout_.ahead_src), src->data(), src->size() * sizeof(int32_t));

    for (size_t r = 0; r < cfg_.ropes.size(); ++r) {
      const RopeTable t = rope_table(cfg_.ropes[r], b.positions.data(), T);
      std::memcpy(st.meta.as<float>(layout_.floats + rope_off_[r].first), t.cos.data(), t.cos.size() * sizeof(float));
      std::memcpy(st.meta.as<float>(layout_.floats + rope_off_[r].second), t.sin.data(), t.sin.size() * sizeof(float));
    }
    if (cfg_.q_pos_beta != 0.0f) {
      float* qs = st.meta.as<float>(layout_.floats + qscale_off_);
      for (int64_t t = 0; t < T; ++t)
        qs[t] = 1.0f + cfg_.q_pos_beta * std::log(1.0f + std::floor(float(b.positions[size_t(t)]) / float(cfg_.q_pos_period)));
    }
    // One copy, by a kernel (copy_bytes: no copy-engine operation between the step's kernels). Not mask_of and
    // tokens_out: the sampling uploads the one, and the previous step's argmax may still be in them.
    copy_bytes(meta_.as<void>(), st.meta.as<void>(), layout_.mask_of, /*src_ready=*/true, stream_);
  }

  MathMode math_mode() const { return precision_ == Precision::Fast ? MathMode::Fast : MathMode::Exact; }

  // The attention launches' key bound for a step whose tokens see at most `keys` keys: a power of two from 256 up
  // (so a growing context changes the step's graph a few times only), at most the pool's slots.
  int64_t keys_bound(int64_t keys) const {
    int64_t bound = 256;
    while (bound < keys) bound *= 2;
    return std::min(bound, int64_t(num_blocks_) * block_size_);
  }

  // The forward of T tokens (m logit rows, no image features, at most `keys` keys per token: keys_bound) as
  // launches on stream_: a graph per step shape.
  void launch_forward(int64_t T, int64_t m, int64_t keys) {
    const MathMode mode = math_mode();
    if (!use_graphs_ || T > 512 || permuted_rows_) {  // graphs of m == T read the rows in order
      enqueue(T, m, 0, mode, keys);
      return;
    }
    const GraphKey key{T, m, mode, keys};
    auto it = graphs_.find(key);
    if (it == graphs_.end() && !eager_seen_.insert(key).second) {
      if (graphs_.size() >= 256) drop_graphs();  // bound the cache of step shapes
      it = graphs_.emplace(key, capture(T, m, mode, keys)).first;
    }
    // A shape's first forward runs eagerly: kernels make their one-time settings (shared-memory limits,
    // scratch) outside a capture; from its second forward on, the shape is one graph launch.
    if (it == graphs_.end()) enqueue(T, m, 0, mode, keys);
    else check(cudaGraphLaunch(it->second, stream_), "cudaGraphLaunch");
  }

  // Grows a device buffer the stream may still be reading (an enqueued step ahead): waits for the stream first.
  void grow(DeviceBuffer& buf, size_t bytes, const char* what) {
    if (bytes <= buf.bytes()) return;
    check(cudaStreamSynchronize(stream_), "sync before regrow");
    buf.reserve(bytes, what);
  }

  // Enqueues the sampling of logit rows `rows` of the last forward (m rows) through `st`, and the downloads of
  // its tokens; finish_sample waits for them.
  PendingSample enqueue_sample(const std::vector<int64_t>& rows, const std::vector<const SampleParams*>& params,
                               Staging& st, int64_t m) {
    const int64_t V = cfg_.vocab, words = (V + 31) / 32;
    PendingSample ps;
    ps.st = &st;
    ps.rows = rows;
    int64_t n_masks = 0;
    std::vector<TokenPenalty> pens;
    std::vector<SampleRow> srows;
    int32_t pen_rows = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const SampleParams& p = *params[i];
      n_masks += p.bitmask.empty() ? 0 : 1;
      if (is_plain_argmax(p)) {
        ps.plain.push_back(i);
        continue;
      }
      ps.drawn.push_back(i);
      srows.push_back(sample_row_of(p, rows[i], -1, pens, pen_rows));  // its mask row is set below
    }
    const int64_t nd = int64_t(ps.drawn.size()), np = int64_t(pens.size());
    // Host staging: mask_of [m] | argmax tokens [m] | drawn tokens [nd] | rows [nd] | penalties [np] | masks [n_masks, words]
    const size_t o_tok = size_t(m) * 4, o_dtok = align_up(o_tok + size_t(m) * 4), o_rows = o_dtok + align_up(size_t(nd) * 4);
    const size_t o_pens = o_rows + align_up(size_t(nd) * sizeof(SampleRow));
    const size_t o_masks = o_pens + align_up(size_t(np) * sizeof(TokenPenalty));
    const size_t bytes = o_masks + size_t(n_masks * words) * 4;
    ps.o_tok = o_tok;
    ps.o_dtok = o_dtok;
    check(cudaEventSynchronize(st.done), "previous sampling");  // st.mask's last copies
    st.mask.reserve(bytes);
    grow(mask_dev_, std::max<size_t>(bytes - o_dtok, 16), "cudaMalloc sampling rows");
    if (pen_rows > 0) grow(pen_scratch_, size_t(pen_rows) * size_t(V) * sizeof(float), "cudaMalloc penalty scratch");
    char* h = st.mask.as<char>();
    int32_t* mask_of = reinterpret_cast<int32_t*>(h);
    uint32_t* packed = reinterpret_cast<uint32_t*>(h + o_masks);
    for (int64_t r = 0; r < m; ++r) mask_of[r] = -1;
    int32_t k = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::vector<uint32_t>& mk = params[i]->bitmask;
      if (mk.empty()) continue;
      std::memcpy(packed + int64_t(k) * words, mk.data(), size_t(words) * sizeof(uint32_t));
      mask_of[rows[i]] = k++;
    }
    for (size_t j = 0; j < ps.drawn.size(); ++j) srows[j].mask = mask_of[rows[ps.drawn[j]]];
    std::memcpy(h + o_rows, srows.data(), srows.size() * sizeof(SampleRow));
    std::memcpy(h + o_pens, pens.data(), pens.size() * sizeof(TokenPenalty));
    // Device: the same bytes from o_dtok on (tokens of the drawn rows first).
    char* d = mask_dev_.as<char>() - o_dtok;
    if (bytes > o_rows)  // none for plain greedy rows: no copy between the head and the argmax
      check(cudaMemcpyAsync(d + o_rows, h + o_rows, bytes - o_rows, cudaMemcpyHostToDevice, stream_), "upload sampling rows");
    const uint32_t* d_masks = reinterpret_cast<const uint32_t*>(d + o_masks);
    if (!ps.plain.empty()) {
      int32_t* d_mask_of = n_masks > 0 ? meta_.as<int32_t>(layout_.mask_of) : nullptr;  // null: no row has a mask
      if (d_mask_of)
        copy_bytes(d_mask_of, mask_of, size_t(m) * sizeof(int32_t), /*src_ready=*/true, stream_);
      argmax_rows(logits_.as<float>(), m, V, d_masks, d_mask_of, meta_.as<int32_t>(layout_.tokens_out), stream_);
      copy_bytes(h + o_tok, meta_.as<int32_t>(layout_.tokens_out), size_t(m) * sizeof(int32_t), false, stream_);
    }
    if (nd > 0) {
      int32_t* d_tok = reinterpret_cast<int32_t*>(d + o_dtok);
      sample_rows(logits_.as<float>(), V, reinterpret_cast<const SampleRow*>(d + o_rows), nd, d_masks,
                  reinterpret_cast<const TokenPenalty*>(d + o_pens), pen_scratch_.as<float>(), d_tok, stream_);
      copy_bytes(h + o_dtok, d_tok, size_t(nd) * sizeof(int32_t), false, stream_);
    }
    check(cudaEventRecord(st.done, stream_), "record sampling");
    return ps;
  }

  // Waits for a sampling's tokens: tokens[i] for its rows[i]. The step enqueued ahead (if any) takes them as its
  // expected input tokens.
  void finish_sample(const PendingSample& ps, int32_t* tokens) {
    check(cudaEventSynchronize(ps.st->done), "forward (sampling)");
    const char* h = ps.st->mask.as<char>();
    const int32_t* argmax_tokens = reinterpret_cast<const int32_t*>(h + ps.o_tok);
    const int32_t* drawn_tokens = reinterpret_cast<const int32_t*>(h + ps.o_dtok);
    for (size_t i : ps.plain) tokens[i] = argmax_tokens[ps.rows[i]];
    for (size_t j = 0; j < ps.drawn.size(); ++j) tokens[ps.drawn[j]] = drawn_tokens[j];
    if (ahead_.live && !ahead_.hit)
      for (size_t i = 0; i < ahead_.b.tokens.size(); ++i) ahead_.b.tokens[i] = tokens[i];
  }

  // Enqueues the step that continues `prev` (whose sampling `ps` is enqueued) by one token per row, before its
  // tokens reach the host: its input tokens are copied on the device. Only for a batch whose every row sampled its
  // last token here with a draw that needs no token history (no grammar mask, no penalties), at most ahead_max_rows_
  // rows, and when the policy expects it to pay. Its KV writes go to each row's next slot, which only that row's next
  // token would write; if the next step differs, it is dropped and the asked-for step runs after it (a wasted step).
  void try_ahead(const OwnedBatch& prev, const std::vector<int64_t>& rows, const std::vector<const SampleParams*>& params,
                 const PendingSample& ps) {
    policy_.on_step();
    if (!policy_.worth()) return;
    const size_t S = prev.spans.size();
    if (!prev.valid || S == 0 || int64_t(S) > ahead_max_rows_ || rows.size() != S || prev.logit_rows.size() != S) return;
    const int64_t Tp = int64_t(prev.tokens.size());
    const int64_t axes = Tp > 0 ? int64_t(prev.positions.size()) / Tp : 0;
    if (axes < 1) return;
    int64_t n_tables = 0;
    for (size_t i = 0; i < S; ++i) {
      const SeqSpan& sp = prev.spans[i];
      const int64_t last = sp.start + sp.n - 1;
      if (rows[i] != int64_t(i) || prev.logit_rows[i] != last || sp.n_bidir != 0) return;
      if (sp.context_len + sp.n >= sp.n_blocks * block_size_) return;  // its next slot is in no block yet
      const SampleParams& p = *params[i];
      if (!p.bitmask.empty() || has_penalties(p) || p.logprobs >= 0) return;
      n_tables += sp.n_blocks;
    }
    if (int64_t(S) > Tc_ || int64_t(S) > Mc_ || n_tables > Bc_) return;  // growing would move buffers in use
    // Only a shape already captured: a capture (or dropping the graph cache) is for a stream with no step in flight.
    const int64_t keys = keys_bound(batch_keys(prev.spans) + 1);
    if (use_graphs_ && S <= 512 && graphs_.find(GraphKey{int64_t(S), int64_t(S), math_mode(), keys}) == graphs_.end()) return;

    Ahead a;
    a.live = true;
    OwnedBatch& nb = a.b;
    nb.valid = true;
    nb.tokens.assign(S, -1);  // known once `ps` is done
    nb.positions.resize(size_t(axes) * S);
    nb.tables = prev.tables;
    nb.spans.resize(S);
    nb.logit_rows.resize(S);
    std::vector<int32_t> src(S);
    for (size_t i = 0; i < S; ++i) {
      const SeqSpan& sp = prev.spans[i];
      const int64_t last = sp.start + sp.n - 1;
      for (int64_t x = 0; x < axes; ++x) nb.positions[size_t(x) * S + i] = prev.positions[size_t(x * Tp + last)] + 1;
      SeqSpan& ns = nb.spans[i];
      ns.start = int64_t(i);
      ns.n = 1;
      ns.context_len = sp.context_len + sp.n;
      ns.block_table = nb.tables[i].data();
      ns.n_blocks = sp.n_blocks;
      nb.logit_rows[i] = int64_t(i);
      src[i] = -1;
    }
    for (size_t i : ps.plain) src[i] = int32_t(ps.rows[i]);
    for (size_t j = 0; j < ps.drawn.size(); ++j) src[ps.drawn[j]] = -int32_t(j) - 1;
    a.rows = rows;
    std::vector<const SampleParams*> pp(S);
    a.params.resize(S);
    for (size_t i = 0; i < S; ++i) {
      const SampleParams& p = *params[i];
      SampleParams& q = a.params[i];
      q.temperature = p.temperature;
      q.top_p = p.top_p;
      q.top_k = p.top_k;
      q.min_p = p.min_p;
      q.seed = p.seed;
      q.counter = p.counter + 1;
      q.logprobs = p.logprobs;
      pp[i] = &q;
    }

    Staging& st = stage_[1 + ahead_flip_];
    ahead_flip_ ^= 1;
    upload_step(nb.view(), int64_t(S), st, &src);
    const int32_t* drawn = mask_dev_.as<int32_t>();  // enqueue_sample's drawn tokens come first in mask_dev_
    launch(ahead_tokens_kernel, dim3(unsigned((S + 127) / 128)), dim3(128), 0, stream_, "ahead tokens launch",
           meta_.as<int32_t>(layout_.tokens), static_cast<const int32_t*>(meta_.as<int32_t>(layout_.ahead_src)),
           static_cast<const int32_t*>(meta_.as<int32_t>(layout_.tokens_out)), drawn, int64_t(S));
    launch_forward(int64_t(S), int64_t(S), keys);
    a.ps = enqueue_sample(rows, pp, st, int64_t(S));
    ahead_ = std::move(a);
  }

  // Forgets the step enqueued ahead (its work stays on the stream; `sync` waits for it). A miss counts in the policy.
  void drop_ahead(bool missed, bool sync = true) {
    ahead_ = Ahead{};
    if (missed) policy_.on_miss();
    if (sync) check(cudaStreamSynchronize(stream_), "step ahead");
  }

  // Image features [ne, H] and DeepStack rows [deepstack_layers, ne, H], with their batch token indices.
  void upload_embeds(const Batch& b) {
    const int64_t ne = int64_t(b.embeds.size()), H = cfg_.hidden, L = cfg_.deepstack_layers;
    const size_t bytes = align_up(size_t(ne) * sizeof(int32_t)) + size_t(ne * H * (1 + L)) * sizeof(float);
    embeds_host_.reserve(bytes);
    embeds_dev_.reserve(bytes, "cudaMalloc image embeddings");
    int32_t* rows = embeds_host_.as<int32_t>();
    float* data = embeds_host_.as<float>(align_up(size_t(ne) * sizeof(int32_t)));
    for (int64_t e = 0; e < ne; ++e) {
      const TokenEmbed& te = b.embeds[size_t(e)];
      rows[e] = int32_t(te.token);
      std::memcpy(data + e * H, te.data, size_t(H) * sizeof(float));
      for (int64_t l = 0; l < L; ++l)
        std::memcpy(data + (1 + l) * ne * H + e * H, te.deepstack + l * te.ds_stride, size_t(H) * sizeof(float));
    }
    check(cudaMemcpyAsync(embeds_dev_.as<void>(), embeds_host_.as<void>(), bytes, cudaMemcpyHostToDevice, stream_),
          "upload image embeddings");
  }

  cudaGraphExec_t capture(int64_t T, int64_t m, MathMode mode, int64_t keys) {
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      enqueue(T, m, 0, mode, keys);
    } catch (...) {
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(stream_, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    cudaGraph_t g = nullptr;
    check(cudaStreamEndCapture(stream_, &g), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    check(e, "cudaGraphInstantiate");
    return exec;
  }

  void drop_graphs() {
    for (auto& [shape, exec] : graphs_)
      if (exec) cudaGraphExecDestroy(exec);
    graphs_.clear();
    eager_seen_.clear();
  }

  // The whole forward as launches on stream_: embeddings, every layer, the head over the logit rows. `keys` bounds
  // the keys a token sees (shapes the attention launches only).
  void enqueue(int64_t T, int64_t m, int64_t ne, MathMode mode, int64_t keys) {
    const DecoderConfig& d = cfg_;
    const int64_t H = d.hidden, qd = int64_t(d.n_heads) * d.head_dim, kd = int64_t(d.n_kv_heads) * d.head_dim;
    float* h = scratch_.as<float>(off_h_);      // [T, H] residual stream
    float* xn = scratch_.as<float>(off_xn_);    // [T, H] normed sub-block input
    float* q = scratch_.as<float>(off_q_);      // [T, n_heads, hd]
    float* k = scratch_.as<float>(off_k_);      // [T, n_kv, hd]
    float* v = scratch_.as<float>(off_v_);      // [T, n_kv, hd]
    float* att = scratch_.as<float>(off_att_);  // [T, n_heads, hd]
    float* o = scratch_.as<float>(off_o_);      // [T, H]
    float* g = scratch_.as<float>(off_g_);      // [T, ffn]
    float* u = scratch_.as<float>(off_u_);      // [T, ffn] up projection when not fused
    float* sel = scratch_.as<float>(off_sel_);  // [m, H]
    float* logits = logits_.as<float>();        // [m, vocab]
    const int32_t* erows = embeds_dev_.as<int32_t>();
    const float* edata = ne ? embeds_dev_.as<float>(align_up(size_t(ne) * sizeof(int32_t))) : nullptr;
    const float* qscale = d.q_pos_beta != 0.0f ? meta_.as<float>(layout_.floats + qscale_off_) : nullptr;
    AttnTokens tok;
    tok.table_off = meta_.as<int32_t>(layout_.table_off);
    tok.q_pos = meta_.as<int32_t>(layout_.q_pos);
    tok.kv_end = meta_.as<int32_t>(layout_.kv_end);
    tok.block_tables = meta_.as<int32_t>(layout_.tables);
    tok.block_size = block_size_;
    tok.max_keys = keys;
    const int32_t* slot = meta_.as<int32_t>(layout_.slot);
    cudaStream_t s = stream_;

    embed_rows(embed_, meta_.as<int32_t>(layout_.tokens), T, d.embed_scale, h, s);
    if (ne) scatter_rows(edata, erows, ne, H, h, /*add=*/false, s);
    for (int l = 0; l < d.n_layers; ++l) {
      const DevLayer& L = layers_[size_t(l)];
      const int r = d.rope_of[size_t(l)];
      const int half = d.ropes[size_t(r)].rot_dim / 2;
      const float* cs = meta_.as<float>(layout_.floats + rope_off_[size_t(r)].first);
      const float* sn = meta_.as<float>(layout_.floats + rope_off_[size_t(r)].second);
      // The RoPE epilogue: q rotated into q, k rotated and v as is straight into the KV pool (the same values
      // rope_kv_write stores, one launch less).
      // (The key and value jobs' y is the pool's K or V codes, of RopeOut::kv's type.)
      const RopeOut rope{cs, sn, slot, d.head_dim, kv_dtype_};
      const bool fused_rope = L.rope_epilogue && mode == MathMode::Fast;
      float* kcodes = static_cast<float*>(kv_[size_t(l)].k);
      float* vcodes = static_cast<float*>(kv_[size_t(l)].v);
      const std::array<MatmulJob, 3> qkv = fused_rope ? std::array<MatmulJob, 3>{MatmulJob{L.q, L.bq, q, qd, false, 1},
                                                                     MatmulJob{L.k, L.bk, kcodes, kd, false, 2},
                                                                     MatmulJob{L.v, L.bv, vcodes, kd, false, 3}}
                                          : std::array<MatmulJob, 3>{MatmulJob{L.q, L.bq, q, qd, false},
                                                                     MatmulJob{L.k, L.bk, k, kd, false},
                                                                     MatmulJob{L.v, L.bv, v, kd, false}};
      // Fast, affine weights: the input norm runs inside the q/k/v launch or its activation prepare pass (bitwise
      // the same values, one launch less).
      const RowNorm in_norm{L.input_norm, d.rms_eps};
      if (can_fuse_norm(qkv.data(), 3, T, mode)) {
        matmul(h, H, T, qkv.data(), 3, s, mode, &in_norm, fused_rope ? &rope : nullptr);
      } else {
        rms_norm(h, xn, T, H, L.input_norm, d.rms_eps, s);
        matmul(xn, H, T, qkv.data(), 3, s, mode, nullptr, fused_rope ? &rope : nullptr);
      }
      if (d.qk_norm) {
        rms_norm(q, q, T * d.n_heads, d.head_dim, L.q_norm, d.rms_eps, s);
        rms_norm(k, k, T * d.n_kv_heads, d.head_dim, L.k_norm, d.rms_eps, s);
      }
      if (!fused_rope)
        rope_kv_write(q, k, v, T, d.n_heads, d.n_kv_heads, d.head_dim, half, cs, sn, qscale, slot, kv_[size_t(l)], s);
      // h += att·Woᵀ (h last written before q/k/v), or o = att·Woᵀ to be normed (sandwich norms).
      const MatmulJob oj = d.sandwich_norms ? MatmulJob{L.o, L.bo, o, H, false} : MatmulJob{L.o, L.bo, h, H, true, 0, true};
      // One token: the attention may leave its key partitions unmerged for the o projection to merge as it stages its
      // input (the same x, bit for bit; the attention's partition counter and merge leave the chain).
      AttnPartials parts;
      const bool defer = can_merge_partials(&oj, 1, T, mode, d.head_dim);
      paged_attention(q, att, T, tok, kv_[size_t(l)], d.n_heads, d.n_kv_heads, d.head_dim,
                      d.attn_scale, d.window[size_t(l)], s, defer ? &parts : nullptr);
      matmul(att, qd, T, &oj, 1, s, mode, nullptr, nullptr, defer ? &parts : nullptr);
      if (d.sandwich_norms) {
        rms_norm(o, o, T, H, L.post_attn_norm, d.rms_eps, s);
        add_rms_norm(h, o, xn, T, H, L.pre_ffn_norm, d.rms_eps, s);
      }
      if (L.is_moe) {  // h += moe(rms_norm(h)) (unsupported_reason: no sandwich norms with MoE)
        rms_norm(h, xn, T, H, L.post_attn_norm, d.rms_eps, s);
        moe_forward(L.moe, xn, T, h, mode, moe_scratch_.as<void>(), s);
      } else {
        const bool fuse_post = !d.sandwich_norms && L.glu_fused && can_fuse_glu_norm(L.gate, L.up, T, mode);
        if (!d.sandwich_norms && !fuse_post) rms_norm(h, xn, T, H, L.post_attn_norm, d.rms_eps, s);
        if (fuse_post) {
          const RowNorm post{L.post_attn_norm, d.rms_eps};
          matmul_glu(h, T, L.gate, L.up, L.act, g, s, mode, &post);
        } else if (L.glu_fused) {
          matmul_glu(xn, T, L.gate, L.up, L.act, g, s, mode);
        } else {
          const MatmulJob gu[2] = {{L.gate, nullptr, g, d.ffn, false}, {L.up, nullptr, u, d.ffn, false}};
          matmul(xn, H, T, gu, 2, s, mode);
          glu(g, u, T * d.ffn, L.act, s);
        }
        if (d.sandwich_norms) {
          const MatmulJob dj{L.down, nullptr, o, H, false};
          matmul(g, d.ffn, T, &dj, 1, s, mode);
          rms_norm(o, o, T, H, L.post_ffn_norm, d.rms_eps, s);
          add_inplace(h, o, T * H, s);
        } else {
          const MatmulJob dj{L.down, nullptr, h, H, true, 0, true};  // h += mlp (h last written before the GLU)
          matmul(g, d.ffn, T, &dj, 1, s, mode);
        }
      }
      if (ne && l < d.deepstack_layers) scatter_rows(edata + (1 + l) * ne * H, erows, ne, H, h, /*add=*/true, s);
    }
    if (m == 0) return;
    const MatmulJob hj{head_, nullptr, logits, d.vocab, false};
    const RowNorm final_norm{final_norm_, d.rms_eps};
    const bool fused = can_fuse_norm(&hj, 1, m, mode);
    // Every token in order (decode): the fused head reads h itself, no gather (the unfused one norms sel in place).
    const bool in_order = fused && m == T && !permuted_rows_;
    if (!in_order) gather_rows(h, meta_.as<int32_t>(layout_.logit_rows), m, H, sel, s);
    if (fused) {
      matmul(in_order ? h : sel, H, m, &hj, 1, s, mode, &final_norm);
    } else {
      rms_norm(sel, sel, m, H, final_norm_, d.rms_eps, s);
      matmul(sel, H, m, &hj, 1, s, mode);
    }
    if (d.final_softcap > 0) softcap(logits, m * d.vocab, d.final_softcap, s);
  }

  std::unique_ptr<Model> host_;  // owns the mapped checkpoint, the config and the vision tower
  std::mutex tower_mu_;          // one image at a time on tower_ops_
  std::unique_ptr<ops::Backend> tower_ops_;  // made on the first image
  const DecoderParts& parts_;
  const DecoderConfig& cfg_;
  const Precision precision_;
  const KvDtype kv_dtype_;  // what the pool stores (KvPool::dtype of the geometry)
  cudaStream_t stream_ = nullptr;
  bool use_graphs_ = true;
  bool permuted_rows_ = false;  // this step wants a logit row of every token, not in token order (never graphed)
  bool split_glu_ = false;  // some layer runs gate and up as two matmuls (needs the up scratch)
  std::vector<void*> allocations_;  // weights and KV, freed with the model
  std::vector<std::pair<const void*, DevWeight>> uploaded_;  // host data -> device copy, during load only
  DevWeight embed_, head_;
  const float* final_norm_ = nullptr;
  std::vector<DevLayer> layers_;
  int num_blocks_ = 0, block_size_ = 0;
  std::vector<KvCache> kv_;  // per layer: its pool regions on the device
  // Step buffers, sized by capacity (tokens Tc_, logit rows Mc_, block-table entries Bc_).
  int64_t Tc_ = 0, Mc_ = 0, Bc_ = 0, m_ = 0;
  DeviceBuffer scratch_, logits_, meta_, embeds_dev_, mask_dev_, pen_scratch_, moe_scratch_;
  PinnedBuffer embeds_host_;
  // Host staging: [0] steps the executor asked for, [1] and [2] (in turn) steps enqueued ahead.
  Staging stage_[3];
  int ahead_flip_ = 0;
  // A step enqueued ahead: the batch and draws the next step is expected to ask for (the rows of this one, one
  // token further, their tokens those this one samples). Used only if the next step asks for exactly that.
  struct Ahead {
    bool live = false, hit = false;  // hit: the executor's forward was this batch
    OwnedBatch b;
    std::vector<int64_t> rows;
    std::vector<SampleParams> params;
    PendingSample ps;
  };
  Ahead ahead_;
  OwnedBatch last_;             // the batch of the forward just enqueued, when one could be continued ahead
  int64_t ahead_max_rows_ = 0;  // RAPID_CUDA_AHEAD (0: never enqueue ahead)
  bool rope_epilogue_on_ = true;  // RAPID_CUDA_ROPE_EPILOGUE (0: never), read once before the weights upload
  AheadPolicy policy_;
  // When the last sampling returned to the executor, and when the current step's forward was asked for.
  std::optional<std::chrono::steady_clock::time_point> returned_, step_start_;
  MetaLayout layout_;
  size_t off_h_ = 0, off_xn_ = 0, off_q_ = 0, off_k_ = 0, off_v_ = 0, off_att_ = 0, off_o_ = 0, off_g_ = 0, off_u_ = 0, off_sel_ = 0;
  std::vector<std::pair<size_t, size_t>> rope_off_;  // per RoPE spec: byte offsets of cos and sin
  size_t qscale_off_ = 0;
  using GraphKey = std::tuple<int64_t, int64_t, MathMode, int64_t>;  // (tokens, logit rows, arithmetic, keys_bound)
  std::map<GraphKey, cudaGraphExec_t> graphs_;
  std::set<GraphKey> eager_seen_;  // step shapes that ran once without a graph
};

}  // namespace

std::unique_ptr<Model> make_cuda_model(std::unique_ptr<Model> host, const KvPool& geometry, Precision precision) {
  const std::string why = unsupported_reason(*host);
  if (!why.empty()) throw std::runtime_error("CUDA backend: " + why);
  if (host->ops_model()) return make_cuda_ops_model(std::move(host), precision);  // families written over ops (Gemma 4)
  return std::make_unique<CudaDecoder>(std::move(host), geometry, precision);
}

}  // namespace rapid::cuda
