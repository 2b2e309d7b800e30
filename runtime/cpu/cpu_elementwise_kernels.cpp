// CpuKernels, the element-wise ops and the flat reduction: residual, accumulate, cast between
// fp32 / fp16 / bf16, round_to, round_rows, add, fill and sum_squares. Conversions use
// dtype.h's codecs (F16C instructions where the CPU has them, with the same bits). Not here: the
// neural-network ops (cpu_nn_kernels.cpp, cpu_attention_kernels.cpp) and the optimizers
// (cpu_optimizer_kernels.cpp).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_lane_codecs.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/cpu/cpu_simd.h"
#include "runtime/dtype.h"
#include "runtime/status.h"

namespace zt {
using namespace cpu;
namespace {

constexpr int64_t kSumSquaresBlock = 16384;  // fixed blocks of sum_squares

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

// The kPerPart values of S's storage at p as floats (H): cpu_lane_codecs.h's in-register
// widening (the AVX2 and AVX-512 paths run with F16C: run_isa_f16c; VCVTPH2PS keeps a NaN a NaN,
// so x² is the same), with the cases it leaves out: AVX2's 4 fp16 lanes by F16C, bf16's lanes
// by zero extension, and SSE2's 2 lanes (no conversion instruction) one by one with dtype.h.
__attribute__((target("f16c"))) inline F4 widen4_fp16(const uint16_t* p) {
  return (F4)_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
// bf16 lanes, 4 on AVX2's path and 8 on AVX-512's: one zero-extending load and a shift (the
// generic vector code split the extension into halves and spilled: sum_squares on bf16
// gradients took 1.5-1.7x fp16's time).
__attribute__((target("sse4.1"))) inline F4 widen4_bf16(const uint16_t* p) {
  return (F4)_mm_slli_epi32(
      _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))), 16);
}
__attribute__((target("avx2"))) inline F8 widen8_bf16(const uint16_t* p) {
  return (F8)_mm256_slli_epi32(
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16);
}
template <class H, class S>
inline H load_as_float(const typename S::Storage* p) {
  constexpr int kCount = sizeof(H) / sizeof(float);
  if constexpr (std::is_same_v<S, F32Codec>) {
    H f;
    std::memcpy(&f, p, sizeof f);
    return f;
  } else if constexpr (kCount == 2) {
    return H{S::widen(p[0]), S::widen(p[1])};
  } else if constexpr (kCount == 4 && std::is_same_v<S, F16Codec>) {
    return widen4_fp16(p);
  } else if constexpr (kCount == 4 && std::is_same_v<S, BF16Codec>) {
    return widen4_bf16(p);
  } else if constexpr (kCount == 8 && std::is_same_v<S, BF16Codec>) {
    return widen8_bf16(p);
  } else {
    return load_widened<H, S>(p);
  }
}

// Sums of x² over kBlocks blocks of n elements each (block b at x[b], stored as S), in double,
// out[b] the block's sum: element i of a block goes to lane i % 8 (held as native double
// vectors), each lane summed in element order, the lanes added in a fixed tree. So a block's sum
// is the same bits whichever blocks it runs beside and whatever dtype held the values. 16-bit
// values are widened in registers. The blocks are interleaved because one block's lanes form a
// single chain of dependent additions, which left sum_squares at half the memory's read rate
// (zt-bench train's gradient norm: 19 ms a step for 124M fp32 gradients on the Xeon VM).
template <class V, int kBlocks, class S>
void blocks_sum_squares(const typename S::Storage* const* x, int64_t n, double* out) {
  using D = typename DoubleLanes<V>::D;
  using H = typename DoubleLanes<V>::H;
  constexpr int64_t kPerPart = sizeof(D) / sizeof(double), kParts = 8 / kPerPart;
  D acc[kBlocks][kParts];
  for (auto& block : acc)
    for (D& a : block) a = D{} + 0.0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
#pragma GCC unroll 4
    for (int b = 0; b < kBlocks; ++b)
#pragma GCC unroll 4
      for (int64_t p = 0; p < kParts; ++p) {
        const D d = __builtin_convertvector(load_as_float<H, S>(x[b] + i + p * kPerPart), D);
        acc[b][p] += d * d;
      }
  }
  for (int b = 0; b < kBlocks; ++b) {
    double lanes[8];
    std::memcpy(lanes, acc[b], sizeof lanes);
    for (int64_t k = i, j = 0; k < n; ++k, ++j) {
      const double d = S::widen(x[b][k]);
      lanes[j] += d * d;
    }
    out[b] = tree_sum(lanes);
  }
}

