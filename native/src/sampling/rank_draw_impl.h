// The body of rank_draw (sampling/rank_draw.cpp), included twice there: once for generic x86-64 / any CPU and
// once inside an AVX2 target region, where the compiler vectorizes the bin and block scans at twice the width.
// Everything here has internal linkage (the includer wraps it in an anonymous namespace).

// Bins of 1/64 in log-weight distance d = mx_t - l·inv_t from the top, up to 32 (beyond, a weight is below 2^-46:
// fixed-point 0); the last bin holds everything farther. d never falls as the logit rises, so the bins follow the
// sorted order and equal logits share a bin. The CUDA sampler's cluster path bins the same way.
constexpr int kDistBins = 2048;
constexpr float kBinsPerUnit = 64.0f;
constexpr uint16_t kNoBin = kDistBins + 1;  // a masked or NaN logit's bin: past every select, its weight 0
constexpr int64_t kScanBlock = 64;  // tokens per block when collecting one bin's entries, and of build's passes

// fixed_weight(w) where w passes min-p's floor, else 0: a mask, not a select, which compilers turn into a branch
// that mispredicts on about every other token of a row.
uint64_t fixed_over(float w, float min_p) { return fixed_weight(w) & (uint64_t(0) - uint64_t(w >= min_p)); }

struct Entry {
  float logit;
  int32_t id;
};

// Logit descending, id ascending: a total order (-0 ties +0 by id; no NaN reaches a bin's entries).
bool better(const Entry& a, const Entry& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }

