// A fixed-size device buffer per (device, stream) for kernels that hand partial results between their blocks
// (split-K attention, the multi-block argmax). Made on the stream's first use and kept until released: a
// captured graph holds its address, and the first use may come during a capture.
#pragma once
#include <cuda_runtime.h>
#include <cstddef>
#include <mutex>
#include <vector>

namespace rapid::cuda {

class StreamScratch {
 public:
  // `owner` prefixes errors; [zero_from, bytes) is zeroed at allocation (counters the kernels leave at zero).
  StreamScratch(const char* owner, size_t bytes, size_t zero_from) : owner_(owner), bytes_(bytes), zero_from_(zero_from) {}

  // The buffer of stream `s` on the current device [bytes], allocated on first use.
  void* get(cudaStream_t s);
  // Frees the buffer of `s` (synchronizes the device); nothing if it has none. Call after the last launch on `s`
  // and after destroying every graph captured from it.
  void release(cudaStream_t s);

 private:
  struct Entry {
    int device;
    cudaStream_t stream;
    void* ptr;
  };
  const char* owner_;
  size_t bytes_, zero_from_;
  std::mutex mu_;
  std::vector<Entry> entries_;
};

}  // namespace rapid::cuda
