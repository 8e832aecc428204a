// CudaOps: ops::Backend on one CUDA stream (cuda_ops.h). Ops enqueue kernels from dense_gemm, segment_attention
// and tower_rows; small host metadata (indices, taps, segment tiles) is copied into pool memory that is freed,
// stream-ordered, right after the kernel that reads it.
#include "cuda/cuda_ops.h"
#include <cuda_runtime.h>
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include "cuda/cuda_kernels.h"
#include "cuda/dense_gemm.h"
#include "cuda/matmul_mma.h"
#include "cuda/moe.h"
#include "cuda/paged_ops.h"
#include "cuda/segment_attention.h"
#include "cuda/tower_profile.h"
#include "cuda/tower_rows.h"
#include "cpu/matmul.h"  // embedding_rows
#include "quant/mlx_quant.h"
#include "tensor/dtype.h"  // f32_to_bf16: the rounding __float2bfloat16_rn does on the device

namespace rapid::cuda {

namespace {

// Rows [0, rows) split over up to 16 host threads (dequantizing a tower's weights once at upload).
template <class F>
void host_parallel_rows(int64_t rows, F&& body) {
  const int64_t width = std::clamp<int64_t>(int64_t(std::thread::hardware_concurrency()), 1, 16);
  const int64_t per = (rows + width - 1) / width;
  std::vector<std::thread> threads;
  for (int64_t r0 = 0; r0 < rows; r0 += per) threads.emplace_back([&body, r0, r1 = std::min(rows, r0 + per)] { body(r0, r1); });
  for (std::thread& t : threads) t.join();
}

}  // namespace

class CudaOps final : public ops::Backend {
 public:
  explicit CudaOps(bool decoder_matmuls) : decoder_matmuls_(decoder_matmuls) {
    check(cudaGetDevice(&device_), "cudaGetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate (tower ops)");
  }
  ~CudaOps() override {
    cudaStreamSynchronize(stream_);
    if (kv_) {
      // paged_attention's split-K scratch belongs to this stream: freed before the stream goes.
      try {
        paged_attention_release(stream_);
      } catch (const std::exception&) {  // a destructor reports nothing; the device is going away with the model
      }
    }
    kv_.reset();
    if (decoder_matmuls_) {
      try {
        matmul_release(stream_);
      } catch (const std::exception&) {  // as above
      }
    }
    for (void* p : weights_) cudaFree(p);
    for (const Span& sp : spans_) free_events_.insert(free_events_.end(), {sp.a, sp.b});
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
  }
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  std::string name() const override { return "cuda"; }
  int64_t weight_bytes() const {
    std::lock_guard<std::mutex> lk(mu_);
    return weight_bytes_;
  }

  // ---- memory ---------------------------------------------------------------------------------
  ops::Buf alloc(int64_t n) override {
    float* p = pool_alloc<float>(n);
    check(cudaMemsetAsync(p, 0, size_t(std::max<int64_t>(n, 1)) * sizeof(float), stream_), "tower alloc memset");
    return make_buf(p, n);
  }
  ops::Buf upload(const float* host, int64_t n) override {
    float* p = pool_alloc<float>(n);
    if (n > 0) check(cudaMemcpyAsync(p, host, size_t(n) * sizeof(float), cudaMemcpyHostToDevice, stream_), "tower upload");
    return make_buf(p, n);
  }
  void download(const float* src, int64_t n, float* host) override {
    if (n > 0) check(cudaMemcpyAsync(host, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, stream_), "tower download");
    check(cudaStreamSynchronize(stream_), "tower ops (a kernel before this download failed)");
  }

  // ---- matmuls --------------------------------------------------------------------------------
  void linear(const Linear& l, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n, Precision p) override {
    const bool fast = p == Precision::Fast;
    // The fused matmul reads x and writes y as float4 rows; other strides (not a decoder's) take the dense GEMMs.
    const auto rows4 = [](const float* p, int64_t ld) { return reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld % 4 == 0; };
    if (decoder_matmuls_ && n > 0 && rows4(x, ldx) && rows4(y, ldy)) {
      if (const DevWeight* w = dev_weight(l, fast)) {
        MatmulJob job;
        job.w = *w;
        job.bias = l.bias.empty() ? nullptr : dev_vec(l.bias);
        job.y = y;
        job.ldy = ldy;
        cuda::matmul(x, ldx, n, &job, 1, stream_, fast ? MathMode::Fast : MathMode::Exact);
        return;
      }
    }
    const DevLinear& d = dev_linear(l, fast);
    timed(kGemm, 2.0 * double(n) * double(l.out()) * double(l.in()), [&] {
      if (fast) gemm_bf16(x, ldx, static_cast<const uint16_t*>(d.w), d.bias, y, ldy, n, l.out(), l.in(), stream_);
      else gemm_f32(x, ldx, static_cast<const float*>(d.w), d.bias, y, ldy, n, l.out(), l.in(), stream_);
    });
  }

