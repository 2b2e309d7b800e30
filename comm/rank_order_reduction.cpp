// The rank-order reduction of comm/rank_order_reduction.h: pure arithmetic; no communication,
// no allocation.
//
// Two implementations of the same arithmetic: a portable one in tiles, and an AVX2 (+ F16C)
// one chosen at run time that does the whole chain for 8 elements at a time in registers.
// Both perform the same IEEE operations on every element in the same order, and convert
// exactly as runtime/dtype.h does (checked over all 2^32 fp32 inputs when written), so an
// element's bits depend neither on the machine's SIMD nor on where the element sits.
#include "comm/rank_order_reduction.h"

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "runtime/status.h"

namespace zt {

namespace {

struct SumOp {
  static float apply(float acc, float x) { return acc + x; }
};
struct MaxOp {
  // NaN wins, otherwise the larger; on a tie (+0 vs -0) the earlier rank's value stays.
  static float apply(float acc, float x) {
    float larger = x > acc ? x : acc;
    return acc != acc ? acc : (x != x ? x : larger);
  }
};

// Portable path. Elements per tile: the fp32 accumulator (4 KiB) stays in L1 while every
// contribution is combined into it, so out may alias any one contribution: a tile reads all of
// them before it writes. Full tiles have a compile-time length so the loops vectorize at -O2
// (GCC's very-cheap cost model needs a known trip count).
constexpr int64_t kTile = 1024;

template <class Codec, class Op, bool kFullTile>
void reduce_tile(std::span<const void* const> contributions, void* out, int64_t base,
                 int64_t tile_len) {
  using S = typename Codec::Storage;
  const int64_t n = kFullTile ? kTile : tile_len;
  float acc[kTile];
  const S* first = static_cast<const S*>(contributions[0]) + base;
  for (int64_t j = 0; j < n; ++j) acc[j] = Codec::widen(first[j]);
  for (size_t p = 1; p < contributions.size(); ++p) {
    const S* x = static_cast<const S*>(contributions[p]) + base;
    for (int64_t j = 0; j < n; ++j) acc[j] = Op::apply(acc[j], Codec::widen(x[j]));
  }
  S* o = static_cast<S*>(out) + base;
  for (int64_t j = 0; j < n; ++j) o[j] = Codec::narrow(acc[j]);
}

template <class Codec, class Op>
void reduce_portable(std::span<const void* const> contributions, void* out, int64_t begin,
                     int64_t count) {
  int64_t base = begin;
  for (; base + kTile <= count; base += kTile)
    reduce_tile<Codec, Op, true>(contributions, out, base, kTile);
  if (base < count) reduce_tile<Codec, Op, false>(contributions, out, base, count - base);
}

#if defined(__x86_64__)
#define ZT_AVX2 __attribute__((target("avx2,f16c")))

bool has_avx2_f16c() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"); }

// dtype is a template argument so that the inner loops carry no branch on it.
template <DType dtype>
ZT_AVX2 inline __m256 load8(const void* data, int64_t j) {
  if constexpr (dtype == DType::kF32) return _mm256_loadu_ps(static_cast<const float*>(data) + j);
  const __m128i h =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(data) + j));
  if constexpr (dtype == DType::kF16) return _mm256_cvtph_ps(h);  // exact, like fp16_to_fp32
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <DType dtype>
ZT_AVX2 inline void store8(void* data, int64_t j, __m256 f) {
  if constexpr (dtype == DType::kF32) return _mm256_storeu_ps(static_cast<float*>(data) + j, f);
  const __m256 is_nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  const __m256i x = _mm256_castps_si256(f);
  __m128i h;
  if constexpr (dtype == DType::kF16) {
    // fp32_to_fp16 turns every NaN into sign | 0x7e00, which is what F16C gives for the quiet
    // NaN without payload: NaNs become that first. Everything else F16C rounds to nearest even
    // with IEEE overflow and subnormals, as fp32_to_fp16 does.
    const __m256i quiet_nan =
        _mm256_or_si256(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0x80000000u))),
                        _mm256_set1_epi32(0x7fc00000));
    const __m256 canonical = _mm256_blendv_ps(f, _mm256_castsi256_ps(quiet_nan), is_nan);
    h = _mm256_cvtps_ph(canonical, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {
    // fp32_to_bf16 lane-wise: (x + 0x7fff + lsb) >> 16; NaN: (x >> 16) | 0x40.
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    const __m256i nan_bits = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    const __m256i bits = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(nan_bits), is_nan));
    // Eight 32-bit lanes (each < 2^16) to 16 bits in order: packus works per 128-bit half,
    // giving quads (a0-3, a0-3, a4-7, a4-7); quads 0 and 2 are the result.
    const __m256i packed = _mm256_packus_epi32(bits, bits);
    h = _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(data) + j), h);
}

