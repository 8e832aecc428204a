// Persistent spin-then-sleep worker pool; see cpu/threadpool.h.
#include "cpu/threadpool.h"

#include <algorithm>
#if defined(__linux__)
#include <sched.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RAPID_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define RAPID_PAUSE() asm volatile("yield")
#else
#define RAPID_PAUSE() ((void)0)
#endif

namespace rapid {
namespace {
// Spin this many pause iterations (~50-100 µs) before sleeping: decode issues a parallel region
// every few µs, so workers must still be spinning when the next one comes.
constexpr int kSpinIters = 1 << 15;
thread_local bool t_in_pool = false;  // nested run() from a worker executes inline
}  // namespace

int ThreadPool::hardware_threads() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  unsigned n = std::thread::hardware_concurrency();
  return n ? int(n) : 1;
}

ThreadPool::ThreadPool(int n) {
  n_ = n > 0 ? n : hardware_threads();
  threads_.reserve(size_t(n_ - 1));
  for (int t = 1; t < n_; ++t) threads_.emplace_back([this, t] { worker(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  state_.fetch_add(uint64_t(1) << 16);
  {
    std::lock_guard<std::mutex> lk(mu_);
    cv_.notify_all();
  }
  for (auto& th : threads_) th.join();
}

// Claims and runs tids of job generation `gen` until none are left; false if the job changed.
bool ThreadPool::claim_and_run(uint64_t gen) {
  uint64_t st = state_.load(std::memory_order_acquire);
  for (;;) {
    if ((st >> 16) != gen) return false;
    int t = int(st & 0xffff);
    if (t >= n_) return true;
    if (!state_.compare_exchange_weak(st, st + 1, std::memory_order_acq_rel)) continue;
    try {
      (*job_)(t, n_);
    } catch (...) {
      std::lock_guard<std::mutex> lk(err_mu_);
      if (!error_) error_ = std::current_exception();
    }
    done_.fetch_add(1, std::memory_order_acq_rel);
    st = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker(int) {
  t_in_pool = true;
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = state_.load(std::memory_order_acquire) >> 16;
    for (int i = 0; g == seen && i < kSpinIters; ++i) {
      RAPID_PAUSE();
      g = state_.load(std::memory_order_acquire) >> 16;
    }
    if (g == seen) {
      sleepers_.fetch_add(1);
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return (state_.load() >> 16) != seen; });
      sleepers_.fetch_sub(1);
      g = state_.load() >> 16;
    }
    seen = g;
    if (stop_.load()) return;
    claim_and_run(g);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_ == 1 || t_in_pool || in_run_) {
    // Single thread, or nested call: run every tid inline so fn's partitioning stays valid.
    for (int t = 0; t < n_; ++t) fn(t, n_);
    return;
  }
  in_run_ = true;
  ++dispatches_;
  job_ = &fn;
  error_ = nullptr;
  done_.store(0, std::memory_order_relaxed);
  const uint64_t gen = (state_.load(std::memory_order_relaxed) >> 16) + 1;
  state_.store(gen << 16);  // seq_cst: pairs with the sleepers_ check below
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lk(mu_);
    cv_.notify_all();
  }
  t_in_pool = true;
  claim_and_run(gen);
  t_in_pool = false;
  // Only tids already claimed by a worker can still be running.
  while (done_.load(std::memory_order_acquire) < n_) RAPID_PAUSE();
  in_run_ = false;
  job_ = nullptr;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t align) {
  if (n <= 0) return;
  if (align < 1) align = 1;
  int64_t units = (n + align - 1) / align;
  int nt = int(std::min<int64_t>(n_, units));
  if (nt <= 1) {
    fn(0, n);
    return;
  }
  run([&](int tid, int) {
    if (tid >= nt) return;
    int64_t b = units * tid / nt * align;
    int64_t e = std::min(n, units * (tid + 1) / nt * align);
    if (b < e) fn(b, e);
  });
}

}  // namespace rapid
