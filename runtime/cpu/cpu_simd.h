// The CPU back end's vector helpers, shared by its kernel files: lane types (GCC's generic vector
// extension), load/store/splat, IEEE square root per lane type, exp_bounded, simd_loop, the fixed
// 16-lane sums every reduction uses, row_max, and the instruction-set dispatch run_isa.
// Pure arithmetic on registers and caller memory: no threads (cpu_parallel.h), no allocation, no
// kernels of the table (cpu_*_kernels.cpp).
//
// Vectorisation. GCC 12 at -O2 does not vectorise plain loops here: its "very-cheap" cost model
// refuses loops whose trip count is not a known multiple of the vector width, -fmath-errno keeps
// sqrt scalar, and -ftrapping-math blocks if-conversion of the clamps in exp. So the hot kernels
// are templates over a lane type V, written once with GCC's generic vector extension: the vector
// body instantiates them with V = a native vector (F4 for SSE2, F8 for AVX2, F16 for AVX-512) and
// the tail with V = float. Body and tail therefore run the same IEEE operations in the same order
// on every element (pinned by tests/runtime/kernels_determinism_test.cpp).
// Simple loops (residual, accumulate, casts, round_to, add) use `#pragma omp simd`, which GCC
// does vectorise.
// The widest instruction set the CPU offers is chosen once at construction
// (__builtin_cpu_supports); the environment variable ZT_CPU_SIMD=sse2|avx2|avx512 caps it, so tests
// can compare the paths. FMA is never enabled, and the build's -ffp-contract=off keeps the AVX-512
// path from contracting.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

// Vector arguments of inline helpers change the calling convention between instruction sets; every
// such helper is inlined into its caller (see run_isa below), so the ABI note is noise here.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace zt::cpu {

// ---------------------------------------------------------------------------------------------
// Lane types and the few operations that differ between a vector and a float.

typedef float F4 __attribute__((vector_size(16)));
typedef float F8 __attribute__((vector_size(32)));
typedef float F16 __attribute__((vector_size(64)));
typedef int32_t I4 __attribute__((vector_size(16)));
typedef int32_t I8 __attribute__((vector_size(32)));
typedef int32_t I16 __attribute__((vector_size(64)));
typedef double D8 __attribute__((vector_size(64)));

template <class V>
struct LaneTraits;
template <>
struct LaneTraits<float> {
  using Int = int32_t;
  static constexpr int64_t kWidth = 1;
};
template <>
struct LaneTraits<F4> {
  using Int = I4;
  static constexpr int64_t kWidth = 4;
};
template <>
struct LaneTraits<F8> {
  using Int = I8;
  static constexpr int64_t kWidth = 8;
};
template <>
struct LaneTraits<F16> {
  using Int = I16;
  static constexpr int64_t kWidth = 16;
};
template <class V>
constexpr int64_t kWidth = LaneTraits<V>::kWidth;

// A tag naming a lane type; generic lambdas receive it and read ::type.
template <class V>
struct Lanes {
  using type = V;
};

template <class V>
inline V load(const float* p) {
  if constexpr (std::is_same_v<V, float>) {
    return *p;
  } else {
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
  }
}
template <class V>
inline void store(float* p, V v) {
  if constexpr (std::is_same_v<V, float>) {
    *p = v;
  } else {
    std::memcpy(p, &v, sizeof(V));
  }
}
// The first m floats of p (0 < m <= V's width) in lanes 0..m-1, the other lanes 0; and its
// converse, lanes 0..m-1 stored to p[0, m). A short row's last, partial vector goes through
// these, so it runs the vector code instead of a scalar tail.
template <class V>
__attribute__((always_inline)) inline V load_first(const float* p, int64_t m) {
  if (m == kWidth<V>) return load<V>(p);
  V v{};
  std::memcpy(&v, p, static_cast<size_t>(m) * sizeof(float));
  return v;
}
template <class V>
__attribute__((always_inline)) inline void store_first(float* p, V v, int64_t m) {
  if (m == kWidth<V>) return store<V>(p, v);
  std::memcpy(p, &v, static_cast<size_t>(m) * sizeof(float));
}

