// One persistent worker pool for all kernels. Dispatch is a generation counter the workers spin on
// briefly (then sleep on a condition variable), so a parallel region costs ~1-3 µs when warm.
// Thread ids are claimed, not assigned: if a worker is descheduled (shared machine), the caller
// runs its share instead of waiting for it to wake up.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rapid {

class ThreadPool {
 public:
  // n total threads including the caller (n <= 0: hardware concurrency). n == 1 runs inline.
  explicit ThreadPool(int n = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_; }

  // Parallel regions handed to the workers so far (inline runs not counted): a step's dispatch count
  // is the difference around it (bench:cpu reports it per decoded token).
  uint64_t dispatches() const { return dispatches_; }

  // Runs fn(tid, nthreads) once for every tid in [0, size()) and waits for all of them. Which OS
  // thread runs a given tid is unspecified (usually one each; the caller may take a late one's).
  // Not reentrant: calling run from inside fn runs the inner call inline on that thread.
  // An exception thrown by fn is rethrown in the caller after all threads finish.
  void run(const std::function<void(int tid, int nthreads)>& fn);

  // Splits [0, n) into at most size() contiguous chunks (multiples of `align`, except the last)
  // and runs fn(begin, end) for each non-empty chunk.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn,
                    int64_t align = 1);

  // Hardware threads available to this process (sched affinity), at least 1.
  static int hardware_threads();

 private:
  void worker(int tid);

  bool claim_and_run(uint64_t gen);

  int n_ = 1;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  alignas(64) std::atomic<uint64_t> state_{0};  // generation << 16 | next unclaimed tid
  alignas(64) std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::mutex err_mu_;
  std::exception_ptr error_;
  bool in_run_ = false;
  uint64_t dispatches_ = 0;  // written by the one calling thread only
};

}  // namespace rapid
