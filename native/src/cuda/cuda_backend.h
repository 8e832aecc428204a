// The CUDA backend's entry points for backend/device.cpp. Host-only: includes no CUDA header, so the
// generic code compiles the same way in both variants.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include "backend/device.h"

namespace rapid::cuda {

CudaStatus status();

// "" when the CUDA backend can run this model, else the reason (family, MoE, weight format ...).
std::string unsupported_reason(const Model& host);

// Device bytes the image tower's weights take once CudaOps has uploaded them (dequantized to bf16 under Fast, f32
// under Exact): an estimate from the stored size and format, high rather than low; 0 without a tower.
int64_t tower_device_bytes(const Model& host, Precision precision);

// Free bytes on the current device.
int64_t free_bytes();

// Copies the host model's weights to the device and allocates the KV storage of `geometry` there.
// The returned model keeps `host` (mappings, vision tower, config) and runs forward on the GPU, always at
// `precision` (Fast: the layers' affine codes are stored tiled for the tensor-core path).
std::unique_ptr<Model> make_cuda_model(std::unique_ptr<Model> host, const KvPool& geometry, Precision precision);

}  // namespace rapid::cuda
