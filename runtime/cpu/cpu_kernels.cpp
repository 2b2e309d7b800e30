// CpuKernels: the Kernels table on the host. Matrix products go to OpenBLAS (cblas_sgemm);
// everything else is written here as loops split across OpenMP threads. Pure compute: no
// communication, no logging, and no allocation once warm (scratch such as layernorm's per-block
// partial sums and attention's per-head copies of K and V is kept per thread across calls).
//
// Vectorisation. GCC 12 at -O2 does not vectorise plain loops here: its "very-cheap" cost model
// refuses loops whose trip count is not a known multiple of the vector width, -fmath-errno keeps
// sqrt scalar, and -ftrapping-math blocks if-conversion of the clamps in exp. So the hot kernels
// are templates over a lane type V, written once with GCC's generic vector extension: the vector
// body instantiates them with V = a native vector (F4 for SSE2, F8 for AVX2, F16 for AVX-512) and
// the tail with V = float. Body and tail therefore run the same IEEE operations in the same order
// on every element (pinned by the position-invariance tests in tests/runtime/kernels_test.cpp).
// Simple loops (residual, scale, casts, round_to, add) use `#pragma omp simd`, which GCC does
// vectorise.
// The widest instruction set the CPU offers is chosen once at construction
// (__builtin_cpu_supports); the environment variable ZT_CPU_SIMD=sse2|avx2|avx512 caps it, so tests
// can compare the paths. FMA is never enabled, and the build's -ffp-contract=off keeps the AVX-512
// path from contracting.
//
// Determinism. Element-wise kernels give an element the same bits wherever it sits and whichever
// instruction set ran. Reductions use fixed lane structures (16 float lanes, or 8 double lanes,
// indexed by the element's position) and fixed row/element blocks summed in order, so their
// results depend neither on the thread count nor on the instruction set.
#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string_view>
#include <type_traits>
#include <vector>

#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"

// Vector arguments of inline helpers change the calling convention between instruction sets; every
// such helper is inlined into its caller (see run_isa below), so the ABI note is noise here.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace zt {
namespace {

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

Isa choose_isa() {
  __builtin_cpu_init();
  Isa isa = Isa::kSse2;
  if (__builtin_cpu_supports("avx2")) isa = Isa::kAvx2;
  if (__builtin_cpu_supports("avx512f")) isa = Isa::kAvx512;
  if (const char* cap = std::getenv("ZT_CPU_SIMD")) {
    std::string_view s(cap);
    if (s == "sse2")
      isa = Isa::kSse2;
    else if (s == "avx2" && isa == Isa::kAvx512)
      isa = Isa::kAvx2;
    else if (s != "avx2" && s != "avx512" && !s.empty())
      throw_input(fmt::format("ZT_CPU_SIMD must be sse2, avx2 or avx512; got '{}'", s));
  }
  return isa;
}

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
    case Isa::kAvx512:
      run_avx512(f);
      break;
    case Isa::kAvx2:
      run_avx2(f);
      break;
    case Isa::kSse2:
      run_sse2(f);
      break;
  }
}

// ---------------------------------------------------------------------------------------------
// Threading. Work is split into a count of independent items, distributed statically over the
// OpenMP threads. A single item runs on the calling thread without entering a parallel region
// (libgomp wakes a futex per region even for a team of one, ~1 us).
template <class F>
void parallel_for(int64_t count, const F& f) {
  if (count <= 0) return;
  if (count == 1) {
    f(0);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) f(i);
}

// f(begin, end) over [0, n) in chunks of `grain` (the last shorter). Element-wise kernels do not
// care where the cuts fall; reductions pass their fixed block size as the grain.
template <class F>
void parallel_ranges(int64_t n, int64_t grain, const F& f) {
  const int64_t chunks = (n + grain - 1) / grain;
  parallel_for(chunks, [&](int64_t c) { f(c * grain, std::min(n, (c + 1) * grain)); });
}

// Scratch memory kept per thread across calls (grown, never shrunk), so a warm kernel neither
// allocates nor page-faults: fresh multi-megabyte buffers cost more than layernorm's whole
// backward pass. Per thread, because OpenMP workers and concurrent callers each need their own.
// Two slots: kCall for a buffer the calling thread shares with its workers during one call,
// kWorker for each worker's private buffer.
enum class ScratchSlot { kCall, kWorker };
template <ScratchSlot kSlot>
float* thread_scratch(int64_t floats) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < static_cast<size_t>(floats)) buffer.resize(static_cast<size_t>(floats));
  return buffer.data();
}

// parallel_for handing each call a thread's private scratch of `floats` floats (contents
// unspecified).
template <class F>
void parallel_with_scratch(int64_t count, int64_t floats, const F& f) {
  if (count <= 0) return;
  if (count == 1) {
    f(0, thread_scratch<ScratchSlot::kWorker>(floats));
    return;
  }
#pragma omp parallel
  {
    float* scratch = thread_scratch<ScratchSlot::kWorker>(floats);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < count; ++i) f(i, scratch);
  }
}

constexpr int64_t kElementGrain = 32768;     // 128 KiB of floats per chunk of element-wise work
constexpr int64_t kSumSquaresBlock = 16384;  // fixed blocks of sum_squares
constexpr int64_t kLayerNormRowBlock = 32;   // fixed row blocks of layernorm's dweight/dbias
constexpr int64_t kColumnBlock = 64;         // columns per task in column reductions
constexpr int64_t kSoftmaxChunk = 2048;      // softmax_cross_entropy's exp/sum chunk (L1)

// ---------------------------------------------------------------------------------------------
// Element-wise kernels, generic in the lane type V.

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// GPT-2's GELU, 0.5·x·(1 + tanh(u)), u = sqrt(2/pi)·(x + 0.044715·x³), evaluated as
// x·sigmoid(2u) = x / (1 + e^(-2u)): the same function, without tanh's cancellation near -1.
template <class V>
void gelu_forward_range(float* out, const float* inp, int64_t begin, int64_t end) {
  simd_loop<V>(begin, end, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    const T x = load<T>(inp + i);
    const T u = kGeluScale * (x + kGeluCubic * x * x * x);
    store<T>(out + i, x / (1.0f + exp_bounded<T>(-2.0f * u)));
  });
}

// d/dx [x·s], s = sigmoid(2u) = 1/(1+e), e = e^(-2u): s + 2·x·s·(1-s)·du/dx, and 1-s = e·s.
template <class V>
void gelu_backward_range(float* dinp, const float* inp, const float* dout, int64_t begin,
                         int64_t end) {
  simd_loop<V>(begin, end, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    const T x = load<T>(inp + i);
    const T u = kGeluScale * (x + kGeluCubic * x * x * x);
    const T e = exp_bounded<T>(-2.0f * u);
    const T s = 1.0f / (1.0f + e);
    const T du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    const T grad = s * (1.0f + 2.0f * x * (e * s) * du);
    store<T>(dinp + i, load<T>(dinp + i) + load<T>(dout + i) * grad);
  });
}

