// Builds the CPU Fast matmuls' interleaved copy of a 4- or 8-bit weight (cpu/gemv_interleaved.h).
#include "cpu/gemv_interleaved.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <mutex>
#include <new>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "cpu/matmul_fast.h"

namespace rapid {
namespace {

// The copies live in 2 MiB-aligned chunks of at least 64 MiB, advised as transparent huge pages: a
// decode streams every weight once per token, and with 4 KiB pages the TLB misses cost a third of
// one core's bandwidth (measured: 10-11 against 17-28 GB/s, one DRAM-resident GEMV shape). Weights
// are carved from the current chunk in build order; a chunk is freed when its last copy is.
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kChunkBytes = size_t(64) << 20;

struct Chunk {
  uint8_t* base = nullptr;
  size_t size = 0, used = 0;
  ~Chunk() {
#if defined(__linux__)
    if (base != nullptr) munmap(base, size);
#else
    ::operator delete(base, std::align_val_t(kHugePage));
#endif
  }
};

std::shared_ptr<Chunk> new_chunk(size_t need) {
  auto c = std::make_shared<Chunk>();
  c->size = (std::max(need, kChunkBytes) + kHugePage - 1) / kHugePage * kHugePage;
#if defined(__linux__)
  // mmap returns page-aligned memory; map one huge page more and trim to a 2 MiB boundary.
  void* p = mmap(nullptr, c->size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), b = (a + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
  if (b > a) munmap(p, b - a);
  munmap(reinterpret_cast<void*>(b + c->size), a + kHugePage - b);  // b < a + 2 MiB: never empty
  c->base = reinterpret_cast<uint8_t*>(b);
  madvise(c->base, c->size, MADV_HUGEPAGE);
#else
  c->base = static_cast<uint8_t*>(::operator new(c->size, std::align_val_t(kHugePage)));
#endif
  return c;
}

// `bytes` (64-byte aligned) from the current chunk, or a new one; returns the chunk that owns them.
std::shared_ptr<Chunk> carve(size_t bytes, uint8_t*& out) {
  static std::mutex mu;
  static std::weak_ptr<Chunk> current;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<Chunk> c = current.lock();
  if (c == nullptr || c->size - c->used < bytes) {
    c = new_chunk(bytes);
    current = c;
  }
  out = c->base + c->used;
  c->used += (bytes + 63) / 64 * 64;
  return c;
}

// Drops the resident whole pages inside [p, p + bytes) of a read-only file mapping (they fault back in
// from the file if read again); the partial pages at the ends may hold a neighbour tensor and stay.
void drop_pages(const void* p, size_t bytes) {
#if defined(__linux__)
  const uintptr_t pg = uintptr_t(sysconf(_SC_PAGESIZE)), b = reinterpret_cast<uintptr_t>(p);
  const uintptr_t a = (b + pg - 1) & ~(pg - 1), e = (b + bytes) & ~(pg - 1);
  if (e > a) madvise(reinterpret_cast<void*>(a), e - a, MADV_DONTNEED);
#else
  (void)p;
  (void)bytes;
#endif
}

// W's row-major codes, scales and biases (drop_pages of each).
void drop_rows(const Weight& W) {
  const size_t groups = size_t(W.out) * size_t(W.in / W.group);
  drop_pages(W.data, size_t(W.out) * size_t(W.in) * size_t(W.bits) / 8);
  drop_pages(W.scales, groups * dtype_size(W.dtype));
  drop_pages(W.biases, groups * dtype_size(W.dtype));
}

}  // namespace

bool interleaved_gemv_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("RAPID_INTERLEAVED_GEMV");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  return on;
}

std::shared_ptr<const InterleavedRows> interleave_rows(const Weight& W, ThreadPool& pool) {
  auto L = std::make_shared<InterleavedRows>();
  const int64_t ng = W.in / W.group;
  const size_t es = dtype_size(W.dtype);
  const int64_t br = W.bits == 8 ? kInterleaveRows8 : kInterleaveRows;  // rows per block
  L->out = W.out;
  L->in = W.in;
  L->group = W.group;
  L->bits = W.bits;
  L->block_rows = br;
  L->blocks = (W.out + br - 1) / br;
  L->dtype = W.dtype;
  L->code_bytes = size_t(W.group) * 8;  // 16 rows x G/2 bytes, or 8 rows x G bytes
  L->group_bytes = L->code_bytes + 2 * size_t(br) * es;
  L->block_bytes = size_t(ng) * L->group_bytes;
  L->src = W.data;
  uint8_t* base = nullptr;
  L->arena = carve(size_t(L->blocks) * L->block_bytes, base);
  L->data = base;
  const size_t row_bytes = size_t(W.in) * size_t(W.bits) / 8;
  const int64_t dwords = W.group * W.bits / 32;  // per row and group
  // 8-bit codes are stored as q - 128 (XOR 0x80 per byte): the signed operand of the AVX2 sign trick.
  const uint32_t flip = W.bits == 8 ? 0x80808080u : 0u;
  const auto* codes = static_cast<const uint8_t*>(W.data);
  const auto* scales = static_cast<const uint8_t*>(W.scales);
  const auto* biases = static_cast<const uint8_t*>(W.biases);
  pool.parallel_for(L->blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t g = 0; g < ng; ++g) {
        uint8_t* dst = base + size_t(b) * L->block_bytes + size_t(g) * L->group_bytes;  // [dwords][br] dwords
        uint8_t* ds = dst + L->code_bytes;                                                // [br] scales
        uint8_t* db = ds + size_t(br) * es;                                               // [br] biases
        for (int64_t i = 0; i < br; ++i) {
          const int64_t r = b * br + i;
          if (r >= W.out) {
            for (int64_t j = 0; j < dwords; ++j) std::memset(dst + size_t(j * br + i) * 4, 0, 4);
            std::memset(ds + size_t(i) * es, 0, es);
            std::memset(db + size_t(i) * es, 0, es);
            continue;
          }
          const uint8_t* src = codes + size_t(r) * row_bytes + size_t(g * dwords * 4);
          for (int64_t j = 0; j < dwords; ++j) {
            uint32_t v;
            std::memcpy(&v, src + j * 4, 4);
            v ^= flip;
            std::memcpy(dst + size_t(j * br + i) * 4, &v, 4);
          }
          std::memcpy(ds + size_t(i) * es, scales + size_t(r * ng + g) * es, es);
          std::memcpy(db + size_t(i) * es, biases + size_t(r * ng + g) * es, es);
        }
      }
  });
  return L;
}

