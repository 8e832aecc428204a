// The tensor-core path's tiled code layout (DevWeight::tiled), which its kernels read contiguously (a warp's loads of
// one group: 512 bytes for 4-bit g64). On the H200 (cuda_matmul_bench fast vs fast-tiled) it takes 9% off the 3B
// shape's GLU and 10% off a 152k-row head at one token, 6% / 12% at 8 tokens, 7% / 5% at 64. For each 16-row tile t
// (the last padded by repeating row out-1), group g and lane L = 4·(r % 8) + quarter q: the WPT = group·bits/128
// words of quarter q of row 16t + r % 8 (a), then of row 16t + r % 8 + 8 (b). Host code: the decoder repacks at load.
#pragma once
#include <cstddef>
#include <cstdint>
#include "tensor/weight.h"

namespace rapid::cuda {

// u32 words of an [out, in] weight's codes in the tiled layout.
size_t tiled_words(int64_t out, int64_t in, int bits);

// MLX codes src [out, in·bits/32] to the tiled layout dst [tiled_words(out, in, bits)], tiles split over up to
// `threads` threads (0: the hardware's); the result does not depend on the split.
void tile_codes(const uint32_t* src, int64_t out, int64_t in, int bits, int group, uint32_t* dst, int threads = 0);

// Bytes of an [out, ng-group] weight's scales and biases in the tiled layout (esz: their element size).
size_t tiled_scale_bytes(int64_t out, int64_t ng, int esz);

// Scales and biases [out, ng] (esz-byte elements) to the tiled layout dst [tiled_scale_bytes]: for each 16-row tile t,
// group g and r < 8, the elements scale(a), bias(a), scale(b), bias(b) of rows a = 16t + r and b = a + 8 (a partial
// tile repeats row out-1). The thread of C rows (r, r + 8) reads its group's four as one 8-byte (16-bit) or 16-byte
// (f32) load, in the order the kernels pack them. Threads as tile_codes.
void tile_scales(const void* scales, const void* biases, int64_t out, int64_t ng, int esz, void* dst, int threads = 0);

// One MLX affine weight's tiled form: codes [tiled_words(w.out, w.in, w.bits)] and scale/bias quadruples
// [tiled_weight_scale_bytes(w)] (tile_codes and tile_scales of w).
size_t tiled_weight_scale_bytes(const Weight& w);
void tile_weight(const Weight& w, uint32_t* codes, void* quads);

}  // namespace rapid::cuda