// Scalars of one AdamW call, computed once so every element does identical arithmetic.
template <class V, bool kDecoupled>
void adamw_range(float* param, const float* grad, float* m, float* v, const AdamScalars& a,
                 int64_t begin, int64_t end) {
  simd_loop<V>(begin, end, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    T p = load<T>(param + i);
    T g = load<T>(grad + i) * a.grad_scale;
    if constexpr (!kDecoupled) g = g + a.weight_decay * p;  // classic Adam: L2 in the gradient
    const T mi = a.beta1 * load<T>(m + i) + a.one_minus_beta1 * g;
    const T vi = a.beta2 * load<T>(v + i) + a.one_minus_beta2 * g * g;
    store<T>(m + i, mi);
    store<T>(v + i, vi);
    const T mhat = mi / a.bias_correction1;
    const T vhat = vi / a.bias_correction2;
    const T step = mhat / (vsqrt(vhat) + a.eps);
    if constexpr (kDecoupled) {
      p = p - a.lr * (step + a.weight_decay * p);
    } else {
      p = p - a.lr * step;
    }
    store<T>(param + i, p);
  });
}

// PyTorch's SGD: g += wd·p; with momentum buf = momentum·buf + g and the step uses buf.
template <class V, bool kDecay, bool kMomentum>
void sgd_range(float* param, const float* grad, float* buf, const SgdArgs& a, int64_t begin,
               int64_t end) {
  simd_loop<V>(begin, end, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    const T p = load<T>(param + i);
    T g = load<T>(grad + i) * a.grad_scale;
    if constexpr (kDecay) g = g + a.weight_decay * p;
    if constexpr (kMomentum) {
      g = a.momentum * load<T>(buf + i) + g;
      store<T>(buf + i, g);
    }
    store<T>(param + i, p - a.lr * g);
  });
}

// ---------------------------------------------------------------------------------------------
// Row kernels (a row is handled whole by one thread, so its reductions never depend on threads).

constexpr float kLayerNormEps = 1e-5f;

// One row of C: out = (x - mean)·rstd·w + b.
template <class V>
void layernorm_forward_row(float* out, float* mean_out, float* rstd_out, const float* x,
                           const float* w, const float* b, int64_t C) {
  const float inv_c = 1.0f / static_cast<float>(C);
  const float mean = lane_sum<V>(C,
                                 [&](auto lanes, int64_t i) {
                                   using T = typename decltype(lanes)::type;
                                   return load<T>(x + i);
                                 }) *
                     inv_c;
  const float var = lane_sum<V>(C,
                                [&](auto lanes, int64_t i) {
                                  using T = typename decltype(lanes)::type;
                                  const T d = load<T>(x + i) - mean;
                                  return d * d;
                                }) *
                    inv_c;
  const float rstd = 1.0f / std::sqrt(var + kLayerNormEps);
  simd_loop<V>(0, C, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    store<T>(out + i, (load<T>(x + i) - mean) * rstd * load<T>(w + i) + load<T>(b + i));
  });
  if (mean_out) *mean_out = mean;
  if (rstd_out) *rstd_out = rstd;
}

// One row: dinp += (dnorm - mean(dnorm) - norm·mean(dnorm·norm))·rstd with dnorm = w·dout, and
// the row's dweight/dbias contributions added into the block partials pdw, pdb (C each).
template <class V>
void layernorm_backward_row(float* dinp, float* pdw, float* pdb, const float* dout, const float* x,
                            const float* w, float mean, float rstd, int64_t C) {
  const float inv_c = 1.0f / static_cast<float>(C);
  const float dnorm_mean = lane_sum<V>(C,
                                       [&](auto lanes, int64_t i) {
                                         using T = typename decltype(lanes)::type;
                                         return load<T>(w + i) * load<T>(dout + i);
                                       }) *
                           inv_c;
  const float dnorm_norm_mean = lane_sum<V>(C,
                                            [&](auto lanes, int64_t i) {
                                              using T = typename decltype(lanes)::type;
                                              const T norm = (load<T>(x + i) - mean) * rstd;
                                              return load<T>(w + i) * load<T>(dout + i) * norm;
                                            }) *
                                inv_c;
  simd_loop<V>(0, C, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    const T dy = load<T>(dout + i);
    const T norm = (load<T>(x + i) - mean) * rstd;
    const T dnorm = load<T>(w + i) * dy;
    store<T>(dinp + i, load<T>(dinp + i) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd);
    store<T>(pdw + i, load<T>(pdw + i) + dy * norm);
    store<T>(pdb + i, load<T>(pdb + i) + dy);
  });
}

// One row of logits (Vp wide, the first `vocab` real): loss = logsumexp - logit[target]; when
// dloss != 0 the row becomes dloss·(softmax - onehot) with the padding zeroed. Passes: max (from
// memory), exp and sum (the row is then in L2), scale.
template <class V>
float softmax_cross_entropy_row(float* row, int32_t target, int64_t vocab, int64_t padded,
                                float dloss) {
  const float target_logit = row[target];
  const float mx = row_max<V>(row, vocab);
  const bool write_grad = dloss != 0.0f;
  alignas(64) float chunk[kSoftmaxChunk];
  // Lanes by position in the row (chunks are multiples of 16 long), as lane_sum does.
  LaneSums<V> acc;
  const float* tail = nullptr;  // the ragged end of the last chunk
  int64_t tail_count = 0;
  for (int64_t c0 = 0; c0 < vocab; c0 += kSoftmaxChunk) {
    const int64_t len = std::min(kSoftmaxChunk, vocab - c0);
    float* e = write_grad ? row + c0 : chunk;
    simd_loop<V>(0, len, [&](auto lanes, int64_t i) {
      using T = typename decltype(lanes)::type;
      store<T>(e + i, exp_bounded<T>(load<T>(row + c0 + i) - mx));
    });
    const int64_t full = len / 16 * 16;
    for (int64_t i = 0; i < full; i += 16) acc.add16(e + i);
    tail = e + full;
    tail_count = len - full;
  }
  const float sum = acc.total(tail, tail_count);
  if (write_grad) {
    const float target_p = row[target] / sum;
    const float k = dloss / sum;
    simd_loop<V>(0, vocab, [&](auto lanes, int64_t i) {
      using T = typename decltype(lanes)::type;
      store<T>(row + i, load<T>(row + i) * k);
    });
    row[target] = (target_p - 1.0f) * dloss;
    std::fill(row + vocab, row + padded, 0.0f);
  }
  return static_cast<float>(static_cast<double>(mx) + std::log(static_cast<double>(sum)) -
                            static_cast<double>(target_logit));
}

