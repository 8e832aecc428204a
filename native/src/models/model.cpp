// The Model interface's default behaviour: image encoding on the CPU backend.
#include "models/model.h"
#include <stdexcept>
#include "cpu/cpu_ops.h"

namespace rapid {

std::vector<ImageEmbedding> Model::encode_images(const std::vector<ImageInput>& images, ThreadPool& pool, Precision p) {
  const VisionEncoder* v = vision();
  if (!v) throw std::logic_error("this model (" + info().architecture + ") has no vision tower");
  ops::CpuBackend cpu(pool);
  return rapid::encode_images(*v, images, cpu, p);
}

}  // namespace rapid