// Blocks interleaved per call of blocks_sum_squares: enough independent chains to keep loads in
// flight, few enough that the accumulators stay in registers (SSE2 holds a block's 8 lanes in 4).
template <class V>
constexpr int kInterleavedBlocks = std::is_same_v<V, F4> ? 2 : 4;

// fp32 -> fp16 with the F16C instruction: round to nearest even with IEEE overflow, the same
// bits as dtype.h's fp32_to_fp16 for every non-NaN float (checked over all 2^32 inputs while
// writing this; kernels_elementwise_test compares a million). A group holding a NaN is redone by
// dtype.h, which maps every NaN to one quiet NaN where F16C would keep payload bits.
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
// fp32_to_fp16_f16c; VCVTPH2PS equals fp16_to_fp32 on every non-NaN pattern,
// kernels_elementwise_test checks all of them). A group holding a NaN is done by dtype.h, checked
// before the in-place store.
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
inline void add_n(typename D::Storage* dst, const typename A::Storage* a,
                  const typename B::Storage* b, int64_t n) {
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
      _mm256_storeu_ps(block + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
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

// The fp16 conversions above, 16 lanes at a time with AVX-512F's own VCVTPS2PH / VCVTPH2PS on
// zmm registers: the same instructions' arithmetic as F16C's, so the same bits, with half the
// instructions (the fp16 step's gradient adds, activation rounding and packing: about 10 ms of
// GPT-2 124M's step on the Xeon VM). A group of 16 holding a NaN is redone by dtype.h as above;
// tails of fewer than 16 go to the F16C functions. The zero-masked forms with every lane kept:
// the plain ones trip GCC 12's -Wmaybe-uninitialized inside its own header.
__attribute__((target("avx512f"))) inline __m512 load16_fp16(const uint16_t* h) {
  return _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
}
__attribute__((target("avx512f"))) inline void store16_fp16(uint16_t* h, __m512 x,
                                                            const float* redo) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(h),
                      _mm512_maskz_cvtps_ph(0xffff, x, _MM_FROUND_TO_NEAREST_INT));
  if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) != 0)
    for (int l = 0; l < 16; ++l) h[l] = fp32_to_fp16(redo[l]);
}

__attribute__((target("avx512f"))) void fp32_to_fp16_avx512(uint16_t* dst, const float* src,
                                                            int64_t i0, int64_t i1) {
  int64_t i = i0;
  for (; i + 16 <= i1; i += 16) store16_fp16(dst + i, _mm512_loadu_ps(src + i), src + i);
  fp32_to_fp16_f16c(dst, src, i, i1);
}

__attribute__((target("avx512f"))) void round_to_fp16_avx512(float* x, int64_t i0, int64_t i1) {
  int64_t i = i0;
  for (; i + 16 <= i1; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) != 0) {
      for (int64_t j = i; j < i + 16; ++j) x[j] = fp16_to_fp32(fp32_to_fp16(x[j]));
      continue;
    }
    const __m256i h = _mm512_maskz_cvtps_ph(0xffff, v, _MM_FROUND_TO_NEAREST_INT);
    _mm512_storeu_ps(x + i, _mm512_maskz_cvtph_ps(0xffff, h));
  }
  round_to_fp16_f16c(x, i, i1);
}