// ---------------------------------------------------------------------------------------------
// Attention, one (batch, head) pair per call, queries in blocks of kQueryBlock. Each head's K and
// V are first copied to contiguous per-thread scratch (transposed where the inner loop runs over
// keys), so the inner loops read contiguous memory instead of rows 3C apart. The block kernels
// below are small GEMM tiles: 4 queries × 2 vectors of accumulators in registers. Every output
// element is still one sum in a fixed order (over the head dimension, or over keys/queries in
// increasing index), so the blocking and the lane type never change its bits.

constexpr int kQueryBlock = 4;

struct AttentionShape {
  int64_t T, C, NH, hs;  // hs = C / NH
  float scale;           // 1/sqrt(hs)
};

// Copies T rows of hs floats, src rows `stride` apart: dst (T, hs), or dst (hs, T) transposed.
inline void gather_head(float* dst, const float* src, int64_t stride, int64_t T, int64_t hs,
                        bool transpose) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < hs; ++d) {
      if (transpose)
        dst[d * T + t] = src[t * stride + d];
      else
        dst[t * hs + d] = src[t * stride + d];
    }
}

// y[q·ldy + j] = scale · sum_{d < hs} a[q·lda + d]·bt[d·ldb + j], for q < Q, j < n.
// (bt is K or V transposed; a holds Q query rows or Q output-gradient rows.)
template <class V, int Q>
inline void block_dot(float* y, int64_t ldy, const float* a, int64_t lda, const float* bt,
                      int64_t ldb, int64_t hs, int64_t n, float scale) {
  constexpr int64_t W = kWidth<V>;
  int64_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W) {
    V s0[Q], s1[Q];
    const V b0 = load<V>(bt + j), b1 = load<V>(bt + j + W);
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      s0[q] = a[q * lda] * b0;
      s1[q] = a[q * lda] * b1;
    }
    for (int64_t d = 1; d < hs; ++d) {
      const V c0 = load<V>(bt + d * ldb + j), c1 = load<V>(bt + d * ldb + j + W);
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q) {
        const float aq = a[q * lda + d];
        s0[q] = s0[q] + aq * c0;
        s1[q] = s1[q] + aq * c1;
      }
    }
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      store<V>(y + q * ldy + j, s0[q] * scale);
      store<V>(y + q * ldy + j + W, s1[q] * scale);
    }
  }
  simd_loop<V>(j, n, [&](auto lanes, int64_t jj) {
    using T = typename decltype(lanes)::type;
    for (int q = 0; q < Q; ++q) {
      T sq = a[q * lda] * load<T>(bt + jj);
      for (int64_t d = 1; d < hs; ++d) sq = sq + a[q * lda + d] * load<T>(bt + d * ldb + jj);
      store<T>(y + q * ldy + jj, sq * scale);
    }
  });
}

// y[q·ldy + d] (+)= sum_{j < n0 + q} c[q·ldc + j]·rows[j·ldr + d], for q < Q, d < hs (n0 >= 1:
// query q of the block sees keys 0 .. n0-1+q).
template <class V, int Q, bool kAccumulate>
inline void block_combine(float* y, int64_t ldy, const float* c, int64_t ldc, const float* rows,
                          int64_t ldr, int64_t n0, int64_t hs) {
  constexpr int64_t W = kWidth<V>;
  auto finish = [&](auto lanes, float* at, auto sum) {
    using T = typename decltype(lanes)::type;
    if constexpr (kAccumulate) sum = load<T>(at) + sum;
    store<T>(at, sum);
  };
  int64_t d = 0;
  for (; d + 2 * W <= hs; d += 2 * W) {
    V s0[Q], s1[Q];
    {
      const V r0 = load<V>(rows + d), r1 = load<V>(rows + d + W);
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q) {
        s0[q] = c[q * ldc] * r0;
        s1[q] = c[q * ldc] * r1;
      }
    }
    for (int64_t j = 1; j < n0; ++j) {
      const V r0 = load<V>(rows + j * ldr + d), r1 = load<V>(rows + j * ldr + d + W);
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q) {
        const float cq = c[q * ldc + j];
        s0[q] = s0[q] + cq * r0;
        s1[q] = s1[q] + cq * r1;
      }
    }
    // The causal triangle: key n0-1+e is seen by queries e .. Q-1 only.
#pragma GCC unroll 4
    for (int e = 1; e < Q; ++e) {
      const int64_t j = n0 - 1 + e;
      const V r0 = load<V>(rows + j * ldr + d), r1 = load<V>(rows + j * ldr + d + W);
#pragma GCC unroll 4
      for (int q = e; q < Q; ++q) {
        const float cq = c[q * ldc + j];
        s0[q] = s0[q] + cq * r0;
        s1[q] = s1[q] + cq * r1;
      }
    }
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      finish(Lanes<V>{}, y + q * ldy + d, s0[q]);
      finish(Lanes<V>{}, y + q * ldy + d + W, s1[q]);
    }
  }
  simd_loop<V>(d, hs, [&](auto lanes, int64_t dd) {
    using T = typename decltype(lanes)::type;
    for (int q = 0; q < Q; ++q) {
      T sq = c[q * ldc] * load<T>(rows + dd);
      for (int64_t j = 1; j < n0 + q; ++j) sq = sq + c[q * ldc + j] * load<T>(rows + j * ldr + dd);
      finish(lanes, y + q * ldy + dd, sq);
    }
  });
}

// z[j·ldz + d] += c[q·ldc + j]·b[q·ldb + d] for each query q < Q that sees key j (j < n0 + q),
// in increasing q, for j < n0 + Q - 1, d < hs.
template <class V, int Q>
inline void block_rank_update(float* z, int64_t ldz, const float* c, int64_t ldc, const float* b,
                              int64_t ldb, int64_t n0, int64_t hs) {
  constexpr int64_t W = kWidth<V>;
  int64_t d = 0;
  for (; d + 2 * W <= hs; d += 2 * W) {
    V b0[Q], b1[Q];
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      b0[q] = load<V>(b + q * ldb + d);
      b1[q] = load<V>(b + q * ldb + d + W);
    }
    for (int64_t j = 0; j < n0; ++j) {
      float* zj = z + j * ldz + d;
      V z0 = load<V>(zj), z1 = load<V>(zj + W);
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q) {
        const float cq = c[q * ldc + j];
        z0 = z0 + cq * b0[q];
        z1 = z1 + cq * b1[q];
      }
      store<V>(zj, z0);
      store<V>(zj + W, z1);
    }
