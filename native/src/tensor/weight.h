// A 2-D weight matrix as the kernels see it: y[n, out] = x[n, in] · Wᵀ.
// Views into the memory-mapped checkpoint; never owns or copies the bytes, except for an optional
// load-time repacked copy for the dense GEMM (cpu/gemm_packed.h) and the Fast matmuls' interleaved copy of
// a 4- or 8-bit weight (cpu/gemv_interleaved.h), each shared by every copy of the view.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include "tensor/dtype.h"

namespace rapid {

struct PackedDense;
struct InterleavedRows;

// An Affine 4- or 8-bit weight's copy in the CPU Fast matmuls' layout (cpu/gemv_interleaved.h): built at load on
// the CPU (or by the first matmul that can use it; never on CUDA), then shared by every copy of the view.
struct InterleavedSlot {
  std::once_flag once;
  std::shared_ptr<const InterleavedRows> rows;
  bool rows_mapped = false;  // the rows live in a read-only file mapping: their pages may be dropped
};

enum class WeightKind : uint8_t {
  Dense,   // data: dtype [out, in]
  Affine,  // MLX affine: data uint32 [out, in*bits/32]; scales, biases: dtype [out, in/group]
};

struct Weight {
  WeightKind kind = WeightKind::Dense;
  DType dtype = DType::F32;      // Dense: element dtype; Affine: dtype of scales and biases
  int64_t out = 0, in = 0;       // logical shape [out, in]
  const void* data = nullptr;
  const void* scales = nullptr;  // Affine only
  const void* biases = nullptr;  // Affine only
  int bits = 0;                  // Affine only: 4 or 8 (others rejected at load, naming the module)
  int group = 0;                 // Affine only: 32, 64 or 128
  std::string name;              // module path, for error messages
  std::shared_ptr<const PackedDense> packed;  // Dense only, when packed at load: matmul runs gemm_packed
  std::shared_ptr<InterleavedSlot> interleaved;  // Affine 4/8-bit loaded from a checkpoint; null: rows only

  bool valid() const { return data != nullptr; }
};

}  // namespace rapid