const InterleavedRows* interleaved_rows(const Weight& W, ThreadPool& pool) {
  if (W.interleaved == nullptr || W.kind != WeightKind::Affine || (W.bits != 4 && W.bits != 8) || W.in % 64 != 0 ||
      (W.group != 32 && W.group != 64 && W.group != 128) || !interleaved_gemv_enabled())
    return nullptr;
  const kern::Kernels& k = detail::active_kernels();
  // 8-bit copies only where the family reads them (AVX2); elsewhere 8-bit keeps its row-major kernels.
  if (W.bits == 8 && (k.gemv_interleaved(8) == nullptr || k.gemm_interleaved(8) == nullptr)) return nullptr;
  InterleavedSlot& s = *W.interleaved;
  std::call_once(s.once, [&] {
    s.rows = interleave_rows(W, pool);
    // Where the family reads the copy at every batch size, the rows it replaces need not stay resident.
    if (s.rows_mapped && k.gemm_interleaved(W.bits) != nullptr) drop_rows(W);
  });
  const InterleavedRows* L = s.rows.get();
  // A view of other rows that kept the slot (a copy with moved pointers) must not read this copy.
  if (L->src != W.data || L->out != W.out || L->in != W.in || L->group != W.group || L->bits != W.bits) return nullptr;
  return L;
}

bool interleave_at_load(const Weight& W, ThreadPool& pool) {
  const kern::Kernels& k = detail::active_kernels();
  // A family without both kernels for W's bits still reads the rows: they stay in use.
  if (k.gemv_interleaved(W.bits) == nullptr || k.gemm_interleaved(W.bits) == nullptr) return false;
  return interleaved_rows(W, pool) != nullptr;
}

}  // namespace rapid