#pragma GCC unroll 4
    for (int e = 1; e < Q; ++e) {
      const int64_t j = n0 - 1 + e;
      float* zj = z + j * ldz + d;
      V z0 = load<V>(zj), z1 = load<V>(zj + W);
#pragma GCC unroll 4
      for (int q = e; q < Q; ++q) {
        const float cq = c[q * ldc + j];
        z0 = z0 + cq * b0[q];
        z1 = z1 + cq * b1[q];
      }
      store<V>(zj, z0);
      store<V>(zj + W, z1);
    }
  }
  simd_loop<V>(d, hs, [&](auto lanes, int64_t dd) {
    using T = typename decltype(lanes)::type;
    for (int64_t j = 0; j < n0 + Q - 1; ++j) {
      T zz = load<T>(z + j * ldz + dd);
      for (int64_t q = std::max<int64_t>(0, j - n0 + 1); q < Q; ++q)
        zz = zz + c[q * ldc + j] * load<T>(b + q * ldb + dd);
      store<T>(z + j * ldz + dd, zz);
    }
  });
}

// p[0, n) = softmax(p[0, n)); p[n, T) = 0.
template <class V>
inline void softmax_causal_row(float* p, int64_t n, int64_t T) {
  const float mx = row_max<V>(p, n);
  simd_loop<V>(0, n, [&](auto lanes, int64_t j) {
    using T_ = typename decltype(lanes)::type;
    store<T_>(p + j, exp_bounded<T_>(load<T_>(p + j) - mx));
  });
  const float inv_sum = 1.0f / lane_sum<V>(n, [&](auto lanes, int64_t j) {
                          using T_ = typename decltype(lanes)::type;
                          return load<T_>(p + j);
                        });
  simd_loop<V>(0, n, [&](auto lanes, int64_t j) {
    using T_ = typename decltype(lanes)::type;
    store<T_>(p + j, load<T_>(p + j) * inv_sum);
  });
  std::fill(p + n, p + T, 0.0f);
}

// Inputs of one (b, h) pair. Rows of q, k, v (and of dq) are 3C apart; rows of out, dout C.
struct HeadView {
  const float* q;
  const float* k;
  const float* v;
  HeadView(const float* qkv, int64_t b, int64_t h, const AttentionShape& s)
      : q(qkv + b * s.T * 3 * s.C + h * s.hs), k(q + s.C), v(q + 2 * s.C) {}
};
// The (T, T) block of att of pair (b, h).
inline int64_t att_offset(int64_t b, int64_t h, const AttentionShape& s) {
  return (b * s.NH + h) * s.T * s.T;
}

constexpr int64_t attention_forward_scratch(int64_t T, int64_t hs) { return 2 * hs * T; }
constexpr int64_t attention_backward_scratch(int64_t T, int64_t hs) {
  return 4 * hs * T + 2 * kQueryBlock * T;
}

// Queries t0 .. t0+Q-1: scores into their att rows, softmax, out rows = att · V.
template <class V, int Q>
void attention_forward_queries(float* out, float* att, const HeadView& hv, const float* kt,
                               const float* vc, int64_t t0, const AttentionShape& s) {
  const int64_t T = s.T, n0 = t0 + 1;
  float* p = att + t0 * T;
  block_dot<V, Q>(p, T, hv.q + t0 * 3 * s.C, 3 * s.C, kt, T, s.hs, n0 + Q - 1, s.scale);
  for (int q = 0; q < Q; ++q) softmax_causal_row<V>(p + q * T, n0 + q, T);
  block_combine<V, Q, false>(out + t0 * s.C, s.C, p, T, vc, s.hs, n0, s.hs);
}

// scratch: attention_forward_scratch floats. out points at (b, 0, h·hs), att at the pair's
// (T, T) block.
template <class V>
void attention_forward_head(float* out, float* att, const HeadView& hv, const AttentionShape& s,
                            float* scratch) {
  float* kt = scratch;          // (hs, T): K transposed
  float* vc = kt + s.hs * s.T;  // (T, hs)
  gather_head(kt, hv.k, 3 * s.C, s.T, s.hs, true);
  gather_head(vc, hv.v, 3 * s.C, s.T, s.hs, false);
  int64_t t0 = 0;
  for (; t0 + kQueryBlock <= s.T; t0 += kQueryBlock)
    attention_forward_queries<V, kQueryBlock>(out, att, hv, kt, vc, t0, s);
  for (; t0 < s.T; ++t0) attention_forward_queries<V, 1>(out, att, hv, kt, vc, t0, s);
}

struct HeadGrads {
  float* dq;        // rows 3C apart, like q
  float* dk;        // (T, hs) scratch, zeroed
  float* dv;        // (T, hs) scratch, zeroed
  const float* dy;  // dout rows of this pair, C apart
};

// Queries t0 .. t0+Q-1: dp = dy·Vᵀ, ds = p·(dp - sum p·dp)·scale, dq += ds·K, dk += dsᵀ·q,
// dv += pᵀ·dy.
template <class V, int Q>
void attention_backward_queries(const HeadGrads& g, const HeadView& hv, const float* att,
                                const float* vt, const float* kc, float* dp, float* ds, int64_t t0,
                                const AttentionShape& s) {
  const int64_t T = s.T, C = s.C, n0 = t0 + 1;
  const float* p = att + t0 * T;
  const float* dy = g.dy + t0 * C;
  block_dot<V, Q>(dp, T, dy, C, vt, T, s.hs, n0 + Q - 1, 1.0f);
  for (int q = 0; q < Q; ++q) {
    const int64_t n = n0 + q;
    const float* pq = p + q * T;
    const float* dpq = dp + q * T;
    float* dsq = ds + q * T;
    const float pdp = lane_sum<V>(n, [&](auto lanes, int64_t j) {
      using T_ = typename decltype(lanes)::type;
      return load<T_>(pq + j) * load<T_>(dpq + j);
    });
    simd_loop<V>(0, n, [&](auto lanes, int64_t j) {
      using T_ = typename decltype(lanes)::type;
      store<T_>(dsq + j, load<T_>(pq + j) * (load<T_>(dpq + j) - pdp) * s.scale);
    });
  }
  block_combine<V, Q, true>(g.dq + t0 * 3 * C, 3 * C, ds, T, kc, s.hs, n0, s.hs);
  block_rank_update<V, Q>(g.dk, s.hs, ds, T, hv.q + t0 * 3 * C, 3 * C, n0, s.hs);
  block_rank_update<V, Q>(g.dv, s.hs, p, T, dy, C, n0, s.hs);
}