// Every lane = x, bit for bit (-0 and NaN included).
template <class V>
inline V splat(float x) {
  if constexpr (std::is_same_v<V, float>) {
    return x;
  } else {
    V v;
    for (int64_t i = 0; i < kWidth<V>; ++i) v[i] = x;
    return v;
  }
}
template <class V>
inline typename LaneTraits<V>::Int bits_of(V x) {
  if constexpr (std::is_same_v<V, float>) {
    return std::bit_cast<int32_t>(x);
  } else {
    return (typename LaneTraits<V>::Int)x;
  }
}
template <class V>
inline V float_of(typename LaneTraits<V>::Int b) {
  if constexpr (std::is_same_v<V, float>) {
    return std::bit_cast<float>(b);
  } else {
    return (V)b;
  }
}

// IEEE square root (correctly rounded in every form, so all forms agree bit for bit).
inline float vsqrt(float x) { return std::sqrt(x); }
inline F4 vsqrt(F4 x) { return __builtin_ia32_sqrtps(x); }
__attribute__((target("avx"))) inline F8 vsqrt(F8 x) { return __builtin_ia32_sqrtps256(x); }
__attribute__((target("avx512f"))) inline F16 vsqrt(F16 x) {
  return __builtin_ia32_sqrtps512_mask(x, x, static_cast<uint16_t>(0xffff),
                                       4 /* current rounding */);
}

// e^x for x clamped to [-86, 80]: below -86 the result is e^-86 (~4e-38, still a normal float;
// softmax and GELU treat it as zero), above 80 it is e^80. Error < 1 ulp (0.99 measured over every
// float in the range). Only +, -, *, selects and
// integer bit operations, so every lane type computes the same bits. Range reduction
// x = n·ln2 + r with |r| <= ln2/2 (ln2 split in two so n·ln2 is exact to float precision), then
// e^r = 1 + r + r²·P(r) with P the classic degree-5 minimax polynomial (Cephes' expf
// coefficients), then the exponent n added through the float's bit pattern.
template <class V>
inline V exp_bounded(V x) {
  const V lo = splat<V>(-86.0f), hi = splat<V>(80.0f);
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  // Adding 1.5·2^23 rounds x·log2(e) to the nearest integer n, which then sits in the low
  // mantissa bits of t: n = bits(t) - bits(1.5·2^23).
  constexpr float kRound = 12582912.0f;
  const V t = x * 1.44269504088896341f + kRound;
  const V n = t - kRound;
  const auto ni = bits_of<V>(t) - 0x4B400000;
  V r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  V p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * float_of<V>((ni + 127) << 23);
}

// Runs f(Lanes<V>, i) on [begin, end) in steps of V's width, then f(Lanes<float>, i) on the rest.
// Two vectors per iteration: the long dependency chains of exp and division then overlap
// (GELU runs ~1.5x faster on AVX2 than with one chain per iteration).
template <class V, class F>
inline void simd_loop(int64_t begin, int64_t end, const F& f) {
  constexpr int64_t W = kWidth<V>;
  int64_t i = begin;
  for (; i + 2 * W <= end; i += 2 * W) {
    f(Lanes<V>{}, i);
    f(Lanes<V>{}, i + W);
  }
  for (; i + W <= end; i += W) f(Lanes<V>{}, i);
  for (; i < end; ++i) f(Lanes<float>{}, i);
}

// Reductions use 16 float lanes (8 double lanes) whatever the instruction set: element i goes
// to lane i % 16, and the lanes are added in a fixed tree at the end. The lanes are held as
// 16/W native vectors (lane l = element l % W of part l / W): a 64-byte generic vector would
// live in memory on machines without AVX-512. The tail is added through an array, because
// indexing a vector with a variable pins it to memory too.
template <class T, int kLanes>
inline T tree_sum(T (&lanes)[kLanes]) {
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) lanes[j] += lanes[j + w];
  return lanes[0];
}