ZT_AVX2 inline __m256 apply8(SumOp, __m256 acc, __m256 x) { return _mm256_add_ps(acc, x); }
ZT_AVX2 inline __m256 apply8(MaxOp, __m256 acc, __m256 x) {
  __m256 larger = _mm256_max_ps(x, acc);  // x > acc ? x : acc, as MaxOp::apply
  larger = _mm256_blendv_ps(larger, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_blendv_ps(larger, acc, _mm256_cmp_ps(acc, acc, _CMP_UNORD_Q));
}

// Elements [0, count - count % 8): every contribution's 8 lanes are loaded before the 8
// results are stored, so out may alias one contribution. Returns where the tail starts.
template <class Op, DType dtype>
ZT_AVX2 int64_t reduce_avx2(std::span<const void* const> contributions, void* out, int64_t count) {
  const size_t m = contributions.size();
  int64_t j = 0;
  for (; j + 8 <= count; j += 8) {
    __m256 acc = load8<dtype>(contributions[0], j);
    for (size_t p = 1; p < m; ++p) acc = apply8(Op{}, acc, load8<dtype>(contributions[p], j));
    store8<dtype>(out, j, acc);
  }
  return j;
}

template <class Op>
int64_t reduce_avx2(std::span<const void* const> contributions, void* out, int64_t count,
                    DType dtype) {
  switch (dtype) {
    case DType::kF32: return reduce_avx2<Op, DType::kF32>(contributions, out, count);
    case DType::kF16: return reduce_avx2<Op, DType::kF16>(contributions, out, count);
    case DType::kBF16: return reduce_avx2<Op, DType::kBF16>(contributions, out, count);
  }
  return 0;
}
#undef ZT_AVX2
#endif

template <class Op>
void reduce_op(std::span<const void* const> contributions, void* out, int64_t count, DType dtype,
               ReduceKernel kernel) {
  int64_t begin = 0;
#if defined(__x86_64__)
  if (kernel == ReduceKernel::kFastest && has_avx2_f16c())
    begin = reduce_avx2<Op>(contributions, out, count, dtype);
#endif
  switch (dtype) {
    case DType::kF32: return reduce_portable<F32Codec, Op>(contributions, out, begin, count);
    case DType::kF16: return reduce_portable<F16Codec, Op>(contributions, out, begin, count);
    case DType::kBF16: return reduce_portable<BF16Codec, Op>(contributions, out, begin, count);
  }
}

}  // namespace

void reduce_in_rank_order(std::span<const void* const> contributions, void* out, int64_t count,
                          DType dtype, ReduceOp op, ReduceKernel kernel) {
  ZT_ASSERT(!contributions.empty(), "reduce of {} elements with no contributions", count);
  if (count <= 0) return;
  switch (op) {
    case ReduceOp::kSum: return reduce_op<SumOp>(contributions, out, count, dtype, kernel);
    case ReduceOp::kMax: return reduce_op<MaxOp>(contributions, out, count, dtype, kernel);
  }
}

}  // namespace zt
