#include <stdexcept>
#include <string>
#include "cuda/cuda_kernels.h"

namespace rapid::cuda {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace rapid::cuda
