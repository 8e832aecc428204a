// CudaOpsModel (cuda/cuda_ops_model.h): Model::forward = the host family's forward_ops over a CUDA op backend.
#include "cuda/cuda_ops_model.h"
#include <mutex>
#include <stdexcept>
#include "cuda/cuda_ops.h"
#include "models/ops_model.h"

namespace rapid::cuda {

namespace {

class CudaOpsModel final : public Model {
 public:
  CudaOpsModel(std::unique_ptr<Model> host, Precision precision) : host_(std::move(host)), family_(host_->ops_model()) {
    if (!family_) throw std::logic_error("CUDA ops model: " + host_->info().family + " has no op-level forward");
    ops_ = make_cuda_ops(/*decoder_matmuls=*/true);
    for (const MoeBlockRef& m : family_->moe_blocks()) preload_moe(*ops_, *m.router, *m.experts, precision);
  }

  const ModelInfo& info() const override { return host_->info(); }
  std::vector<KvLayerSpec> kv_layers() const override { return host_->kv_layers(); }
  const VisionEncoder* vision() const override { return host_->vision(); }
  const MoeStats* moe_stats() const override { return host_->moe_stats(); }

  void forward(const Batch& b, KvPool& kv, ThreadPool&, Precision p, float* logits) override {
    std::lock_guard<std::mutex> lk(mu_);
    family_->forward_ops(*ops_, b, kv, p, logits);
  }

  // The tower runs over a CUDA op backend of its own (its own stream), as in cuda_decoder.cu.
  std::vector<ImageEmbedding> encode_images(const std::vector<ImageInput>& images, ThreadPool& pool,
                                            Precision p) override {
    if (!host_->vision()) return host_->encode_images(images, pool, p);  // the host's "no vision tower" error
    std::lock_guard<std::mutex> lk(tower_mu_);
    if (!tower_ops_) tower_ops_ = make_cuda_ops();
    return rapid::encode_images(*host_->vision(), images, *tower_ops_, p);
  }

 private:
  std::unique_ptr<Model> host_;  // owns the mapped checkpoint, the weights the backend uploads, the tower
  OpsModel* family_;
  std::mutex mu_;  // one forward at a time on ops_
  std::unique_ptr<ops::Backend> ops_;
  std::mutex tower_mu_;
  std::unique_ptr<ops::Backend> tower_ops_;  // made on the first image
};

}  // namespace

std::unique_ptr<Model> make_cuda_ops_model(std::unique_ptr<Model> host, Precision precision) {
  return std::make_unique<CudaOpsModel>(std::move(host), precision);
}

}  // namespace rapid::cuda