// scratch: attention_backward_scratch floats. dq points at (b, 0, h·hs) of dqkv's q part,
// dout_head at (b, 0, h·hs) of dout, att at the pair's (T, T) block.
template <class V>
void attention_backward_head(float* dq, const float* dout_head, const float* att,
                             const HeadView& hv, const AttentionShape& s, float* scratch) {
  const int64_t T = s.T, hs = s.hs, C3 = 3 * s.C;
  float* vt = scratch;      // (hs, T): V transposed
  float* kc = vt + hs * T;  // (T, hs)
  float* dk = kc + hs * T;  // (T, hs), summed here, added to dqkv at the end
  float* dv = dk + hs * T;  // (T, hs)
  float* dp = dv + hs * T;  // (kQueryBlock, T)
  float* ds = dp + kQueryBlock * T;
  gather_head(vt, hv.v, C3, T, hs, true);
  gather_head(kc, hv.k, C3, T, hs, false);
  std::fill(dk, dk + 2 * hs * T, 0.0f);
  const HeadGrads g{dq, dk, dv, dout_head};
  int64_t t0 = 0;
  for (; t0 + kQueryBlock <= T; t0 += kQueryBlock)
    attention_backward_queries<V, kQueryBlock>(g, hv, att, vt, kc, dp, ds, t0, s);
  for (; t0 < T; ++t0) attention_backward_queries<V, 1>(g, hv, att, vt, kc, dp, ds, t0, s);
  for (int64_t j = 0; j < T; ++j) {
    float* dk_row = dq + j * C3 + s.C;
    float* dv_row = dq + j * C3 + 2 * s.C;
    simd_loop<V>(0, hs, [&](auto lanes, int64_t d) {
      using T_ = typename decltype(lanes)::type;
      store<T_>(dk_row + d, load<T_>(dk_row + d) + load<T_>(dk + j * hs + d));
      store<T_>(dv_row + d, load<T_>(dv_row + d) + load<T_>(dv + j * hs + d));
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Reductions over flat buffers.

// The native vector of doubles for lane type V, and the float vector that converts into it.
template <class V>
struct DoubleLanes;
template <>
struct DoubleLanes<F4> {
  typedef double D __attribute__((vector_size(16)));
  typedef float H __attribute__((vector_size(8)));
};
template <>
struct DoubleLanes<F8> {
  typedef double D __attribute__((vector_size(32)));
  typedef F4 H;
};
template <>
struct DoubleLanes<F16> {
  typedef D8 D;
  typedef F8 H;
};

// Sum of x² over one block of at most kSumSquaresBlock elements, in double: element i of the
// block goes to lane i % 8 (held as native double vectors), lanes added in a fixed tree.
template <class V>
double block_sum_squares(const float* x, int64_t n) {
  using D = typename DoubleLanes<V>::D;
  using H = typename DoubleLanes<V>::H;
  constexpr int64_t kPerPart = sizeof(D) / sizeof(double), kParts = 8 / kPerPart;
  D acc[kParts];
  for (D& a : acc) a = D{} + 0.0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
#pragma GCC unroll 4
    for (int64_t p = 0; p < kParts; ++p) {
      H f;
      std::memcpy(&f, x + i + p * kPerPart, sizeof f);
      const D d = __builtin_convertvector(f, D);
      acc[p] += d * d;
    }
  }
  double lanes[8];
  std::memcpy(lanes, acc, sizeof lanes);
  for (int j = 0; i < n; ++i, ++j) {
    const double d = x[i];
    lanes[j] += d * d;
  }
  return tree_sum(lanes);
}

bool range_has_nonfinite(const float* x, int64_t n) {
  uint32_t found = 0;
#pragma omp simd reduction(| : found)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    found |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return found != 0;
}

void check_blas_dims(int64_t M, int64_t K, int64_t N) {
  ZT_ASSERT(M >= 0 && K >= 0 && N >= 0 && M <= INT_MAX && K <= INT_MAX && N <= INT_MAX,
            "matmul dimensions M={} K={} N={} must fit in a BLAS int", M, K, N);
}

// fp32 -> fp16 with the F16C instruction: round to nearest even with IEEE overflow, the same
// bits as dtype.h's fp32_to_fp16 for every non-NaN float (checked over all 2^32 inputs while
// writing this; kernels_test compares a million). A group holding a NaN is redone by dtype.h,
// which maps every NaN to one quiet NaN where F16C would keep payload bits.
__attribute__((target("avx2,f16c"))) void fp32_to_fp16_f16c(uint16_t* dst, const float* src,
                                                            int64_t i0, int64_t i1) {
  int64_t i = i0;
  for (; i + 8 <= i1; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0)
      for (int64_t j = i; j < i + 8; ++j) dst[j] = fp32_to_fp16(src[j]);
  }
  for (; i < i1; ++i) dst[i] = fp32_to_fp16(src[i]);
}

template <class Dst, class Src, class Convert>
inline void convert_loop(void* dst, const void* src, int64_t i0, int64_t i1, const Convert& c) {
  Dst* d = static_cast<Dst*>(dst);
  const Src* s = static_cast<const Src*>(src);
#pragma omp simd
  for (int64_t i = i0; i < i1; ++i) d[i] = c(s[i]);
}

// Elements [i0, i1) of a conversion between different dtypes, one loop per pair (vectorised by
// GCC where the instruction set allows: fp32->fp16 needs per-lane shifts, AVX2 and up).
// fp16 <-> bf16 goes through fp32, which holds both exactly.
inline void cast_range(void* dst, DType dst_type, const void* src, DType src_type, int64_t i0,
                       int64_t i1) {
  using F = DType;
  if (src_type == F::kF32 && dst_type == F::kF16) {
    convert_loop<uint16_t, float>(dst, src, i0, i1, [](float f) { return fp32_to_fp16(f); });
  } else if (src_type == F::kF32 && dst_type == F::kBF16) {
    convert_loop<uint16_t, float>(dst, src, i0, i1, [](float f) { return fp32_to_bf16(f); });
  } else if (src_type == F::kF16 && dst_type == F::kF32) {
    convert_loop<float, uint16_t>(dst, src, i0, i1,
                                  [](uint16_t h) { return fp16_to_fp32_branchless(h); });
  } else if (src_type == F::kBF16 && dst_type == F::kF32) {
    convert_loop<float, uint16_t>(dst, src, i0, i1, [](uint16_t h) { return bf16_to_fp32(h); });
  } else if (src_type == F::kF16 && dst_type == F::kBF16) {
    convert_loop<uint16_t, uint16_t>(
        dst, src, i0, i1, [](uint16_t h) { return fp32_to_bf16(fp16_to_fp32_branchless(h)); });
  } else if (src_type == F::kBF16 && dst_type == F::kF16) {
    convert_loop<uint16_t, uint16_t>(dst, src, i0, i1,
                                     [](uint16_t h) { return fp32_to_fp16(bf16_to_fp32(h)); });
  }
}

// round_to and add: element-wise through fp32 with dtype.h's codecs (16-bit loads by
// fp16_to_fp32_branchless, which vectorises), so each (dst, a, b) combination is one plain
// `omp simd` loop.

// f(S{}) with the storage tag S of t.
template <class F>
inline void visit_storage(DType t, const F& f) {
  switch (t) {
    case DType::kF32:
      f(F32Codec{});
      return;
    case DType::kF16:
      f(F16Codec{});
      return;
    case DType::kBF16:
      f(BF16Codec{});
      return;
  }
}

// Element i of a buffer of S's elements.
template <class S>
inline typename S::Storage* elems(void* p, int64_t i) {
  return static_cast<typename S::Storage*>(p) + i;
}
template <class S>
inline const typename S::Storage* elems(const void* p, int64_t i) {
  return static_cast<const typename S::Storage*>(p) + i;
}

// x[0, n) = float(S(x)).
template <class S>
inline void round_n(float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] = S::widen(S::narrow(x[i]));
}

// x[i0, i1) rounded to fp16 and back by F16C: the bits of dtype.h for every non-NaN float (see
// fp32_to_fp16_f16c; VCVTPH2PS equals fp16_to_fp32 on every non-NaN pattern, kernels_test checks
// all of them). A group holding a NaN is done by dtype.h, checked before the in-place store.
__attribute__((target("avx2,f16c"))) void round_to_fp16_f16c(float* x, int64_t i0, int64_t i1) {
  int64_t i = i0;
  for (; i + 8 <= i1; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      for (int64_t j = i; j < i + 8; ++j) x[j] = fp16_to_fp32(fp32_to_fp16(x[j]));
      continue;
    }
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)));
  }
  for (; i < i1; ++i) x[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
}