// fp16 -> fp32 with exactly fp16_to_fp32's bits, a signalling NaN kept signalling (cast's
// contract, which VCVTPH2PS alone would break by quieting it): a group whose result holds a NaN
// is redone by dtype.h.
__attribute__((target("avx512f"))) void fp16_to_fp32_exact_avx512(float* dst, const uint16_t* src,
                                                                  int64_t i0, int64_t i1) {
  int64_t i = i0;
  for (; i + 16 <= i1; i += 16) {
    const __m512 x = load16_fp16(src + i);
    _mm512_storeu_ps(dst + i, x);
    if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) != 0)
      for (int64_t j = i; j < i + 16; ++j) dst[j] = fp16_to_fp32(src[j]);
  }
  for (; i < i1; ++i) dst[i] = fp16_to_fp32(src[i]);
}
__attribute__((target("avx2,f16c"))) void fp16_to_fp32_exact_f16c(float* dst, const uint16_t* src,
                                                                  int64_t i0, int64_t i1) {
  int64_t i = i0;
  for (; i + 8 <= i1; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, x);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0)
      for (int64_t j = i; j < i + 8; ++j) dst[j] = fp16_to_fp32(src[j]);
  }
  for (; i < i1; ++i) dst[i] = fp16_to_fp32(src[i]);
}

// d[0, n) = fp16(float(d) + x): add_n_f16c<F16, F16, F32> in one pass, no blocks in between.
__attribute__((target("avx512f"))) void add_into_fp16_avx512(uint16_t* d, const float* x,
                                                             int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 sum = _mm512_add_ps(load16_fp16(d + i), _mm512_loadu_ps(x + i));
    if (_mm512_cmp_ps_mask(sum, sum, _CMP_UNORD_Q) != 0) {
      add_n_f16c<F16Codec, F16Codec, F32Codec>(d + i, d + i, x + i, 16);
      continue;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                        _mm512_maskz_cvtps_ph(0xffff, sum, _MM_FROUND_TO_NEAREST_INT));
  }
  add_n_f16c<F16Codec, F16Codec, F32Codec>(d + i, d + i, x + i, n - i);
}

}  // namespace

void CpuKernels::residual_forward(Operand out_op, ConstOperand a_op, ConstOperand b_op, int64_t n) {
  ActStage stage(*this);
  const float* a = stage.in(a_op, n);
  const float* b = stage.in(b_op, n);
  float* out = stage.out(out_op, n);
  parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
    round_act(out, i0, i1);
  });
}

void CpuKernels::accumulate(Operand y_op, ConstOperand x_op, int64_t n) {
  ActStage stage(*this);
  float* y = stage.inout(y_op, n);
  const float* x = stage.in(x_op, n);
  parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) y[i] += x[i];
    round_act(y, i0, i1);
  });
}

