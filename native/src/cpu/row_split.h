// Splits the output rows of a matmul over the pool in one dispatch. Thread t owns the t-th contiguous
// slice of the rows (the same rows every step, so each core streams the same weights with unbroken
// prefetch streams) and takes it chunk by chunk; a thread that finishes its own slice then steals chunks
// from the slices of late threads, so a descheduled worker (shared machine) costs only what it had not
// started. Which thread computes a row never changes its result: every kernel's rows are independent.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include "cpu/threadpool.h"

namespace rapid {

// Most slices one split uses; wider pools use this many threads for the rows.
constexpr int kMaxRowSlices = 64;

// Threads worth using for `rows` rows of `work_per_row` multiply-adds each: below ~32k multiply-adds
// per thread a dispatch costs more than it saves.
inline int row_split_threads(const ThreadPool& pool, int64_t rows, int64_t work_per_row) {
  const int64_t max_threads = std::max<int64_t>(1, rows * work_per_row / 32768);
  return int(std::min<int64_t>({int64_t(pool.size()), max_threads, (rows + 3) / 4, int64_t(kMaxRowSlices)}));
}

// Chunk of rows a thread takes at a time: about 8 per thread, at least 4 rows and ~64k multiply-adds,
// a multiple of 4 (the GEMV's row group).
inline int64_t row_split_chunk(int nt, int64_t rows, int64_t work_per_row) {
  int64_t chunk =
      std::max<int64_t>({int64_t(4), rows / (int64_t(nt) * 8), 65536 / std::max<int64_t>(1, work_per_row)});
  return (chunk + 3) / 4 * 4;
}

// Runs fn(r0, r1) over chunks covering [0, rows), on nt threads (nt from row_split_threads). Every r0,
// and every r1 but `rows`, is a multiple of `align` (a divisor of 64), whatever nt and chunk are.
template <class F>
void split_owned_rows(ThreadPool& pool, int nt, int64_t rows, int64_t chunk, F&& fn, int64_t align = 4) {
  chunk = (chunk + align - 1) / align * align;
  if (nt <= 1) {
    fn(int64_t(0), rows);
    return;
  }
  struct alignas(64) Slice {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  Slice slices[kMaxRowSlices];
  for (int t = 0; t < nt; ++t) {
    slices[t].next.store(std::min(rows, (rows * t / nt + align - 1) / align * align), std::memory_order_relaxed);
    slices[t].end = t + 1 == nt ? rows : std::min(rows, (rows * (t + 1) / nt + align - 1) / align * align);
  }
  pool.run([&](int tid, int) {
    if (tid >= nt) return;
    for (int k = 0; k < nt; ++k) {  // own slice first, then the others in turn
      Slice& s = slices[(tid + k) % nt];
      for (;;) {
        const int64_t b = s.next.fetch_add(chunk, std::memory_order_relaxed);
        if (b >= s.end) break;
        fn(b, std::min(s.end, b + chunk));
      }
    }
  });
}

// The usual split: threads and chunk from the rows' work (row_split_threads, row_split_chunk).
template <class F>
void split_rows(ThreadPool& pool, int64_t rows, int64_t work_per_row, F&& fn, int64_t align = 4) {
  const int nt = row_split_threads(pool, rows, work_per_row);
  split_owned_rows(pool, nt, rows, row_split_chunk(nt, rows, work_per_row), fn, align);
}

}  // namespace rapid
