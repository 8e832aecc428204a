// The row-count and dtype dispatch of one ISA's packed-GEMM tile, included (twice) by
// cpu/gemm_packed_x86.cpp inside each ISA's namespace, after its `kMr` and `tile<M, D>`. No include guard.

// tile<m, D> for a run-time m in [1, kMr].
template <DType D, int... M>
void tile_m(std::integer_sequence<int, M...>, const float* xp, int m, const void* w, int64_t kc, float* y, int64_t ldy,
            bool acc) {
  using Fn = void (*)(const float*, const void*, int64_t, float*, int64_t, bool);
  static constexpr Fn fns[] = {&tile<M + 1, D>...};
  fns[m - 1](xp, w, kc, y, ldy, acc);
}

void tile_any(const float* xp, int m, const void* w, DType dt, int64_t kc, float* y, int64_t ldy, bool acc) {
  const auto ms = std::make_integer_sequence<int, kMr>{};
  if (dt == DType::BF16) tile_m<DType::BF16>(ms, xp, m, w, kc, y, ldy, acc);
  else if (dt == DType::F16) tile_m<DType::F16>(ms, xp, m, w, kc, y, ldy, acc);
  else tile_m<DType::F32>(ms, xp, m, w, kc, y, ldy, acc);
}