// 16 lanes of float partial sums as native vectors of V.
template <class V>
struct LaneSums {
  static constexpr int64_t kParts = 16 / kWidth<V>;
  V part[kParts];
  LaneSums() {
    for (V& p : part) p = splat<V>(0.0f);
  }
  // Adds x[0, 16) to lanes 0..15.
  void add16(const float* x) {
#pragma GCC unroll 4
    for (int64_t p = 0; p < kParts; ++p) part[p] += load<V>(x + p * kWidth<V>);
  }
  // The lanes plus a tail of count < 16 values for lanes 0..count-1, summed in the fixed tree.
  float total(const float* tail = nullptr, int64_t count = 0) const {
    float lanes[16];
    std::memcpy(lanes, part, sizeof lanes);
    for (int64_t j = 0; j < count; ++j) lanes[j] += tail[j];
    return tree_sum(lanes);
  }
};

// Sum of f over [0, n) in the fixed lane structure. f(Lanes<T>, i) returns the values of
// elements i, i+1, ... as a T (V or float).
template <class V, class F>
inline float lane_sum(int64_t n, const F& f) {
  constexpr int64_t W = kWidth<V>;
  LaneSums<V> acc;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
#pragma GCC unroll 4
    for (int64_t p = 0; p < LaneSums<V>::kParts; ++p) acc.part[p] += f(Lanes<V>{}, i + p * W);
  }
  float tail[16];
  int64_t count = 0;
  for (; i < n; ++i) tail[count++] = f(Lanes<float>{}, i);
  return acc.total(tail, count);
}

// Largest element of x[0, n) (NaN ignored; -inf when n == 0). Max is exact, so the lane
// structure cannot change the value (only the sign of a zero maximum, which no caller observes).
template <class V>
inline float row_max(const float* x, int64_t n) {
  V mv = splat<V>(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + kWidth<V> <= n; i += kWidth<V>) {
    V v = load<V>(x + i);
    mv = v > mv ? v : mv;
  }
  float lanes[kWidth<V>];
  std::memcpy(lanes, &mv, sizeof lanes);
  float m = -std::numeric_limits<float>::infinity();
  for (float v : lanes) m = v > m ? v : m;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// ---------------------------------------------------------------------------------------------
// Instruction-set dispatch. run_isa instantiates a generic lambda with the native lane type
// inside a function compiled for that instruction set; `flatten` inlines the whole call tree
// into it, so the generic code is compiled with the wider registers.

enum class Isa { kSse2, kAvx2, kAvx512 };

// The widest instruction set of this CPU, capped by ZT_CPU_SIMD (cpu_kernels.cpp).
Isa choose_isa();

template <class F>
__attribute__((flatten)) void run_sse2(const F& f) {
  f(Lanes<F4>{});
}
template <class F>
__attribute__((target("avx2"), flatten)) void run_avx2(const F& f) {
  f(Lanes<F8>{});
}
template <class F>
__attribute__((target("avx512f"), flatten)) void run_avx512(const F& f) {
  f(Lanes<F16>{});
}
template <class F>
inline void run_isa(Isa isa, const F& f) {
  switch (isa) {
    case Isa::kAvx512: run_avx512(f); break;
    case Isa::kAvx2: run_avx2(f); break;
    case Isa::kSse2: run_sse2(f); break;
  }
}

// run_isa with F16C allowed beside AVX2 and AVX-512F, for loops that convert fp16 with its
// instructions (AVX-512F's zmm forms need no F16C; its ymm and xmm forms do). The caller makes
// sure the CPU has F16C when isa is not kSse2.
template <class F>
__attribute__((target("avx2,f16c"), flatten)) void run_avx2_f16c(const F& f) {
  f(Lanes<F8>{});
}
template <class F>
__attribute__((target("avx512f,f16c"), flatten)) void run_avx512_f16c(const F& f) {
  f(Lanes<F16>{});
}
template <class F>
inline void run_isa_f16c(Isa isa, const F& f) {
  if (isa == Isa::kAvx512)
    run_avx512_f16c(f);
  else if (isa == Isa::kAvx2)
    run_avx2_f16c(f);
  else
    run_sse2(f);
}

}  // namespace zt::cpu