// Order-preserving key of a logit (larger logit, larger key; -0 as +0).
uint32_t key_of(float v) {
  if (v == 0.0f) v = 0.0f;
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// An entry of the sorted order (bin, logit, id), or past every entry (no cut).
struct Pos {
  int bin = kDistBins + 1;
  Entry e{0.0f, 0};
  bool at_or_before(int b, const Entry& x) const { return b < bin || (b == bin && !better(e, x)); }
};

// The first of `e` (in id order) in the sorted order whose running weight passes target, or -1: an MSD radix
// select over the logits' keys (per byte, a histogram of weight by digit among the entries whose higher digits
// are fixed), then equal keys in id order. No sort, whatever the number of entries.
template <class W>
int64_t select_in(const std::vector<Entry>& e, uint64_t target, W&& weight) {
  thread_local std::vector<uint32_t> idx, next;
  idx.resize(e.size());
  for (size_t i = 0; i < e.size(); ++i) idx[i] = uint32_t(i);
  for (int shift = 24; shift >= 0 && idx.size() > 1; shift -= 8) {
    uint64_t sum[256] = {};
    for (uint32_t i : idx) sum[(key_of(e[i].logit) >> shift) & 255u] += weight(e[i].id);
    int digit = -1;
    for (int d = 255; d >= 0; --d) {  // larger key first
      if (target < sum[d]) {
        digit = d;
        break;
      }
      target -= sum[d];
    }
    if (digit < 0) return -1;
    next.clear();
    for (uint32_t i : idx)
      if (((key_of(e[i].logit) >> shift) & 255u) == uint32_t(digit)) next.push_back(i);
    idx.swap(next);
  }
  uint64_t acc = 0;  // equal keys: id order
  for (uint32_t i : idx) {
    acc += weight(e[i].id);
    if (target < acc) return int64_t(i);
  }
  return -1;
}

// The row's bins and, on demand, the entries of the few bins a select lands in, in id order (the thread's own
// buffers, kept between rows).
struct Bins {
  const float* logits;
  const float* w;
  int64_t vocab;
  float min_p;
  std::vector<uint16_t>& bin_of;  // [vocab]
  std::array<uint32_t, kNoBin + 1> count{};     // built only for top-k (a select by rank)
  std::array<uint64_t, kNoBin + 1> mass{};      // fixed-point weight
  std::array<uint64_t, kNoBin + 1> mass_mp{};   // of the weights that pass min-p
  int64_t n_valid = 0;                          // with count

  struct Slot {
    int bin = -1;
    std::vector<Entry> e;
  };
  // The thread's buffers, kept between rows: a fresh megabyte per row costs more in page faults than the work.
  struct Scratch {
    std::array<Slot, 3> slots;
    std::vector<Entry> cut;
  };
  std::array<Slot, 3>& slots;
  std::vector<Entry>& cut;
  int next_slot = 0;

  Bins(const float* l, const float* wt, int64_t n, float mp, std::vector<uint16_t>& bins, Scratch& scratch)
      : logits(l), w(wt), vocab(n), min_p(mp), bin_of(bins), slots(scratch.slots), cut(scratch.cut) {
    for (Slot& x : slots) x.bin = -1;
  }

  uint64_t fixed(int32_t id) const { return fixed_weight(w[id]); }
  uint64_t fixed_mp(int32_t id) const { return fixed_over(w[id], min_p); }

  // The bins, per block of kScanBlock tokens: first branch-free, so the compiler vectorizes it (d < 32 exactly
  // when d · 64 < 2048, a power-of-two scale; a masked or NaN logit, not > -inf, gets kNoBin), then the block's
  // histogram while its bins are in L1. A masked token adds its fixed-point 0 to kNoBin's slot: no branch.
  void build(float inv_t, float mx_t, bool counts) {
    bin_of.resize(size_t(vocab));
    uint16_t* bo = bin_of.data();
    for (int64_t i0 = 0; i0 < vocab; i0 += kScanBlock) {
      const int64_t n = std::min(kScanBlock, vocab - i0);
      const float* l = logits + i0;
      const float* wt = w + i0;
      uint16_t* b = bo + i0;
      for (int64_t j = 0; j < n; ++j) {
        const bool valid = l[j] > -INFINITY;
        const float at = std::min((mx_t - l[j] * inv_t) * kBinsPerUnit, float(kDistBins));
        b[j] = valid ? uint16_t(int32_t(valid ? at : 0.0f)) : kNoBin;  // this form vectorizes; NaN never converted
      }
      for (int64_t j = 0; j < n; ++j) mass[b[j]] += fixed_weight(wt[j]);
      if (counts)
        for (int64_t j = 0; j < n; ++j) ++count[b[j]];
      if (min_p > 0.0f)
        for (int64_t j = 0; j < n; ++j) mass_mp[b[j]] += fixed_over(wt[j], min_p);
    }
    if (counts)
      for (int b = 0; b <= kDistBins; ++b) n_valid += count[size_t(b)];
    if (min_p <= 0.0f) mass_mp = mass;
  }

  // Bin b's entries in id order.
  const std::vector<Entry>& entries(int b) {
    for (Slot& x : slots)
      if (x.bin == b) return x.e;
    Slot& s = slots[size_t(next_slot)];
    next_slot = (next_slot + 1) % int(slots.size());
    s.bin = b;
    s.e.clear();
    // A bin holds few of the vocabulary's tokens: each block of 64 is first tested for any member (a fixed-length
    // OR the compiler vectorizes), and only blocks with one are walked.
    const uint16_t* bo = bin_of.data();
    const uint16_t want = uint16_t(b);
    const auto take = [&](int64_t from, int64_t to) {
      for (int64_t i = from; i < to; ++i)
        if (bo[i] == want) s.e.push_back({logits[i], int32_t(i)});
    };
    const int64_t full = vocab - vocab % kScanBlock;
    for (int64_t i0 = 0; i0 < full; i0 += kScanBlock) {
      int any = 0;
      for (int64_t j = 0; j < kScanBlock; ++j) any |= bo[i0 + j] == want;
      if (any) take(i0, i0 + kScanBlock);
    }
    take(full, vocab);
    return s.e;
  }

  // The entries of bin b at or before `end`, in id order (the last cut is kept: the draw's total and the draw
  // itself ask for the same one).
  int cut_bin = -1;
  Entry cut_end{0.0f, -1};
  const std::vector<Entry>& entries_to(int b, const Pos& end) {
    const std::vector<Entry>& all = entries(b);
    if (b < end.bin) return all;
    if (cut_bin == b && cut_end.id == end.e.id && cut_end.logit == end.e.logit) return cut;
    cut.clear();
    for (const Entry& x : all)
      if (end.at_or_before(b, x)) cut.push_back(x);
    cut_bin = b;
    cut_end = end.e;
    return cut;
  }

  // The first entry in the sorted order whose running weight passes target (sum before <= target < sum through
  // it), over the entries at or before `end`: bin_w(b) is bin b's whole weight, entry_w(id) an entry's. Returns
  // false when the weights total no more than target.
  template <class BinW, class EntryW>
  bool select(uint64_t target, const Pos& end, BinW&& bin_w, EntryW&& entry_w, Pos& at) {
    uint64_t acc = 0;
    const int last = std::min(end.bin, kDistBins);
    for (int b = 0; b <= last; ++b) {
      if (bin_w(b) == 0) continue;  // empty, or only zero weights: nothing to pick
      if (b < end.bin && target >= acc + bin_w(b)) {
        acc += bin_w(b);
        continue;
      }
      const std::vector<Entry>& e = entries_to(b, end);
      const int64_t j = select_in(e, target - acc, entry_w);
      if (j >= 0) {
        at = {b, e[size_t(j)]};
        return true;
      }
      if (b < end.bin) return false;  // the bin's weight held the target: cannot happen (exact sums)
    }
    return false;
  }

  // The weight of the entries at or before `end`: whole bins before it, part of its own.
  template <class BinW, class EntryW>
  uint64_t weight_to(const Pos& end, BinW&& bin_w, EntryW&& entry_w) {
    uint64_t s = 0;
    for (int b = 0; b <= std::min(end.bin, kDistBins); ++b) {
      if (bin_w(b) == 0) continue;
      if (b < end.bin) {
        s += bin_w(b);
      } else {
        for (const Entry& x : entries_to(b, end)) s += entry_w(x.id);
      }
    }
    return s;
  }
};

int32_t rank_draw_impl(const float* logits, const float* w, int64_t vocab, float inv_t, float mx_t, const SampleParams& p, double u) {
  if (p.top_k == 0 && p.top_p >= 1.0f) {
    // No truncation by rank: the candidates in id order, min-p as a weight floor (the top weight is 1).
    const auto wt = [&](int64_t i) { return fixed_over(w[i], p.min_p); };
    uint64_t total = 0;
    for (int64_t i = 0; i < vocab; ++i) total += wt(i);
    if (total == 0) return -1;
    const uint64_t target = draw_target(u, total);
    uint64_t acc = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      acc += wt(i);
      if (target < acc) return int32_t(i);
    }
    return -1;
  }

  thread_local std::vector<uint16_t> bin_of;
  thread_local Bins::Scratch scratch;
  Bins bins(logits, w, vocab, p.min_p, bin_of, scratch);
  bins.build(inv_t, mx_t, p.top_k > 0);
  const auto fixed = [&](int32_t i) { return bins.fixed(i); };
  const auto fixed_mp = [&](int32_t i) { return bins.fixed_mp(i); };
  const auto mass = [&](int b) { return bins.mass[size_t(b)]; };
  const auto mass_mp = [&](int b) { return bins.mass_mp[size_t(b)]; };
  // Top-k: the k-th entry of the sorted order, found by counts.
  const Pos none;
  Pos end;
  if (p.top_k > 0 && p.top_k < bins.n_valid) {
    const auto one = [](int32_t) { return uint64_t(1); };
    if (!bins.select(uint64_t(p.top_k - 1), none, [&](int b) { return uint64_t(bins.count[size_t(b)]); }, one, end)) return -1;
  }
  if (p.top_p < 1.0f) {
    // The nucleus of the top-k set's weight z ends at the first entry whose running weight reaches
    // nucleus_target(z), i.e. passes nucleus_target - 1.
    const uint64_t z = bins.weight_to(end, mass, fixed);
    if (z == 0) return -1;
    const Pos k_end = end;
    if (!bins.select(nucleus_target(p.top_p, z) - 1, k_end, mass, fixed, end)) return -1;
  }
  // The draw over the candidates (at or before the end) whose weight passes min-p (weights fall along the order).
  const uint64_t total = bins.weight_to(end, mass_mp, fixed_mp);
  if (total == 0) return -1;
  Pos at;
  if (!bins.select(draw_target(u, total), end, mass_mp, fixed_mp, at)) return -1;
  return at.e.id;
}