// GEMM operands and parameters widened from fp16 by F16C where the CPU has it: VCVTPH2PS equals
// fp16_to_fp32 on every non-NaN pattern (a NaN stays a NaN, quieted), and it is several times
// faster than the portable conversion.
void CpuKernels::widen_range(float* dst, ConstOperand src, int64_t n) {
  if (n <= 0) return;
  if (src.dtype == DType::kF32) {
    std::memcpy(dst, src.data, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  if (f16c_ && src.dtype == DType::kF16) {
    const auto* h = static_cast<const uint16_t*>(src.data);
    if (isa_ == Isa::kAvx512)
      fp16_to_fp32_exact_avx512(dst, h, 0, n);
    else
      block_as_fp32<F16Codec>(dst, h, n);
    return;
  }
  run_isa(isa_, [&](auto) { cast_range(dst, DType::kF32, src.data, src.dtype, 0, n); });
}

const float* CpuKernels::widened(ConstOperand op, int64_t n, float* scratch) {
  if (op.dtype == DType::kF32) return static_cast<const float*>(op.data);
  widen_range(scratch, op, n);
  return scratch;
}

// fp32 -> fp16 of [i0, i1) on the widest conversion instructions (f16c_ holds).
void CpuKernels::narrow_fp16_range(uint16_t* dst, const float* src, int64_t i0, int64_t i1) const {
  if (isa_ == Isa::kAvx512)
    fp32_to_fp16_avx512(dst, src, i0, i1);
  else
    fp32_to_fp16_f16c(dst, src, i0, i1);
}

// The scalar loop GCC vectorises for fp32_to_bf16 measured 46 GB/s in cache, against 108 for
// fp16's conversion instructions; the integer lanes of cpu_lane_codecs.h give the same bits.
void CpuKernels::narrow_bf16_range(uint16_t* dst, const float* src, int64_t i0, int64_t i1) const {
  run_isa(isa_, [&](auto lanes) {
    simd_loop<typename decltype(lanes)::type>(i0, i1, [&](auto l, int64_t i) {
      using T = typename decltype(l)::type;
      store_narrowed<T, BF16Codec>(dst + i, load<T>(src + i));
    });
  });
}

void CpuKernels::narrow_range(Operand dst, const float* x, int64_t n) {
  if (n <= 0) return;
  if (f16c_ && dst.dtype == DType::kF16) {
    narrow_fp16_range(static_cast<uint16_t*>(dst.data), x, 0, n);
    return;
  }
  if (dst.dtype == DType::kBF16) {
    narrow_bf16_range(static_cast<uint16_t*>(dst.data), x, 0, n);
    return;
  }
  run_isa(isa_, [&](auto) { cast_range(dst.data, dst.dtype, x, DType::kF32, 0, n); });
}

void CpuKernels::add_range(Operand dst, const float* x, int64_t n) {
  if (n <= 0) return;
  visit_codec(dst.dtype, [&](auto tag) {
    using D = decltype(tag);
    auto* d = elems<D>(dst.data, 0);
    if (f16c_ && dst.dtype == DType::kF16) {
      if constexpr (std::is_same_v<D, F16Codec>) {
        if (isa_ == Isa::kAvx512) {
          add_into_fp16_avx512(d, x, n);
          return;
        }
      }
      add_n_f16c<D, D, F32Codec>(d, d, x, n);
      return;
    }
    run_isa(isa_, [&](auto) { add_n<D, D, F32Codec>(d, d, x, n); });
  });
}

void CpuKernels::cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) {
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
      narrow_fp16_range(static_cast<uint16_t*>(dst), static_cast<const float*>(src), i0, i1);
      return;
    }
    if (src_type == DType::kF32 && dst_type == DType::kBF16) {
      narrow_bf16_range(static_cast<uint16_t*>(dst), static_cast<const float*>(src), i0, i1);
      return;
    }
    if (f16c_ && src_type == DType::kF16 && dst_type == DType::kF32) {
      const auto* h = static_cast<const uint16_t*>(src);
      if (isa_ == Isa::kAvx512)
        fp16_to_fp32_exact_avx512(static_cast<float*>(dst), h, i0, i1);
      else
        fp16_to_fp32_exact_f16c(static_cast<float*>(dst), h, i0, i1);
      return;
    }
    run_isa(isa_, [&](auto) { cast_range(dst, dst_type, src, src_type, i0, i1); });
  });
}

void CpuKernels::round_range(float* x, DType dtype, int64_t i0, int64_t i1) {
  if (f16c_ && dtype == DType::kF16) {
    if (isa_ == Isa::kAvx512)
      round_to_fp16_avx512(x, i0, i1);
    else
      round_to_fp16_f16c(x, i0, i1);
    return;
  }
  if (dtype == DType::kBF16) {  // on integer lanes (round_n's loop measured 2x slower in cache)
    run_isa(isa_, [&](auto lanes) {
      simd_loop<typename decltype(lanes)::type>(i0, i1, [&](auto l, int64_t i) {
        using T = typename decltype(l)::type;
        store<T>(x + i, round_bf16(load<T>(x + i)));
      });
    });
    return;
  }
  run_isa(isa_, [&](auto) {
    visit_codec(dtype, [&](auto s) { round_n<decltype(s)>(x + i0, i1 - i0); });
  });
}

void CpuKernels::round_to(float* x, DType dtype, int64_t n) {
  if (dtype == DType::kF32) return;
  parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) { round_range(x, dtype, i0, i1); });
}

