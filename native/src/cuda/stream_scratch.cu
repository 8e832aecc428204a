#include "cuda/stream_scratch.h"
#include <string>
#include "cuda/cuda_kernels.h"

namespace rapid::cuda {

void* StreamScratch::get(cudaStream_t s) {
  int dev = 0;
  check(cudaGetDevice(&dev), (std::string(owner_) + ": cudaGetDevice").c_str());
  std::lock_guard<std::mutex> lock(mu_);
  for (const Entry& e : entries_)
    if (e.device == dev && e.stream == s) return e.ptr;
  // Relaxed capture mode lets this thread allocate while `s` is being captured; the buffer is not part of the
  // graph and outlives it.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  check(cudaThreadExchangeStreamCaptureMode(&mode), (std::string(owner_) + ": capture mode").c_str());
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, bytes_);
  // Zeroed on `s` itself when it is not capturing, so the first kernel that reads the counters comes after (a
  // legacy-stream memset is unordered with a non-blocking stream); during a capture, before it, as before.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (err == cudaSuccess) err = cudaStreamIsCapturing(s, &capturing);
  if (err == cudaSuccess && zero_from_ < bytes_) {
    char* const counters = static_cast<char*>(ptr) + zero_from_;
    err = capturing == cudaStreamCaptureStatusNone ? cudaMemsetAsync(counters, 0, bytes_ - zero_from_, s)
                                                   : cudaMemset(counters, 0, bytes_ - zero_from_);
  }
  cudaThreadExchangeStreamCaptureMode(&mode);  // restore the caller's mode
  if (err != cudaSuccess && ptr) cudaFree(ptr);
  check(err, (std::string(owner_) + ": cudaMalloc scratch").c_str());
  entries_.push_back({dev, s, ptr});
  return ptr;
}

void StreamScratch::release(cudaStream_t s) {
  int dev = 0;
  check(cudaGetDevice(&dev), (std::string(owner_) + ": cudaGetDevice").c_str());
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].device == dev && entries_[i].stream == s) {
      void* ptr = entries_[i].ptr;
      entries_.erase(entries_.begin() + std::ptrdiff_t(i));
      check(cudaFree(ptr), (std::string(owner_) + ": cudaFree scratch").c_str());
      return;
    }
}

}  // namespace rapid::cuda
