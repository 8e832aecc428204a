// The CPU implementation of the op-level backend interface (backend/ops.h): the reference every other
// backend is tested against. Buffers are host memory; every op runs to completion on the caller's pool.
#pragma once
#include <memory>
#include <string>
#include "backend/ops.h"
#include "cpu/threadpool.h"
#include "layers/moe.h"

namespace rapid::ops {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(ThreadPool& pool) : pool_(pool) {}
  std::string name() const override { return "cpu"; }

  Buf alloc(int64_t n) override;
  Buf upload(const float* host, int64_t n) override;
  void download(const float* src, int64_t n, float* host) override;

  using Backend::linear;
  void linear(const Linear& l, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t n, Precision p) override;

  void rms_norm(const float* x, float* y, int64_t rows, const NormWeight& w) override;
  void rms_norm_heads(float* x, int64_t ld, int64_t n, int heads, int head_dim, const NormWeight& w) override;
  void layer_norm(const float* x, float* y, int64_t rows, const LayerNormW& w) override;

  void act(float* x, int64_t rows, int64_t width, VAct a) override;
  void act_mul(float* gate, const float* up, int64_t rows, int64_t width, VAct a) override;
  void gated_mlp(const Linear& gate, const Linear& up, const Linear& down, const float* x, float* y, float* g, float* u,
                 int64_t n, VAct a, Precision p) override;
  void add(float* y, const float* x, int64_t n) override;
  void scale_shift(float* x, int64_t n, float sub, float mul) override;
  void scale_shift_cols(float* x, int64_t rows, const std::vector<float>& sub, const std::vector<float>& mul) override;
  void clamp(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t width, float lo,
             float hi) override;

  void gather_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t width,
                   const std::vector<int32_t>& idx) override;
  void scatter_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t width,
                    const std::vector<int32_t>& idx) override;
  void transpose(const float* x, float* y, int64_t batch, int64_t rows, int64_t cols) override;
  void pool_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t width, const Taps& taps) override;
  void add_table_rows(const Weight& table, const Taps& taps, float* x, int64_t ldx) override;

  void rope(float* x, int64_t ld, int64_t n, int heads, int64_t head_stride, int half, const float* cos,
            const float* sin) override;

  void embed_rows(const Weight& table, const std::vector<int32_t>& ids, float scale, float* y, int64_t ldy) override;
  void softcap(float* x, int64_t n, float cap) override;
  void write_kv(KvPool& kv, int layer, const float* k, const float* v, const std::vector<SeqSpan>& spans) override;
  void paged_attention(KvPool& kv, int layer, const float* q, float* out, const std::vector<SeqSpan>& spans,
                       const AttnShape& s) override;
  bool moe_supported() const override { return true; }
  void moe(const MoeRouter& router, const MoeExperts& experts, const float* route_x, const float* expert_x, float* out,
           int64_t T, int top_k, Precision p, MoeStats* stats) override;

  void attention(const float* q, int64_t ldq, const float* k, const float* v, int64_t ldkv, float* out, int64_t ldo,
                 int heads, int kv_heads, int head_dim, float scale, const std::vector<int64_t>& cu,
                 Precision p) override;

 protected:
  void release(float* p) noexcept override;

 private:
  ThreadPool& pool_;
  std::unique_ptr<MoeScratch> moe_scratch_;  // made on the first moe() call
};

}  // namespace rapid::ops