// The rows one after another on each thread, their columns split across threads: a row named
// twice is rounded twice by one thread (idempotent), never by two threads at once.
void CpuKernels::round_rows(float* x, const int32_t* rows, int64_t n_rows, int64_t row_len,
                            DType dtype) {
  if (dtype == DType::kF32) return;
  parallel_ranges(row_len, kElementGrain, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n_rows; ++i)
      round_range(x + static_cast<int64_t>(rows[i]) * row_len, dtype, c0, c1);
  });
}

void CpuKernels::add(void* dst, DType dst_type, const void* a, DType a_type, const void* b,
                     DType b_type, int64_t n) {
  ZT_ASSERT(dst != b || dst_type == b_type, "add: dst aliases b with types {} and {}",
            dtype_name(dst_type), dtype_name(b_type));
  if (!a) {  // a rounding cast of b (so -0 stays -0, where 0 + b would give +0)
    if (dst != b) cast(dst, dst_type, b, b_type, n);
    return;
  }
  ZT_ASSERT(dst != a || dst_type == a_type, "add: dst aliases a with types {} and {}",
            dtype_name(dst_type), dtype_name(a_type));
  parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
    visit_codec(a_type, [&](auto a_tag) {
      visit_codec(b_type, [&](auto b_tag) {
        using A = decltype(a_tag);
        using B = decltype(b_tag);
        const bool any_fp16 =
            dst_type == DType::kF16 || a_type == DType::kF16 || b_type == DType::kF16;
        visit_codec(dst_type, [&](auto dst_tag) {
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

void CpuKernels::fill(Operand x_op, float value, int64_t n) {
  ActStage stage(*this);
  float* x = stage.out(x_op, n);
  parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
    std::fill(x + i0, x + i1, value);
    round_act(x, i0, i1);
  });
}

// A 16-bit x is widened a block at a time into the worker's scratch (exact), so the sums are
// those of the fp32 values.
double CpuKernels::sum_squares(ConstOperand x, int64_t n) {
  if (n <= 0) return 0.0;
  const int64_t blocks = (n + kSumSquaresBlock - 1) / kSumSquaresBlock;
  std::vector<double> block_sums(static_cast<size_t>(blocks));
  // fp16 is widened by F16C's instructions, lane by lane on SSE2 or a CPU without F16C.
  const Isa isa = x.dtype == DType::kF16 && !f16c_ ? Isa::kSse2 : isa_;
  // Groups of 4 blocks (the most any instruction set interleaves); a group's full blocks go
  // through blocks_sum_squares together, a short last block alone.
  constexpr int64_t kGroup = 4;
  const int64_t groups = (blocks + kGroup - 1) / kGroup;
  visit_codec(x.dtype, [&](auto tag) {
    using S = decltype(tag);
    parallel_for(groups, [&](int64_t grp) {
      const int64_t b0 = grp * kGroup, b1 = std::min(blocks, b0 + kGroup);
      const typename S::Storage* v[kGroup];
      for (int64_t b = b0; b < b1; ++b) v[b - b0] = elems<S>(x.data, b * kSumSquaresBlock);
      const int64_t full = std::min(b1, n / kSumSquaresBlock) - b0;  // blocks of full length
      run_isa_f16c(isa, [&](auto lanes) {
        using V = typename decltype(lanes)::type;
        constexpr int kK = kInterleavedBlocks<V>;
        int64_t b = 0;
        for (; b + kK <= full; b += kK)
          blocks_sum_squares<V, kK, S>(v + b, kSumSquaresBlock, &block_sums[b0 + b]);
        for (; b < b1 - b0; ++b)
          blocks_sum_squares<V, 1, S>(v + b,
                                      std::min(n - (b0 + b) * kSumSquaresBlock, kSumSquaresBlock),
                                      &block_sums[b0 + b]);
      });
    });
  });
  double total = 0.0;
  for (double s : block_sums) total += s;
  return total;
}

}  // namespace zt
