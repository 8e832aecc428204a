// The CPU Fast matmuls' own copy of an MLX affine 4-bit weight: rows interleaved in blocks of 16, so one
// 512-bit load (two 256-bit ones on AVX2) feeds the int8 dot products of 16 rows (one int32 lane per row)
// with no horizontal sums, and codes, scales and biases of a block arrive as one sequential stream.
// MLX 8-bit weights get the same kind of copy in blocks of 8 rows (one 256-bit load: a code dword of 8
// rows), read by the AVX2 family only (interleaved_avx2_impl.h); AVX-512 keeps their row-major kernels. The
// batch-1 GEMV and the batched GEMM of each family that has them (AVX-512 VNNI:
// gemv_interleaved_x86_impl.h and gemm_interleaved_x86_impl.h; AVX2: interleaved_avx2_impl.h) both read
// it, so there it is built at CPU load and the checkpoint's row-major pages are dropped; never for CUDA.
// RAPID_INTERLEAVED_GEMV=0 keeps the row-major kernels (docs/performance.md). Both kernels give
// bit-identical results to the row-major kernels.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include "cpu/threadpool.h"
#include "tensor/weight.h"

namespace rapid {

// Rows per block of a 4-bit copy: the int32 lanes of one zmm.
constexpr int64_t kInterleaveRows = 16;
// Rows per block of an 8-bit copy: the int32 lanes of one ymm (the AVX2 kernels keep 8 f32 partial sums
// per row, one per code dword of a 32-byte x slice, so 16 rows would not fit their registers).
constexpr int64_t kInterleaveRows8 = 8;

// Layout: blocks of `block_rows` rows in order; in a block, the groups in order; per (block, group):
//   4-bit: codes  uint32 [G/8][16]: dword j of row i = bytes [4j, 4j + 4) of row i's packed codes of the group
//   8-bit: codes  uint32 [G/4][8]:  the same, each byte XOR 0x80 (q - 128 as int8, the kernels' signed operand)
//   scales dtype  [block_rows]
//   biases dtype  [block_rows]      (rows past `out` all zero)
struct InterleavedRows {
  int64_t out = 0, in = 0, group = 0, blocks = 0;  // blocks = ceil(out / block_rows)
  int bits = 4;                                    // 4 or 8
  int64_t block_rows = kInterleaveRows;            // 16 (4-bit) or 8 (8-bit)
  DType dtype = DType::BF16;                       // of scales and biases (the checkpoint's)
  size_t code_bytes = 0;                           // 8 * group: one group's codes of a block (either width)
  size_t group_bytes = 0;                          // code_bytes + 2 * block_rows * dtype size
  size_t block_bytes = 0;                          // (in / group) * group_bytes
  std::shared_ptr<void> arena;                     // keeps the huge-page chunk that holds `data` alive
  const uint8_t* data = nullptr;                   // [blocks][block_bytes], 64-byte aligned
  const void* src = nullptr;                       // W.data it was built from (a view elsewhere is refused)
};

// False when RAPID_INTERLEAVED_GEMV=0 (read once).
bool interleaved_gemv_enabled();

// Builds the interleaved copy of an Affine 4- or 8-bit weight (portable code), blocks split over the pool.
std::shared_ptr<const InterleavedRows> interleave_rows(const Weight& W, ThreadPool& pool);

// W's interleaved copy, built on the first call (once per weight, over the pool); nullptr when W has no
// slot, is not Affine 4- or 8-bit on the Fast path's shapes, the family in use has no kernels for its
// copy, or RAPID_INTERLEAVED_GEMV=0. When the kernel family in use reads the copy at every batch size
// and W's rows are a file mapping, the build drops their resident pages (the copy replaces them; a later
// reader, e.g. an embedding lookup or another family, faults them back in from the file).
const InterleavedRows* interleaved_rows(const Weight& W, ThreadPool& pool);

// At CPU load, for the Fast path: builds W's copy (interleaved_rows) when the kernel family in use reads it
// at every batch size, so no step pays for it. True when W has a copy.
bool interleave_at_load(const Weight& W, ThreadPool& pool);

}  // namespace rapid
