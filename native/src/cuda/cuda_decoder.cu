// The generic decoder (models/decoder.*) on an NVIDIA GPU: the host model's weights are copied to the
// device once, the KV pool lives there, and one forward is one stream of kernel launches (captured
// into a CUDA graph per (tokens, logit rows) shape, so a decode step is a single launch). Logits stay
// on the device; the executor fetches only the rows it must sample on the host.
#include <cuda_runtime.h>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>
#include "cuda/cuda_backend.h"
#include "cuda/cuda_kernels.h"
#include "cuda/launch.cuh"
#include "cuda/matmul_mma.h"
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

// Device or page-locked host memory (pinned, so the per-step uploads are true async copies), freed on
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
};

// Per-layer quantization overrides can store gate and up differently (one 8-bit, one dense, ...).
bool same_format(const Weight& a, const Weight& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.bits == b.bits && a.group == b.group && a.out == b.out && a.in == b.in;
}

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

// Byte offsets of the per-step integer metadata inside one buffer (fixed while the capacities are).
struct MetaLayout {
  size_t tokens = 0, slot = 0, table_off = 0, q_pos = 0, kv_end = 0, logit_rows = 0, tables = 0, mask_of = 0,
         tokens_out = 0, total = 0;
  MetaLayout() = default;
  MetaLayout(int64_t Tc, int64_t Mc, int64_t Bc) {
    size_t o = 0;
    auto take = [&](int64_t n) { const size_t at = o; o += align_up(size_t(n) * sizeof(int32_t)); return at; };
    tokens = take(Tc);
    slot = take(Tc);
    table_off = take(Tc);
    q_pos = take(Tc);
    kv_end = take(Tc);
    logit_rows = take(Mc);
    tables = take(Bc);
    mask_of = take(Mc);
    tokens_out = take(Mc);
    total = o;
  }
};

class CudaDecoder final : public Model, public DeviceLogits {
 public:
  CudaDecoder(std::unique_ptr<Model> host, const KvPool& geometry, Precision precision)
      : host_(std::move(host)), parts_(*host_->decoder_parts()), cfg_(*parts_.cfg), precision_(precision) {
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    const char* g = std::getenv("RAPID_CUDA_GRAPHS");
    use_graphs_ = !(g && std::string(g) == "0");
    upload_weights();
    allocate_kv(geometry);
    // Split-K attention and the multi-block argmax: their scratch is taken now (never during a capture); the
    // bound only trims idle blocks.
    paged_attention_reserve(stream_);
    argmax_reserve(stream_);
    set_attention_max_context(int64_t(num_blocks_) * block_size_);
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
    if (stream_) cudaStreamDestroy(stream_);
  }

  const ModelInfo& info() const override { return host_->info(); }
  std::vector<KvLayerSpec> kv_layers() const override { return host_->kv_layers(); }
  const VisionEncoder* vision() const override { return host_->vision(); }
  DeviceLogits* device_logits() override { return this; }