  // The dense GEMMs apply gelu (tanh) or the residual add as they store (dense_gemm.h); other activations, the
  // decoder's matmuls and a layer with both take the default, linear then act or add.
  void linear_epilogue(const Linear& l, const float* x, float* y, int64_t n, Precision p,
                       const LinearEpilogue& e) override {
    const bool fast = p == Precision::Fast;
    if ((e.act && (e.accumulate || *e.act != ops::VAct::GeluTanh)) || (decoder_matmuls_ && dev_weight(l, fast))) {
      Backend::linear_epilogue(l, x, y, n, p, e);
      return;
    }
    const DevLinear& d = dev_linear(l, fast);
    const GemmEpilogue ep{e.act ? int(*e.act) : -1, e.accumulate};
    timed(kGemm, 2.0 * double(n) * double(l.out()) * double(l.in()), [&] {
      if (fast) gemm_bf16(x, l.in(), static_cast<const uint16_t*>(d.w), d.bias, y, l.out(), n, l.out(), l.in(), stream_, ep);
      else gemm_f32(x, l.in(), static_cast<const float*>(d.w), d.bias, y, l.out(), n, l.out(), l.in(), stream_, ep);
    });
  }

  // ---- norms ----------------------------------------------------------------------------------
  void rms_norm(const float* x, float* y, int64_t rows, const NormWeight& w) override {
    if (rows > 0) cuda::rms_norm(x, y, rows, w.dim(), dev_vec(w.w), w.eps, stream_);
  }
  void rms_norm_heads(float* x, int64_t ld, int64_t n, int heads, int head_dim, const NormWeight& w) override {
    if (!w.w.empty() && w.dim() != head_dim)
      throw std::runtime_error("rms_norm_heads: weight has " + std::to_string(w.dim()) + " entries, head_dim is " +
                               std::to_string(head_dim));
    tower::rms_norm_heads(x, ld, n, heads, head_dim, w.w.empty() ? nullptr : dev_vec(w.w), w.eps, stream_);
  }
  void layer_norm(const float* x, float* y, int64_t rows, const LayerNormW& w) override {
    tower::layer_norm(x, y, rows, w.dim(), dev_vec(w.w), dev_vec(w.b), w.eps, stream_);
  }

  // ---- pointwise ------------------------------------------------------------------------------
  void act(float* x, int64_t rows, int64_t width, ops::VAct a) override { tower::act(x, rows * width, int(a), stream_); }
  void act_mul(float* gate, const float* up, int64_t rows, int64_t width, ops::VAct a) override {
    tower::act_mul(gate, up, rows * width, int(a), stream_);
  }
  void add(float* y, const float* x, int64_t n) override { tower::add(y, x, n, stream_); }
  void scale_shift(float* x, int64_t n, float sub, float mul) override { tower::scale_shift(x, n, sub, mul, stream_); }
  void scale_shift_cols(float* x, int64_t rows, const std::vector<float>& sub, const std::vector<float>& mul) override {
    if (sub.size() != mul.size()) throw std::runtime_error("scale_shift_cols: sub and mul differ in length");
    tower::scale_shift_cols(x, rows, int64_t(sub.size()), dev_vec(sub), dev_vec(mul), stream_);
  }
  void clamp(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t width, float lo,
             float hi) override {
    tower::clamp(x, ldx, y, ldy, rows, width, lo, hi, stream_);
  }

