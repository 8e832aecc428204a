// The Model interface's default behaviour: image encoding on the CPU backend.
#include "models/model.h"
#include <stdexcept>
#include "cpu/cpu_ops.h"

namespace rapid {

ImageEmbedding Model::encode_image(const ImageInput& image, ThreadPool& pool, Precision p) {
  const VisionEncoder* v = vision();
  if (!v) throw std::logic_error("this model (" + info().architecture + ") has no vision tower");
  ops::CpuBackend cpu(pool);
  return v->encode(image, cpu, p);
}

}  // namespace rapid