// dst[0, n) = D(float(a) + float(b)). dst may be a or b itself (each element is read before it
// is written), not a partial overlap.
template <class D, class A, class B>
inline void add_n(typename D::Storage* dst, const typename A::Storage* a, const typename B::Storage* b,
                  int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = D::narrow(A::widen(a[i]) + B::widen(b[i]));
}

// add_n by F16C, for any (dst, a, b) with an fp16 among them, a block (in L1) at a time: the
// operands as fp32 (fp16 by VCVTPH2PS, which equals fp16_to_fp32 on every non-NaN pattern), the
// fp32 sums, then the store (fp16 by fp32_to_fp16_f16c). The same fp32 additions as add_n's, so
// the same bits as the portable path: VCVTPH2PS returns a signalling NaN quiet where
// fp16_to_fp32 keeps it signalling, but the addition quiets a NaN operand either way.
template <class S>
__attribute__((target("avx2,f16c"))) inline const float* block_as_fp32(
    float* block, const typename S::Storage* src, int64_t n) {
  if constexpr (std::is_same_v<S, F32Codec>) {
    return src;
  } else if constexpr (std::is_same_v<S, F16Codec>) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(block + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                      reinterpret_cast<const __m128i*>(src + i))));
    for (; i < n; ++i) block[i] = _cvtsh_ss(src[i]);
    return block;
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) block[i] = S::widen(src[i]);
    return block;
  }
}