  // ---- data movement ---------------------------------------------------------------------------
  void gather_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t width,
                   const std::vector<int32_t>& idx) override {
    Meta<int32_t> d(*this, idx);
    tower::gather_rows(x, ldx, y, ldy, width, d.p, int64_t(idx.size()), stream_);
  }
  void scatter_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t width,
                    const std::vector<int32_t>& idx) override {
    Meta<int32_t> d(*this, idx);
    tower::scatter_rows(x, ldx, y, ldy, width, d.p, int64_t(idx.size()), stream_);
  }
  void transpose(const float* x, float* y, int64_t batch, int64_t rows, int64_t cols) override {
    tower::transpose(x, y, batch, rows, cols, stream_);
  }
  void pool_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t width, const ops::Taps& taps) override {
    check_taps(taps);
    Meta<int32_t> idx(*this, taps.idx);
    Meta<float> w(*this, taps.w);
    tower::tap_rows(x, ldx, y, ldy, width, idx.p, w.p, taps.k, taps.div, taps.rows(), false, stream_);
  }
  void add_table_rows(const Weight& table, const ops::Taps& taps, float* x, int64_t ldx) override {
    check_taps(taps);
    for (int32_t r : taps.idx)
      if (r < 0 || r >= table.out)
        throw std::out_of_range("add_table_rows: row " + std::to_string(r) + " outside " + table.name + " [" +
                                std::to_string(table.out) + ", " + std::to_string(table.in) + "]");
    const float* t = dev_table(table);
    Meta<int32_t> idx(*this, taps.idx);
    Meta<float> w(*this, taps.w);
    tower::tap_rows(t, table.in, x, ldx, table.in, idx.p, w.p, taps.k, taps.div, taps.rows(), true, stream_);
  }

  // ---- RoPE -----------------------------------------------------------------------------------
  void rope(float* x, int64_t ld, int64_t n, int heads, int64_t head_stride, int half, const float* cos,
            const float* sin) override {
    tower::rope(x, ld, n, heads, head_stride, half, cos, sin, stream_);
  }

  // ---- decoders -------------------------------------------------------------------------------
  // Rows are gathered and dequantized on the host (the CPU's embedding_rows) and uploaded: a step reads a few rows,
  // and the tables (Gemma 4's per-layer one is 262144 x 8960) stay off the device.
  void embed_rows(const Weight& table, const std::vector<int32_t>& ids, float scale, float* y, int64_t ldy) override {
    const int64_t n = int64_t(ids.size()), width = table.in;
    if (n == 0) return;
    std::vector<float> h(size_t(n * width));  // [n, width]
    embedding_rows(table, ids.data(), n, h.data());
    if (scale != 1.0f)
      for (float& x : h) x *= scale;
    check(cudaMemcpy2DAsync(y, size_t(ldy) * sizeof(float), h.data(), size_t(width) * sizeof(float),
                            size_t(width) * sizeof(float), size_t(n), cudaMemcpyHostToDevice, stream_),
          "embed_rows upload");
  }
  void softcap(float* x, int64_t n, float cap) override {
    if (n > 0) cuda::softcap(x, n, cap, stream_);
  }
  void write_kv(KvPool& kv, int layer, const float* k, const float* v, const std::vector<SeqSpan>& spans) override {
    device_kv(kv).write(layer, k, v, spans, stream_);
  }
  void paged_attention(KvPool& kv, int layer, const float* q, float* out, const std::vector<SeqSpan>& spans,
                       const AttnShape& s) override {
    device_kv(kv).attend(layer, q, out, spans, s, stream_);
  }
  int64_t kv_bytes() const { return kv_ ? kv_->bytes() : 0; }

  // The block on cuda/moe.h's kernels (the router in f32 as the CPU's; under Fast, 4-bit experts on tensor cores; the
  // experts read their stored format). out is overwritten. Of the stats only routed_rows: the rest needs the routing on the host.
  bool moe_supported() const override { return true; }
  void preload_moe(const MoeRouter& router, const MoeExperts& experts, Precision p) {
    dev_moe(router, experts, p == Precision::Fast);
  }
  void moe(const MoeRouter& router, const MoeExperts& experts, const float* route_x, const float* expert_x, float* out,
           int64_t T, int top_k, Precision p, MoeStats* stats) override {
    if (top_k != router.opt.top_k)
      throw std::runtime_error("moe: top_k " + std::to_string(top_k) + " differs from the router's " +
                               std::to_string(router.opt.top_k));
    if (T <= 0) return;
    const DevMoe& m = dev_moe(router, experts, p == Precision::Fast);
    PoolBuf<char> scratch(*this, int64_t(moe_scratch_bytes(m, T)));  // 256-byte aligned, as moe_forward needs
    cuda::moe_forward(m, route_x, expert_x, T, out, /*accumulate=*/false,
                      p == Precision::Fast ? MathMode::Fast : MathMode::Exact, scratch.p, stream_);
    if (stats) stats->routed_rows += T * top_k;
  }

  // ---- attention ------------------------------------------------------------------------------
  void attention(const float* q, int64_t ldq, const float* k, const float* v, int64_t ldkv, float* out, int64_t ldo,
                 int heads, int kv_heads, int head_dim, float scale, const std::vector<int64_t>& cu,
                 Precision p) override {
    if (cu.empty() || cu.front() != 0) throw std::runtime_error("attention: segment bounds must start at 0");
    for (size_t i = 1; i < cu.size(); ++i)
      if (cu[i] < cu[i - 1]) throw std::runtime_error("attention: segment bounds decrease at index " + std::to_string(i));
    if (cu.back() > INT32_MAX) throw std::runtime_error("attention: more than 2^31 tokens");
    const bool fast = p == Precision::Fast;
    const SegPlan plan = seg_plan(cu, fast);
    Meta<SegTile> d(*this, plan.tiles);
    PoolBuf<char> scratch(*this, int64_t(segment_attention_scratch_bytes(cu.back(), heads, kv_heads, head_dim, fast)));
    timed(kAttention, 0.0, [&] {
      segment_attention(q, ldq, k, v, ldkv, out, ldo, cu.back(), heads, kv_heads, head_dim, scale, d.p,
                        int(plan.tiles.size()), plan.query_tile, fast, scratch.p, stream_);
    });
  }

  // ---- profile (cuda_tower_bench --profile) ----------------------------------------------------
  void set_profile(bool on) {
    std::lock_guard<std::mutex> lk(prof_mu_);
    profile_ = on;
  }
  TowerProfile take_profile() {
    check(cudaStreamSynchronize(stream_), "tower ops (profile)");
    std::lock_guard<std::mutex> lk(prof_mu_);
    TowerProfile t;
    for (const Span& sp : spans_) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, sp.a, sp.b), "cudaEventElapsedTime (tower profile)");
      if (sp.cls == kGemm) t.gemm_ms += ms, t.gemm_flop += sp.flop, ++t.gemm_calls;
      else t.attention_ms += ms, ++t.attention_calls;
      free_events_.insert(free_events_.end(), {sp.a, sp.b});
    }
    spans_.clear();
    return t;
  }

 protected:
  void release(float* p) noexcept override { cudaFreeAsync(p, stream_); }

 private:
  struct DevLinear {
    void* w = nullptr;        // bf16 bits or f32 [gemm_rows_pad(out), gemm_k_pad(in)]
    const float* bias = nullptr;  // [out] or null
  };

  // n elements of stream-ordered pool memory (none for n = 0), freed stream-ordered when it goes out of scope, also
  // when the work between throws.
  template <class T>
  struct PoolBuf {
    PoolBuf(CudaOps& o, int64_t n) : s(o.stream_), p(n > 0 ? o.pool_alloc<T>(n) : nullptr) {}
    ~PoolBuf() {
      if (p) cudaFreeAsync(p, s);
    }
    PoolBuf(const PoolBuf&) = delete;
    PoolBuf& operator=(const PoolBuf&) = delete;
    cudaStream_t s;
    T* p;
  };

  // A stream-ordered device copy of host metadata.
  template <class T>
  struct Meta : PoolBuf<T> {
    Meta(CudaOps& o, const std::vector<T>& h) : PoolBuf<T>(o, int64_t(h.size())) {
      if (this->p)
        check(cudaMemcpyAsync(this->p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, this->s),
              "tower metadata upload");
    }
  };

  template <class T>
  T* pool_alloc(int64_t n) {
    void* p = nullptr;
    check(cudaMallocAsync(&p, size_t(std::max<int64_t>(n, 1)) * sizeof(T), stream_), "cudaMallocAsync (tower ops)");
    return static_cast<T*>(p);
  }

  static void check_taps(const ops::Taps& t) {
    if (t.k < 1 || int64_t(t.idx.size()) % t.k != 0 || (!t.w.empty() && t.w.size() != t.idx.size()))
      throw std::runtime_error("taps: " + std::to_string(t.idx.size()) + " indices, " + std::to_string(t.w.size()) +
                               " weights and k = " + std::to_string(t.k) + " do not describe whole rows");
  }

  // A weight copy made once (weights are few and large; the pool is for activations). On stream_: a plain
  // cudaMemcpy from pageable memory may return before its DMA lands, unordered with this non-blocking stream's
  // next kernel, which reads the weight (wrong first steps when the GPU was shared, session 29).
  void* device_copy(const void* host, size_t bytes) {
    void* p = nullptr;
    check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc (tower weights)");
    weights_.push_back(p);
    weight_bytes_ += int64_t(bytes);
    if (bytes) check(cudaMemcpyAsync(p, host, bytes, cudaMemcpyHostToDevice, stream_), "tower weight upload");
    return p;
  }

  const float* dev_vec(const std::vector<float>& v) {
    std::lock_guard<std::mutex> lk(mu_);
    const Key key{&v, v.data()};
    auto it = vecs_.find(key);
    if (it != vecs_.end()) return it->second;
    const float* d = static_cast<const float*>(device_copy(v.data(), v.size() * sizeof(float)));
    vecs_.emplace(key, d);
    return d;
  }

  const DevLinear& dev_linear(const Linear& l, bool fast) {
    std::lock_guard<std::mutex> lk(mu_);
    auto& cache = fast ? fast_ : exact_;
    const Key key{&l, l.w.data};
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    const int64_t out = l.out(), in = l.in(), rows = gemm_rows_pad(out), ldw = gemm_k_pad(in);
    DevLinear d;
    // MLX 4/8-bit and 16-bit weights are dequantized once here: a tower is small next to GPU memory.
    if (fast) {
      std::vector<uint16_t> h(size_t(rows * ldw), 0);
      host_parallel_rows(out, [&](int64_t r0, int64_t r1) {
        std::vector<float> row(static_cast<size_t>(in));  // [in]
        for (int64_t r = r0; r < r1; ++r) {
          dequantize_row(l.w, r, row.data());
          for (int64_t i = 0; i < in; ++i) h[size_t(r * ldw + i)] = f32_to_bf16(row[size_t(i)]);
        }
      });
      d.w = device_copy(h.data(), h.size() * sizeof(uint16_t));
    } else {
      std::vector<float> h(size_t(rows * ldw), 0.0f);
      host_parallel_rows(out, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) dequantize_row(l.w, r, h.data() + r * ldw);
      });
      d.w = device_copy(h.data(), h.size() * sizeof(float));
    }
    if (!l.bias.empty()) d.bias = static_cast<const float*>(device_copy(l.bias.data(), l.bias.size() * sizeof(float)));
    return cache.emplace(key, d).first->second;
  }

  // The fused decoder's form of a weight (upload_for_matmul): tiled 4/8-bit codes and scales where the tensor-core
  // path takes them (Fast), else the stored bytes. Null when the matmul cannot read this weight (the caller falls back
  // to the dense GEMMs).
  const DevWeight* dev_weight(const Linear& l, bool fast) {
    std::lock_guard<std::mutex> lk(mu_);
    auto& cache = fast ? mm_fast_ : mm_exact_;
    const Key key{&l, l.w.data};
    auto it = cache.find(key);
    if (it != cache.end()) return it->second.kind == WeightKind::Dense && !it->second.data ? nullptr : &it->second;
    const Weight& w = l.w;
    DevWeight d = device_view(w, nullptr, w.scales, w.biases);
    const bool float_type = w.dtype == DType::F32 || w.dtype == DType::F16 || w.dtype == DType::BF16;
    const bool readable = float_type && (w.kind == WeightKind::Dense ? w.in % 8 == 0
                                                                      : (w.bits == 4 || w.bits == 8) &&
                                                                            (w.group == 32 || w.group == 64 || w.group == 128));
    if (!readable) {
      cache.emplace(key, DevWeight{});  // remembered as unreadable: dense GEMMs from now on
      return nullptr;
    }
    d = upload_for_matmul(w, fast && mma_format_supported(d), [this](const void* p, size_t n) { return device_copy(p, n); });
    return &cache.emplace(key, d).first->second;
  }

  // A MoE block's device copy (cuda/moe.h's stacked layout; fast: 4-bit experts as tensor-core tiles), made on first
  // use and kept: the experts are uploaded once per precision (a model runs one), never per call.
  const DevMoe& dev_moe(const MoeRouter& r, const MoeExperts& ex, bool fast) {
    std::lock_guard<std::mutex> lk(mu_);
    const MoeKey key{{&r, &ex, ex.gate.empty() ? nullptr : ex.gate.front().data}, fast};
    auto it = moes_.find(key);
    if (it != moes_.end()) return it->second;
    if (const std::string why = moe_unsupported(r, ex); !why.empty()) throw std::runtime_error("cuda moe: " + why);
    DevMoe d = upload_moe(r, ex, weights_, fast);  // complete on return: its copies are synchronized
    weight_bytes_ += int64_t(rapid::weight_bytes(r.gate.w)) +
                     int64_t((r.opt.input_scale.size() + r.opt.per_expert_scale.size()) * sizeof(float));
    for (int64_t e = 0; e < ex.n_experts; ++e) weight_bytes_ += int64_t(ex.expert_bytes(e));
    return moes_.emplace(key, d).first->second;
  }

  const float* dev_table(const Weight& t) {
    std::lock_guard<std::mutex> lk(mu_);
    const Key key{&t, t.data};
    auto it = tables_.find(key);
    if (it != tables_.end()) return it->second;
    std::vector<float> h(static_cast<size_t>(t.out * t.in));  // [out, in]
    host_parallel_rows(t.out, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) dequantize_row(t, r, h.data() + r * t.in);
    });
    const float* d = static_cast<const float*>(device_copy(h.data(), h.size() * sizeof(float)));
    tables_.emplace(key, d);
    return d;
  }

  // The device KV of the pool the model forwards over: made on first use, remade if another geometry comes.
  DeviceKv& device_kv(const KvPool& g) {
    if (!kv_ || kv_pool_ != &g || !kv_->mirrors(g)) {
      check(cudaStreamSynchronize(stream_), "sync before a KV cache change");
      kv_.reset();
      kv_ = std::make_unique<DeviceKv>(g);
      kv_pool_ = &g;
    }
    return *kv_;
  }

  enum { kGemm, kAttention };
  struct Span {
    int cls;
    cudaEvent_t a, b;
    double flop;
  };
  // f enqueues one op; while profiling, events on the stream bracket it.
  template <class F>
  void timed(int cls, double flop, F&& f) {
    std::unique_lock<std::mutex> lk(prof_mu_);
    if (!profile_) {
      lk.unlock();
      f();
      return;
    }
    Span sp{cls, event(), event(), flop};
    check(cudaEventRecord(sp.a, stream_), "cudaEventRecord (tower profile)");
    f();
    check(cudaEventRecord(sp.b, stream_), "cudaEventRecord (tower profile)");
    spans_.push_back(sp);
  }
  cudaEvent_t event() {
    cudaEvent_t e = nullptr;
    if (!free_events_.empty()) {
      e = free_events_.back();
      free_events_.pop_back();
    } else {
      check(cudaEventCreate(&e), "cudaEventCreate (tower profile)");
    }
    return e;
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<DeviceKv> kv_;
  const KvPool* kv_pool_ = nullptr;
  std::mutex prof_mu_;  // the profile's spans (held around the op while profiling)
  bool profile_ = false;
  std::vector<Span> spans_;
  std::vector<cudaEvent_t> free_events_;
  // Cache key: the host struct's address and its data pointer (a struct whose storage moved is uploaded again).
  using Key = std::pair<const void*, const void*>;
  mutable std::mutex mu_;  // the weight caches (ops may be called from more than one thread)
  std::map<Key, DevLinear> fast_, exact_;
  std::map<Key, DevWeight> mm_fast_, mm_exact_;  // decoder_matmuls: the fused matmul's uploads
  const bool decoder_matmuls_;
  std::map<Key, const float*> vecs_, tables_;
  using MoeKey = std::pair<std::array<const void*, 3>, bool>;  // (router, experts, first expert's data), fast
  std::map<MoeKey, DevMoe> moes_;
  std::vector<void*> weights_;  // every weight allocation, freed with the backend
  int64_t weight_bytes_ = 0;
};

std::unique_ptr<ops::Backend> make_cuda_ops(bool decoder_matmuls) { return std::make_unique<CudaOps>(decoder_matmuls); }

void preload_moe(ops::Backend& be, const MoeRouter& router, const MoeExperts& experts, Precision p) {
  if (auto* c = dynamic_cast<CudaOps*>(&be)) c->preload_moe(router, experts, p);
}

int64_t uploaded_weight_bytes(const ops::Backend& be) {
  const auto* c = dynamic_cast<const CudaOps*>(&be);
  return c ? c->weight_bytes() : 0;
}

int64_t device_kv_bytes(const ops::Backend& be) {
  const auto* c = dynamic_cast<const CudaOps*>(&be);
  return c ? c->kv_bytes() : 0;
}

bool set_tower_profile(ops::Backend& be, bool on) {
  auto* c = dynamic_cast<CudaOps*>(&be);
  if (c) c->set_profile(on);
  return c != nullptr;
}

TowerProfile take_tower_profile(ops::Backend& be) {
  auto* c = dynamic_cast<CudaOps*>(&be);
  return c ? c->take_profile() : TowerProfile{};
}

}  // namespace rapid::cuda