  void forward(const Batch& b, KvPool& kv, ThreadPool&, Precision prec, float* logits) override {
    if (logits) throw std::logic_error("CUDA model: logits stay on the device (forward takes no host buffer)");
    if (prec != precision_)
      throw std::logic_error("CUDA model: loaded for one precision, asked to run another (its weight layout is per precision)");
    if (kv.num_blocks() != num_blocks_ || kv.block_size() != block_size_)
      throw std::logic_error("CUDA model: the KV pool geometry differs from the one the device storage was sized for");
    check(cudaSetDevice(0), "cudaSetDevice");
    const int64_t T = int64_t(b.tokens.size()), m = int64_t(b.logit_rows.size());
    int64_t n_tables = 0;
    for (const SeqSpan& sp : b.spans) n_tables += sp.n_blocks;
    ensure_capacity(T, m, n_tables);
    m_ = m;
    upload_step(b, T);

    const bool embeds = !b.embeds.empty();
    if (embeds) upload_embeds(b);
    const MathMode mode = prec == Precision::Fast ? MathMode::Fast : MathMode::Exact;
    if (!use_graphs_ || embeds || T > 512) {
      enqueue(T, m, embeds ? int64_t(b.embeds.size()) : 0, mode);
    } else {
      const GraphKey key{T, m, mode};
      auto it = graphs_.find(key);
      if (it == graphs_.end() && !eager_seen_.insert(key).second) {
        if (graphs_.size() >= 256) drop_graphs();  // bound the cache of step shapes
        it = graphs_.emplace(key, capture(T, m, mode)).first;
      }
      // A shape's first forward runs eagerly: kernels make their one-time settings (shared-memory limits,
      // scratch) outside a capture; from its second forward on, the shape is one graph launch.
      if (it == graphs_.end()) enqueue(T, m, 0, mode);
      else check(cudaGraphLaunch(it->second, stream_), "cudaGraphLaunch");
    }
    // A step that samples nothing (a prefill chunk) still reports its failures in this step.
    if (m == 0) check(cudaStreamSynchronize(stream_), "forward");
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
  // masks and the rows' parameters, one wait, two small downloads.
  void sample(const std::vector<int64_t>& rows, const std::vector<const SampleParams*>& params, int32_t* tokens) override {
    const int64_t V = cfg_.vocab, words = (V + 31) / 32;
    std::vector<size_t> plain, drawn;
    int64_t n_masks = 0;
    std::vector<TokenPenalty> pens;
    std::vector<SampleRow> srows;
    int32_t pen_rows = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i] < 0 || rows[i] >= m_) throw std::out_of_range("CUDA model: logit row out of range");
      const SampleParams& p = *params[i];
      n_masks += p.bitmask.empty() ? 0 : 1;
      if (is_plain_argmax(p)) {
        plain.push_back(i);
        continue;
      }
      drawn.push_back(i);
      srows.push_back(sample_row_of(p, rows[i], -1, pens, pen_rows));  // its mask row is set below
    }
    const int64_t nd = int64_t(drawn.size()), np = int64_t(pens.size());
    // Host staging: mask_of [m] | argmax tokens [m] | drawn tokens [nd] | rows [nd] | penalties [np] | masks [n_masks, words]
    const size_t o_tok = size_t(m_) * 4, o_dtok = align_up(o_tok + size_t(m_) * 4), o_rows = o_dtok + align_up(size_t(nd) * 4);
    const size_t o_pens = o_rows + align_up(size_t(nd) * sizeof(SampleRow));
    const size_t o_masks = o_pens + align_up(size_t(np) * sizeof(TokenPenalty));
    const size_t bytes = o_masks + size_t(n_masks * words) * 4;
    mask_host_.reserve(bytes);
    mask_dev_.reserve(std::max<size_t>(bytes - o_dtok, 16), "cudaMalloc sampling rows");
    if (pen_rows > 0) pen_scratch_.reserve(size_t(pen_rows) * size_t(V) * sizeof(float), "cudaMalloc penalty scratch");
    char* h = mask_host_.as<char>();
    int32_t* mask_of = reinterpret_cast<int32_t*>(h);
    uint32_t* packed = reinterpret_cast<uint32_t*>(h + o_masks);
    for (int64_t r = 0; r < m_; ++r) mask_of[r] = -1;
    int32_t k = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::vector<uint32_t>& mk = params[i]->bitmask;
      if (mk.empty()) continue;
      std::memcpy(packed + int64_t(k) * words, mk.data(), size_t(words) * sizeof(uint32_t));
      mask_of[rows[i]] = k++;
    }
    for (size_t j = 0; j < drawn.size(); ++j) srows[j].mask = mask_of[rows[drawn[j]]];
    std::memcpy(h + o_rows, srows.data(), srows.size() * sizeof(SampleRow));
    std::memcpy(h + o_pens, pens.data(), pens.size() * sizeof(TokenPenalty));
    // Device: the same bytes from o_dtok on (tokens of the drawn rows first).
    char* d = mask_dev_.as<char>() - o_dtok;
    check(cudaMemcpyAsync(d + o_rows, h + o_rows, bytes - o_rows, cudaMemcpyHostToDevice, stream_), "upload sampling rows");
    const uint32_t* d_masks = reinterpret_cast<const uint32_t*>(d + o_masks);
    if (!plain.empty()) {
      int32_t* d_mask_of = meta_.as<int32_t>(layout_.mask_of);
      check(cudaMemcpyAsync(d_mask_of, mask_of, size_t(m_) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_), "upload mask rows");
      argmax_rows(logits_.as<float>(), m_, V, d_masks, d_mask_of, meta_.as<int32_t>(layout_.tokens_out), stream_);
      check(cudaMemcpyAsync(h + o_tok, meta_.as<int32_t>(layout_.tokens_out), size_t(m_) * sizeof(int32_t),
                            cudaMemcpyDeviceToHost, stream_), "fetch tokens");
    }
    if (nd > 0) {
      int32_t* d_tok = reinterpret_cast<int32_t*>(d + o_dtok);
      sample_rows(logits_.as<float>(), V, reinterpret_cast<const SampleRow*>(d + o_rows), nd, d_masks,
                  reinterpret_cast<const TokenPenalty*>(d + o_pens), pen_scratch_.as<float>(), d_tok, stream_);
      check(cudaMemcpyAsync(h + o_dtok, d_tok, size_t(nd) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_), "fetch tokens");
    }
    check(cudaStreamSynchronize(stream_), "forward (sampling)");
    const int32_t* argmax_tokens = reinterpret_cast<const int32_t*>(h + o_tok);
    const int32_t* drawn_tokens = reinterpret_cast<const int32_t*>(h + o_dtok);
    for (size_t i : plain) tokens[i] = argmax_tokens[rows[i]];
    for (size_t j = 0; j < drawn.size(); ++j) tokens[drawn[j]] = drawn_tokens[j];
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
  const float* upload_floats(const std::vector<float>& v) {
    return v.empty() ? nullptr : static_cast<const float*>(upload(v.data(), v.size() * sizeof(float)));
  }
  // `matmul_only`: no kernel but a matmul reads it (not the embedding), so under Fast its codes may be tiled.
  DevWeight upload_weight(const Weight& w, bool matmul_only = true) {
    // The tied head is the embedding: one device copy serves both (row-major, as the embedding gather reads it).
    for (const auto& [host, dev] : uploaded_)
      if (host == w.data) return dev;
    const size_t sb = weight_scale_bytes(w);
    DevWeight d = device_view(w, nullptr, sb ? upload(w.scales, sb) : nullptr, sb ? upload(w.biases, sb) : nullptr);
    d.tiled = matmul_only && precision_ == Precision::Fast && mma_format_supported(d);
    if (d.tiled) {
      const size_t words = tiled_words(w.out, w.in, w.bits);
      const auto t = std::make_unique_for_overwrite<uint32_t[]>(words);  // every word is written: no zero fill first
      tile_codes(static_cast<const uint32_t*>(w.data), w.out, w.in, w.bits, w.group, t.get());
      d.data = upload(t.get(), words * sizeof(uint32_t));
    } else {
      d.data = upload(w.data, weight_data_bytes(w));
    }
    uploaded_.push_back({w.data, d});
    return d;
  }
  void upload_weights() {
    const int64_t free_before = free_bytes();
    if (int64_t(host_->info().weight_bytes) > free_before)
      throw std::runtime_error("the weights (" + std::to_string(host_->info().weight_bytes >> 20) +
                               " MiB) do not fit in the GPU's free memory (" + std::to_string(free_before >> 20) + " MiB)");
    embed_ = upload_weight(*parts_.embed, /*matmul_only=*/false);
    head_ = upload_weight(*parts_.head);
    final_norm_ = upload_floats(parts_.final_norm->w);
    for (const DecoderLayer& L : *parts_.layers) {
      DevLayer d;
      d.input_norm = upload_floats(L.input_norm.w);
      d.post_attn_norm = upload_floats(L.post_attn_norm.w);
      d.pre_ffn_norm = upload_floats(L.pre_ffn_norm.w);
      d.post_ffn_norm = upload_floats(L.post_ffn_norm.w);
      d.q_norm = upload_floats(L.q_norm.w);
      d.k_norm = upload_floats(L.k_norm.w);
      d.q = upload_weight(L.q.w);
      d.k = upload_weight(L.k.w);
      d.v = upload_weight(L.v.w);
      d.o = upload_weight(L.o.w);
      d.bq = upload_floats(L.q.bias);
      d.bk = upload_floats(L.k.bias);
      d.bv = upload_floats(L.v.bias);
      d.bo = upload_floats(L.o.bias);
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
  void allocate_kv(const KvPool& g) {
    num_blocks_ = g.num_blocks();
    block_size_ = g.block_size();
    const int64_t width = int64_t(cfg_.n_kv_heads) * cfg_.head_dim;
    const size_t per_layer = size_t(num_blocks_) * size_t(block_size_) * size_t(width) * sizeof(float);  // K or V
    const size_t total = per_layer * 2 * size_t(cfg_.n_layers);
    const int64_t free = free_bytes();
    if (int64_t(total) > free - (int64_t(512) << 20))
      throw std::runtime_error("KV cache of " + std::to_string(total >> 20) + " MiB does not fit in the GPU's free memory (" +
                               std::to_string(free >> 20) + " MiB after the weights); lower --kv-cache-memory");
    void* p = nullptr;
    check(cudaMalloc(&p, total), "cudaMalloc KV cache");
    allocations_.push_back(p);
    // Zeroed so that a never-written slot is harmless (no NaN garbage reaches a softmax).
    check(cudaMemset(p, 0, total), "cudaMemset KV cache");
    for (int l = 0; l < cfg_.n_layers; ++l) {
      kpool_.push_back(reinterpret_cast<float*>(static_cast<char*>(p) + per_layer * size_t(2 * l)));
      vpool_.push_back(reinterpret_cast<float*>(static_cast<char*>(p) + per_layer * size_t(2 * l + 1)));
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
    layout_ = MetaLayout(Tc_, Mc_, Bc_);
    meta_.release();
    meta_.reserve(layout_.total, "cudaMalloc step metadata");
    meta_host_.reserve(layout_.total);
    // cos/sin [Tc, half] per RoPE spec, then q_scale [Tc].
    rope_off_.clear();
    size_t fo = 0;
    for (const RopeSpec& rs : cfg_.ropes) {
      const size_t n = align_up(size_t(Tc_) * size_t(rs.rot_dim / 2) * f);
      rope_off_.push_back({fo, fo + n});
      fo += 2 * n;
    }
    qscale_off_ = fo;
    fo += align_up(size_t(Tc_) * f);
    fmeta_.release();
    fmeta_.reserve(fo, "cudaMalloc RoPE tables");
    // Fast launches of more than one token prepare their activations in the stream's buffer: sized now, never in
    // a capture.
    matmul_reserve(stream_, Tc_, std::max<int64_t>({H, qd, cfg_.ffn}));
    fmeta_host_.reserve(fo);
    fmeta_bytes_ = fo;
  }

  void upload_step(const Batch& b, int64_t T) {
    // The staging buffers are rewritten below: the previous step's copies out of them must be done.
    check(cudaStreamSynchronize(stream_), "previous step");
    int32_t* tokens = meta_host_.as<int32_t>(layout_.tokens);
    int32_t* slot = meta_host_.as<int32_t>(layout_.slot);
    int32_t* table_off = meta_host_.as<int32_t>(layout_.table_off);
    int32_t* q_pos = meta_host_.as<int32_t>(layout_.q_pos);
    int32_t* kv_end = meta_host_.as<int32_t>(layout_.kv_end);
    int32_t* logit_rows = meta_host_.as<int32_t>(layout_.logit_rows);
    int32_t* tables = meta_host_.as<int32_t>(layout_.tables);
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
    check(cudaMemcpyAsync(meta_.as<void>(), meta_host_.as<void>(), layout_.total, cudaMemcpyHostToDevice, stream_),
          "upload step metadata");

    for (size_t r = 0; r < cfg_.ropes.size(); ++r) {
      const RopeTable t = rope_table(cfg_.ropes[r], b.positions.data(), T);
      std::memcpy(fmeta_host_.as<float>(rope_off_[r].first), t.cos.data(), t.cos.size() * sizeof(float));
      std::memcpy(fmeta_host_.as<float>(rope_off_[r].second), t.sin.data(), t.sin.size() * sizeof(float));
    }
    if (cfg_.q_pos_beta != 0.0f) {
      float* qs = fmeta_host_.as<float>(qscale_off_);
      for (int64_t t = 0; t < T; ++t)
        qs[t] = 1.0f + cfg_.q_pos_beta * std::log(1.0f + std::floor(float(b.positions[size_t(t)]) / float(cfg_.q_pos_period)));
    }
    check(cudaMemcpyAsync(fmeta_.as<void>(), fmeta_host_.as<void>(), fmeta_bytes_, cudaMemcpyHostToDevice, stream_),
          "upload RoPE tables");
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

  cudaGraphExec_t capture(int64_t T, int64_t m, MathMode mode) {
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      enqueue(T, m, 0, mode);
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

  // The whole forward as launches on stream_: embeddings, every layer, the head over the logit rows.
  void enqueue(int64_t T, int64_t m, int64_t ne, MathMode mode) {
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
    const float* qscale = d.q_pos_beta != 0.0f ? fmeta_.as<float>(qscale_off_) : nullptr;
    AttnTokens tok;
    tok.table_off = meta_.as<int32_t>(layout_.table_off);
    tok.q_pos = meta_.as<int32_t>(layout_.q_pos);
    tok.kv_end = meta_.as<int32_t>(layout_.kv_end);
    tok.block_tables = meta_.as<int32_t>(layout_.tables);
    tok.block_size = block_size_;
    const int32_t* slot = meta_.as<int32_t>(layout_.slot);
    cudaStream_t s = stream_;

    embed_rows(embed_, meta_.as<int32_t>(layout_.tokens), T, d.embed_scale, h, s);
    if (ne) scatter_rows(edata, erows, ne, H, h, /*add=*/false, s);
    for (int l = 0; l < d.n_layers; ++l) {
      const DevLayer& L = layers_[size_t(l)];
      const MatmulJob qkv[3] = {{L.q, L.bq, q, qd, false}, {L.k, L.bk, k, kd, false}, {L.v, L.bv, v, kd, false}};
      // Fast, affine weights: the input norm runs inside the q/k/v launch or its activation prepare pass (bitwise
      // the same values, one launch less).
      const RowNorm in_norm{L.input_norm, d.rms_eps};
      if (can_fuse_norm(qkv, 3, T, mode)) {
        matmul(h, H, T, qkv, 3, s, mode, &in_norm);
      } else {
        rms_norm(h, xn, T, H, L.input_norm, d.rms_eps, s);
        matmul(xn, H, T, qkv, 3, s, mode);
      }
      if (d.qk_norm) {
        rms_norm(q, q, T * d.n_heads, d.head_dim, L.q_norm, d.rms_eps, s);
        rms_norm(k, k, T * d.n_kv_heads, d.head_dim, L.k_norm, d.rms_eps, s);
      }
      const int r = d.rope_of[size_t(l)];
      const int half = d.ropes[size_t(r)].rot_dim / 2;
      const float* cs = fmeta_.as<float>(rope_off_[size_t(r)].first);
      const float* sn = fmeta_.as<float>(rope_off_[size_t(r)].second);
      rope_kv_write(q, k, v, T, d.n_heads, d.n_kv_heads, d.head_dim, half, cs, sn, qscale, slot, kpool_[size_t(l)],
                    vpool_[size_t(l)], s);
      paged_attention(q, att, T, tok, kpool_[size_t(l)], vpool_[size_t(l)], d.n_heads, d.n_kv_heads, d.head_dim,
                      d.attn_scale, d.window[size_t(l)], s);
      if (d.sandwich_norms) {
        const MatmulJob oj{L.o, L.bo, o, H, false};
        matmul(att, qd, T, &oj, 1, s, mode);
        rms_norm(o, o, T, H, L.post_attn_norm, d.rms_eps, s);
        add_rms_norm(h, o, xn, T, H, L.pre_ffn_norm, d.rms_eps, s);
      } else {
        const MatmulJob oj{L.o, L.bo, h, H, true};  // h += att·Woᵀ
        matmul(att, qd, T, &oj, 1, s, mode);
      }
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
        const MatmulJob dj{L.down, nullptr, h, H, true};  // h += mlp
        matmul(g, d.ffn, T, &dj, 1, s, mode);
      }
      if (ne && l < d.deepstack_layers) scatter_rows(edata + (1 + l) * ne * H, erows, ne, H, h, /*add=*/true, s);
    }
    if (m == 0) return;
    gather_rows(h, meta_.as<int32_t>(layout_.logit_rows), m, H, sel, s);
    const MatmulJob hj{head_, nullptr, logits, d.vocab, false};
    const RowNorm final_norm{final_norm_, d.rms_eps};
    if (can_fuse_norm(&hj, 1, m, mode)) {
      matmul(sel, H, m, &hj, 1, s, mode, &final_norm);
    } else {
      rms_norm(sel, sel, m, H, final_norm_, d.rms_eps, s);
      matmul(sel, H, m, &hj, 1, s, mode);
    }
    if (d.final_softcap > 0) softcap(logits, m * d.vocab, d.final_softcap, s);
  }

  std::unique_ptr<Model> host_;  // owns the mapped checkpoint, the config and the vision tower
  const DecoderParts& parts_;
  const DecoderConfig& cfg_;
  const Precision precision_;
  cudaStream_t stream_ = nullptr;
  bool use_graphs_ = true;
  bool split_glu_ = false;  // some layer runs gate and up as two matmuls (needs the up scratch)
  std::vector<void*> allocations_;  // weights and KV, freed with the model
  std::vector<std::pair<const void*, DevWeight>> uploaded_;  // host data -> device copy, during load only
  DevWeight embed_, head_;
  const float* final_norm_ = nullptr;
  std::vector<DevLayer> layers_;
  int num_blocks_ = 0, block_size_ = 0;
  std::vector<float*> kpool_, vpool_;  // per layer [num_blocks * block_size, n_kv * hd]
  // Step buffers, sized by capacity (tokens Tc_, logit rows Mc_, block-table entries Bc_).
  int64_t Tc_ = 0, Mc_ = 0, Bc_ = 0, m_ = 0;
  DeviceBuffer scratch_, logits_, meta_, fmeta_, embeds_dev_, mask_dev_, pen_scratch_;
  PinnedBuffer meta_host_, fmeta_host_, embeds_host_, mask_host_;
  MetaLayout layout_;
  size_t off_h_ = 0, off_xn_ = 0, off_q_ = 0, off_k_ = 0, off_v_ = 0, off_att_ = 0, off_o_ = 0, off_g_ = 0, off_u_ = 0, off_sel_ = 0;
  std::vector<std::pair<size_t, size_t>> rope_off_;  // per RoPE spec: byte offsets of cos and sin
  size_t qscale_off_ = 0, fmeta_bytes_ = 0;
  using GraphKey = std::tuple<int64_t, int64_t, MathMode>;  // (tokens, logit rows, arithmetic)
  std::map<GraphKey, cudaGraphExec_t> graphs_;
  std::set<GraphKey> eager_seen_;  // step shapes that ran once without a graph
};

}  // namespace

std::unique_ptr<Model> make_cuda_model(std::unique_ptr<Model> host, const KvPool& geometry, Precision precision) {
  const std::string why = unsupported_reason(*host);
  if (!why.empty()) throw std::runtime_error("CUDA backend: " + why);
  return std::make_unique<CudaDecoder>(std::move(host), geometry, precision);
}

}  // namespace rapid::cuda