template <class D, class A, class B>
__attribute__((target("avx2,f16c"))) void add_n_f16c(typename D::Storage* dst,
                                                     const typename A::Storage* a,
                                                     const typename B::Storage* b, int64_t n) {
  constexpr int64_t kBlock = 1024;
  alignas(64) float a_block[kBlock], b_block[kBlock], sums[kBlock];
  for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
    const int64_t len = std::min(kBlock, n - j0);
    const float* fa = block_as_fp32<A>(a_block, a + j0, len);
    const float* fb = block_as_fp32<B>(b_block, b + j0, len);
    if constexpr (std::is_same_v<D, F32Codec>) {
      add_n<F32Codec, F32Codec, F32Codec>(dst + j0, fa, fb, len);  // dst may be fa itself
    } else {
      add_n<F32Codec, F32Codec, F32Codec>(sums, fa, fb, len);
      if constexpr (std::is_same_v<D, F16Codec>) {
        fp32_to_fp16_f16c(dst + j0, sums, 0, len);
      } else {
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) dst[j0 + i] = D::narrow(sums[i]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------

class CpuKernels final : public Kernels {
 public:
  explicit CpuKernels(Isa isa)
      : isa_(isa), f16c_(isa != Isa::kSse2 && __builtin_cpu_supports("f16c")) {}

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                      int64_t M, int64_t K, int64_t N, WeightLayout layout) override {
    check_blas_dims(M, K, N);
    if (M == 0 || N == 0) return;
    // With a bias, out starts as bias rows and the product is added (beta = 1): one write pass
    // instead of a separate read-modify-write pass after the GEMM.
    if (bias) {
      parallel_ranges(M, std::max<int64_t>(1, kElementGrain / N), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) std::memcpy(out + r * N, bias, N * sizeof(float));
      });
    }
    if (K == 0) {
      if (!bias) fill(out, 0.0f, M * N);
      return;
    }
    const bool in_out = layout == WeightLayout::kInOut;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, in_out ? CblasNoTrans : CblasTrans, int(M), int(N),
                int(K), 1.0f, inp, int(K), weight, in_out ? int(N) : int(K), bias ? 1.0f : 0.0f,
                out, int(N));
  }

  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int64_t M, int64_t K, int64_t N,
                       WeightLayout layout) override {
    check_blas_dims(M, K, N);
    if (M == 0 || N == 0 || K == 0) {
      if (dbias && M > 0) column_sums(dbias, dout, M, N);
      return;
    }
    const bool in_out = layout == WeightLayout::kInOut;
    if (dinp) {  // dinp (M,K) += dout (M,N) · Wᵀ, W (K,N) or (N,K)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, in_out ? CblasTrans : CblasNoTrans, int(M), int(K),
                  int(N), 1.0f, dout, int(N), weight, in_out ? int(N) : int(K), 1.0f, dinp, int(K));
    }
    if (dweight) {
      if (in_out) {  // dW (K,N) += inpᵀ (K,M) · dout (M,N)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(K), int(N), int(M), 1.0f, inp,
                    int(K), dout, int(N), 1.0f, dweight, int(N));
      } else {  // dW (N,K) += doutᵀ (N,M) · inp (M,K)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(N), int(K), int(M), 1.0f, dout,
                    int(N), inp, int(K), 1.0f, dweight, int(K));
      }
    }
    if (dbias) column_sums(dbias, dout, M, N);
  }

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int64_t B, int64_t T, int64_t C) override {
    parallel_for(B * T, [&](int64_t bt) {
      const float* e = wte + int64_t(tokens[bt]) * C;
      const float* p = wpe + (bt % T) * C;
      float* o = out + bt * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
    });
  }

  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          int64_t B, int64_t T, int64_t C) override {
    // dwte: one task per block of channels, walking the tokens in order, so repeated tokens add
    // in the same order whatever the thread count (no atomics). dwpe: one task per position.
    parallel_ranges(C, kColumnBlock, [&](int64_t c0, int64_t c1) {
      for (int64_t bt = 0; bt < B * T; ++bt) {
        float* d = dwte + int64_t(tokens[bt]) * C;
        const float* g = dout + bt * C;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) d[c] += g[c];
      }
    });
    parallel_for(T, [&](int64_t t) {
      float* d = dwpe + t * C;
      for (int64_t b = 0; b < B; ++b) {
        const float* g = dout + (b * T + t) * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) d[c] += g[c];
      }
    });
  }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int64_t N, int64_t C) override {
    parallel_ranges(N, kLayerNormRowBlock, [&](int64_t r0, int64_t r1) {
      run_isa(isa_, [&](auto lanes) {
        using V = typename decltype(lanes)::type;
        for (int64_t r = r0; r < r1; ++r)
          layernorm_forward_row<V>(out + r * C, mean ? mean + r : nullptr,
                                   rstd ? rstd + r : nullptr, inp + r * C, weight, bias, C);
      });
    });
  }

  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int64_t N, int64_t C) override {
    if (N <= 0 || C <= 0) return;
    // Pass 1, per block of kLayerNormRowBlock rows: dinp, and the block's dweight/dbias
    // partials. Pass 2, per block of channels: partials added in block order.
    const int64_t blocks = (N + kLayerNormRowBlock - 1) / kLayerNormRowBlock;
    float* partials = thread_scratch<ScratchSlot::kCall>(blocks * 2 * C);  // (blocks, 2, C)
    parallel_for(blocks, [&](int64_t blk) {
      float* pdw = partials + blk * 2 * C;
      float* pdb = pdw + C;
      std::fill(pdw, pdw + 2 * C, 0.0f);
      const int64_t r1 = std::min(N, (blk + 1) * kLayerNormRowBlock);
      run_isa(isa_, [&](auto lanes) {
        using V = typename decltype(lanes)::type;
        for (int64_t r = blk * kLayerNormRowBlock; r < r1; ++r)
          layernorm_backward_row<V>(dinp + r * C, pdw, pdb, dout + r * C, inp + r * C, weight,
                                    mean[r], rstd[r], C);
      });
    });
    parallel_ranges(C, kColumnBlock, [&](int64_t c0, int64_t c1) {
      float sw[kColumnBlock] = {}, sb[kColumnBlock] = {};
      const int64_t w = c1 - c0;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const float* pdw = partials + blk * 2 * C + c0;
        const float* pdb = pdw + C;
#pragma omp simd
        for (int64_t c = 0; c < w; ++c) {
          sw[c] += pdw[c];
          sb[c] += pdb[c];
        }
      }
      for (int64_t c = 0; c < w; ++c) {
        dweight[c0 + c] += sw[c];
        dbias[c0 + c] += sb[c];
      }
    });
  }

  void gelu_forward(float* out, const float* inp, int64_t n) override {
    parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
      run_isa(isa_, [&](auto lanes) {
        gelu_forward_range<typename decltype(lanes)::type>(out, inp, i0, i1);
      });
    });
  }

  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
      run_isa(isa_, [&](auto lanes) {
        gelu_backward_range<typename decltype(lanes)::type>(dinp, inp, dout, i0, i1);
      });
    });
  }

  void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                         int64_t NH) override {
    const AttentionShape s = attention_shape(T, C, NH);
    const int64_t pairs = B * NH;
    if (pairs <= 0 || T <= 0) return;
    const int64_t scratch_floats = attention_forward_scratch(T, s.hs);
    parallel_with_scratch(pairs, scratch_floats, [&](int64_t bh, float* scratch) {
      const int64_t b = bh / NH, h = bh % NH;
      const HeadView hv(qkv, b, h, s);
      run_isa(isa_, [&](auto lanes) {
        attention_forward_head<typename decltype(lanes)::type>(
            out + b * T * C + h * s.hs, att + att_offset(b, h, s), hv, s, scratch);
      });
    });
  }

  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                          int64_t B, int64_t T, int64_t C, int64_t NH) override {
    const AttentionShape s = attention_shape(T, C, NH);
    const int64_t pairs = B * NH;
    if (pairs <= 0 || T <= 0) return;
    // Each (b, h) pair owns its slices of dqkv, so pairs run in parallel without conflicts.
    const int64_t scratch_floats = attention_backward_scratch(T, s.hs);
    parallel_with_scratch(pairs, scratch_floats, [&](int64_t bh, float* scratch) {
      const int64_t b = bh / NH, h = bh % NH;
      const HeadView hv(qkv, b, h, s);
      run_isa(isa_, [&](auto lanes) {
        attention_backward_head<typename decltype(lanes)::type>(
            dqkv + b * T * 3 * C + h * s.hs, dout + b * T * C + h * s.hs, att + att_offset(b, h, s),
            hv, s, scratch);
      });
    });
  }

  void residual_forward(float* out, const float* a, const float* b, int64_t n) override {
    parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
    });
  }

  void accumulate(float* y, const float* x, int64_t n) override {
    parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) y[i] += x[i];
    });
  }

  void softmax_cross_entropy(float* losses, float* logits, const int32_t* targets, int64_t N,
                             int64_t V, int64_t Vp, float dloss) override {
    ZT_ASSERT(V > 0 && V <= Vp, "softmax_cross_entropy: V={} Vp={}", V, Vp);
    for (int64_t i = 0; i < N; ++i)
      ZT_ASSERT(targets[i] >= 0 && targets[i] < V, "target {} of row {} outside [0, {})",
                targets[i], i, V);
    parallel_for(N, [&](int64_t i) {
      run_isa(isa_, [&](auto lanes) {
        losses[i] = softmax_cross_entropy_row<typename decltype(lanes)::type>(
            logits + i * Vp, targets[i], V, Vp, dloss);
      });
    });
  }

  void adamw(float* param, const float* grad, float* m, float* v, int64_t n,
             const AdamWArgs& args) override {
    ZT_ASSERT(args.step >= 1, "adamw step must be >= 1; got {}", args.step);
    const AdamScalars a = adam_scalars(args);
    parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
      run_isa(isa_, [&](auto lanes) {
        using V = typename decltype(lanes)::type;
        if (args.decoupled)
          adamw_range<V, true>(param, grad, m, v, a, i0, i1);
        else
          adamw_range<V, false>(param, grad, m, v, a, i0, i1);
      });
    });
  }

  void sgd(float* param, const float* grad, float* momentum_buf, int64_t n,
           const SgdArgs& args) override {
    const bool momentum = args.momentum != 0.0f;
    ZT_ASSERT(!momentum || momentum_buf, "sgd with momentum {} needs a momentum buffer",
              args.momentum);
    const bool decay = args.weight_decay != 0.0f;
    parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
      run_isa(isa_, [&](auto lanes) {
        using V = typename decltype(lanes)::type;
        if (decay && momentum)
          sgd_range<V, true, true>(param, grad, momentum_buf, args, i0, i1);
        else if (decay)
          sgd_range<V, true, false>(param, grad, momentum_buf, args, i0, i1);
        else if (momentum)
          sgd_range<V, false, true>(param, grad, momentum_buf, args, i0, i1);
        else
          sgd_range<V, false, false>(param, grad, momentum_buf, args, i0, i1);
      });
    });
  }

  void cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) override {
    if (dst_type == src_type) {
      const size_t size = dtype_size(dst_type);
      parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
        std::memcpy(static_cast<char*>(dst) + i0 * size, static_cast<const char*>(src) + i0 * size,
                    (i1 - i0) * size);
      });
      return;
    }
    parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
      if (f16c_ && src_type == DType::kF32 && dst_type == DType::kF16) {
        fp32_to_fp16_f16c(static_cast<uint16_t*>(dst), static_cast<const float*>(src), i0, i1);
        return;
      }
      run_isa(isa_, [&](auto) { cast_range(dst, dst_type, src, src_type, i0, i1); });
    });
  }

  void round_to(float* x, DType dtype, int64_t n) override {
    if (dtype == DType::kF32) return;
    parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) { round_range(x, dtype, i0, i1); });
  }

  // The rows one after another on each thread, their columns split across threads: a row named
  // twice is rounded twice by one thread (idempotent), never by two threads at once.
  void round_rows(float* x, const int32_t* rows, int64_t n_rows, int64_t row_len,
                  DType dtype) override {
    if (dtype == DType::kF32) return;
    parallel_ranges(row_len, kElementGrain, [&](int64_t c0, int64_t c1) {
      for (int64_t i = 0; i < n_rows; ++i)
        round_range(x + static_cast<int64_t>(rows[i]) * row_len, dtype, c0, c1);
    });
  }

  void add(void* dst, DType dst_type, const void* a, DType a_type, const void* b, DType b_type,
           int64_t n) override {
    ZT_ASSERT(dst != b || dst_type == b_type, "add: dst aliases b with types {} and {}",
              dtype_name(dst_type), dtype_name(b_type));
    if (!a) {  // a rounding cast of b (so -0 stays -0, where 0 + b would give +0)
      if (dst != b) cast(dst, dst_type, b, b_type, n);
      return;
    }
    ZT_ASSERT(dst != a || dst_type == a_type, "add: dst aliases a with types {} and {}",
              dtype_name(dst_type), dtype_name(a_type));
    parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
      visit_storage(a_type, [&](auto a_tag) {
        visit_storage(b_type, [&](auto b_tag) {
          using A = decltype(a_tag);
          using B = decltype(b_tag);
          const bool any_fp16 =
              dst_type == DType::kF16 || a_type == DType::kF16 || b_type == DType::kF16;
          visit_storage(dst_type, [&](auto dst_tag) {
            using D = decltype(dst_tag);
            if (f16c_ && any_fp16) {
              add_n_f16c<D, A, B>(elems<D>(dst, i0), elems<A>(a, i0), elems<B>(b, i0), i1 - i0);
              return;
            }
            run_isa(isa_, [&](auto) {
              add_n<D, A, B>(elems<D>(dst, i0), elems<A>(a, i0), elems<B>(b, i0), i1 - i0);
            });
          });
        });
      });
    });
  }

  void scale(float* x, float s, int64_t n) override {
    parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) x[i] *= s;
    });
  }

  void fill(float* x, float value, int64_t n) override {
    parallel_ranges(n, kElementGrain,
                    [&](int64_t i0, int64_t i1) { std::fill(x + i0, x + i1, value); });
  }

  bool has_nonfinite(const float* x, int64_t n) override {
    const int64_t chunks = (n + kElementGrain - 1) / kElementGrain;
    if (chunks <= 1) return n > 0 && range_has_nonfinite(x, n);
    int found = 0;
#pragma omp parallel for schedule(static) reduction(| : found)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t i0 = c * kElementGrain;
      found |= range_has_nonfinite(x + i0, std::min(n, i0 + kElementGrain) - i0) ? 1 : 0;
    }
    return found != 0;
  }

  double sum_squares(const float* x, int64_t n) override {
    if (n <= 0) return 0.0;
    const int64_t blocks = (n + kSumSquaresBlock - 1) / kSumSquaresBlock;
    std::vector<double> block_sums(static_cast<size_t>(blocks));
    parallel_ranges(n, kSumSquaresBlock, [&](int64_t i0, int64_t i1) {
      run_isa(isa_, [&](auto lanes) {
        block_sums[i0 / kSumSquaresBlock] =
            block_sum_squares<typename decltype(lanes)::type>(x + i0, i1 - i0);
      });
    });
    double total = 0.0;
    for (double s : block_sums) total += s;
    return total;
  }

 private:
  static AttentionShape attention_shape(int64_t T, int64_t C, int64_t NH) {
    ZT_ASSERT(NH > 0 && C % NH == 0, "attention: C={} is not a multiple of NH={}", C, NH);
    const int64_t hs = C / NH;
    return AttentionShape{T, C, NH, hs, 1.0f / std::sqrt(static_cast<float>(hs))};
  }

  // x[i0, i1) rounded to dtype (not kF32): round_to's arithmetic, for round_to and round_rows.
  void round_range(float* x, DType dtype, int64_t i0, int64_t i1) {
    if (f16c_ && dtype == DType::kF16) {
      round_to_fp16_f16c(x, i0, i1);
      return;
    }
    run_isa(isa_, [&](auto) {
      visit_storage(dtype, [&](auto s) { round_n<decltype(s)>(x + i0, i1 - i0); });
    });
  }

  // dbias (N) += column sums of dout (M,N), each column summed over rows in order.
  void column_sums(float* dbias, const float* dout, int64_t M, int64_t N) {
    parallel_ranges(N, kColumnBlock, [&](int64_t c0, int64_t c1) {
      float acc[kColumnBlock] = {};
      const int64_t w = c1 - c0;
      for (int64_t r = 0; r < M; ++r) {
        const float* row = dout + r * N + c0;
#pragma omp simd
        for (int64_t c = 0; c < w; ++c) acc[c] += row[c];
      }
      for (int64_t c = 0; c < w; ++c) dbias[c0 + c] += acc[c];
    });
  }

  Isa isa_;
  bool f16c_;  // fp16 conversions by the F16C instructions in cast (fp32 -> fp16), round_to and
               // add (AVX2 paths only, so ZT_CPU_SIMD=sse2 tests the portable conversions)
};

}  // namespace

std::unique_ptr<Kernels> make_cpu_kernels() { return std::make_unique<CpuKernels>(choose_isa()); }

}  // namespace zt
