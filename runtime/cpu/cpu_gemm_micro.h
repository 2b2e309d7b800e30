// The packed GEMM's microkernels (cpu_gemm.cpp): an MR x NR tile of C held in registers over a
// reduction block, per instruction set (AVX-512 8 x 48, AVX2 6 x 16, SSE2 4 x 8), reading A
// packed or in place and B packed (fp32) or where it is stored (16-bit, widened in registers),
// and storing the tile as summed, rounded to the activation dtype, or into a 16-bit C; with the
// in-register loads and roundings they inline. Private to cpu_gemm.cpp, its only includer.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "runtime/cpu/cpu_lane_codecs.h"
#include "runtime/cpu/cpu_simd.h"
#include "runtime/dtype.h"

namespace zt::cpu {

// Eight elements of codec C (runtime/dtype.h) at p, widened to fp32 (exact; fp16 by VCVTPH2PS).
template <class C>
__attribute__((target("avx2,f16c"))) inline __m256 load8(const typename C::Storage* p) {
  if constexpr (std::is_same_v<C, F32Codec>) {
    return _mm256_loadu_ps(p);
  } else if constexpr (std::is_same_v<C, F16Codec>) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
}

// Sixteen elements of codec C at p, widened to fp32 (exact): the AVX-512 microkernel's row of B.
// Zero-masked forms with every lane kept, as cpu_lane_codecs.h's (GCC 12's header trips
// -Wmaybe-uninitialized on the plain ones).
template <class C>
__attribute__((target("avx512f"))) inline __m512 load16(const typename C::Storage* p) {
  if constexpr (std::is_same_v<C, F32Codec>) {
    return _mm512_loadu_ps(p);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (std::is_same_v<C, F16Codec>)
      return _mm512_maskz_cvtph_ps(0xffff, h);
    else
      return _mm512_castsi512_ps(
          _mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, h), 16));
  }
}

// v rounded to codec R's dtype and widened back (F32Codec: v itself): round_act's bits, in
// registers. fp16 by VCVTPS2PH (nearest even) and VCVTPH2PS, a vector holding a NaN redone lane
// by lane by dtype.h, as round_range does; bf16 by cpu_lane_codecs.h's round_bf16, as
// round_range does (the microkernels are `flatten`, so it inlines with their instructions).
inline void round_fp16_lanes(float* x, int n) {
  for (int i = 0; i < n; ++i) x[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
}

template <class R>
__attribute__((target("avx512f"))) inline __m512 round16(__m512 v) {
  if constexpr (std::is_same_v<R, F16Codec>) {
    if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) == 0)
      return _mm512_maskz_cvtph_ps(0xffff,
                                   _mm512_maskz_cvtps_ph(0xffff, v, _MM_FROUND_TO_NEAREST_INT));
    alignas(64) float x[16];
    _mm512_store_ps(x, v);
    round_fp16_lanes(x, 16);
    return _mm512_load_ps(x);
  } else if constexpr (std::is_same_v<R, BF16Codec>) {
    return (__m512)round_bf16((F16)v);
  } else {
    return v;
  }
}

template <class R>
__attribute__((target("avx2,f16c"))) inline __m256 round8(__m256 v) {
  if constexpr (std::is_same_v<R, F16Codec>) {
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) == 0)
      return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    alignas(32) float x[8];
    _mm256_store_ps(x, v);
    round_fp16_lanes(x, 8);
    return _mm256_load_ps(x);
  } else if constexpr (std::is_same_v<R, BF16Codec>) {
    return (__m256)round_bf16((F8)v);
  } else {
    return v;
  }
}

// A tile's lanes x (F16 or F8) stored into a 16-bit C of codec O: rounded to O's dtype
// (narrow_range's bits), or with kAdd added to the stored values first, one rounding
// (add_range's bits). The conversions are cpu_lane_codecs.h's, inlined into the microkernel.
template <class O, bool kAdd, class T>
inline void store_into(typename O::Storage* p, T x) {
  if constexpr (kAdd) x = load_widened<T, O>(p) + x;
  store_narrowed<T, O>(p, x);
}

// C (mr x nr tile, row stride ldc) = [C +] A (mr x kc) · B (kc x NR). A is a packed strip (kc x
// MR, k-major) or, kRowsA, MR rows where they are stored, row i at A + i·lda (an operand whose
// rows run along k: the activation of a forward product, the output gradient of a dinput one).
// B's row k is at B + k·ldb elements of codec Cd: a packed panel (fp32), or a 16-bit B where it
// is stored, widened in registers. The same fused multiply-adds in the same order either way.
// Rd: the tile is stored rounded to that codec's dtype (round16; F32Codec: as summed), for the
// last reduction block of an activation output, which then needs no rounding pass. Out: C's
// codec; a 16-bit C (a weight gradient summed over one reduction block) is not loaded (`load`
// false) and takes the tile by store_into, added into its values when kAdd.
template <class Cd, bool kRowsA, class Rd, class Out = F32Codec, bool kAdd = false>
__attribute__((target("avx512f,fma"), flatten)) void micro_avx512(int64_t kc, const float* A,
                                                                  int64_t lda, const void* B,
                                                                  int64_t ldb, void* Cv,
                                                                  int64_t ldc, bool load) {
  float* C = static_cast<float*>(Cv);
  constexpr int MR = 8, NV = 3;
  const auto* Bk = static_cast<const typename Cd::Storage*>(B);
  const float* rows[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) rows[i] = A + i * lda;
  __m512 c[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j)
      c[i][j] = load ? _mm512_loadu_ps(C + i * ldc + 16 * j) : _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    __m512 b[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) b[j] = load16<Cd>(Bk + 16 * j);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 a = _mm512_set1_ps(kRowsA ? rows[i][k] : A[i]);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) c[i][j] = _mm512_fmadd_ps(a, b[j], c[i][j]);
    }
    if (!kRowsA) A += MR;
    Bk += ldb;
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      const int64_t at = i * ldc + 16 * j;
      if constexpr (std::is_same_v<Out, F32Codec>)
        _mm512_storeu_ps(C + at, round16<Rd>(c[i][j]));
      else
        store_into<Out, kAdd>(static_cast<typename Out::Storage*>(Cv) + at, (F16)c[i][j]);
    }
}

// (x, y) = (x's low half and y's, x's high half and y's): its own inverse.
__attribute__((target("avx2"))) inline void swap_halves(__m256& x, __m256& y) {
  const __m256 lo = _mm256_permute2f128_ps(x, y, 0x20), hi = _mm256_permute2f128_ps(x, y, 0x31);
  x = lo;
  y = hi;
}

template <class Cd, bool kRowsA, class Rd, class Out = F32Codec, bool kAdd = false>
__attribute__((target("avx2,fma,f16c"), flatten)) void micro_avx2(int64_t kc, const float* A,
                                                                  int64_t lda, const void* B,
                                                                  int64_t ldb, void* Cv,
                                                                  int64_t ldc, bool load) {
  float* C = static_cast<float*>(Cv);
  constexpr int MR = 6, NV = 2;
  // A bf16 row of 16 is widened by two in-lane interleaves with zeros, one instruction per
  // vector where zero-extending and shifting takes two: b0 holds columns 0-3 and 8-11, b1 4-7
  // and 12-15, so C's tile is held in that order, its rows swapped by 128-bit halves as they
  // are loaded and stored. Each element's fused multiply-adds are the same.
  constexpr bool kInterleaved = std::is_same_v<Cd, BF16Codec>;
  const auto* Bk = static_cast<const typename Cd::Storage*>(B);
  const float* rows[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) rows[i] = A + i * lda;
  __m256 c[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j)
      c[i][j] = load ? _mm256_loadu_ps(C + i * ldc + 8 * j) : _mm256_setzero_ps();
  if (kInterleaved && load)
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) swap_halves(c[i][0], c[i][1]);
  for (int64_t k = 0; k < kc; ++k) {
    __m256 b0, b1;
    if constexpr (kInterleaved) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(Bk));
      b0 = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), x));
      b1 = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), x));
    } else {
      b0 = load8<Cd>(Bk);
      b1 = load8<Cd>(Bk + 8);
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 a = _mm256_broadcast_ss(kRowsA ? rows[i] + k : A + i);
      c[i][0] = _mm256_fmadd_ps(a, b0, c[i][0]);
      c[i][1] = _mm256_fmadd_ps(a, b1, c[i][1]);
    }
    if (!kRowsA) A += MR;
    Bk += ldb;
  }
  if (kInterleaved)
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) swap_halves(c[i][0], c[i][1]);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      const int64_t at = i * ldc + 8 * j;
      if constexpr (std::is_same_v<Out, F32Codec>)
        _mm256_storeu_ps(C + at, round8<Rd>(c[i][j]));
      else
        store_into<Out, kAdd>(static_cast<typename Out::Storage*>(Cv) + at, (F8)c[i][j]);
    }
}

// SSE2 (no FMA): packed A and B only, stored as summed.
inline void micro_sse2(int64_t kc, const float* Ap, int64_t /*lda*/, const void* B, int64_t ldb,
                       void* Cv, int64_t ldc, bool load) {
  constexpr int MR = 4, NV = 2;
  float* C = static_cast<float*>(Cv);
  const float* Bp = static_cast<const float*>(B);
  __m128 c[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j)
      c[i][j] = load ? _mm_loadu_ps(C + i * ldc + 4 * j) : _mm_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m128 b0 = _mm_loadu_ps(Bp), b1 = _mm_loadu_ps(Bp + 4);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m128 a = _mm_set1_ps(Ap[i]);
      c[i][0] = _mm_add_ps(c[i][0], _mm_mul_ps(a, b0));
      c[i][1] = _mm_add_ps(c[i][1], _mm_mul_ps(a, b1));
    }
    Ap += MR;
    Bp += ldb;
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) _mm_storeu_ps(C + i * ldc + 4 * j, c[i][j]);
}

// The microkernel for a B of codec C (fp32: packed panels; 16-bit: B where it is stored), an A
// packed or read in place (kRowsA) and a tile stored rounded to R's dtype. SSE2 takes packed
// operands only and stores as summed: null otherwise.
using Micro = void (*)(int64_t, const float*, int64_t, const void*, int64_t, void*, int64_t, bool);
template <class C, bool kRowsA, class R>
Micro micro_of(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return micro_avx512<C, kRowsA, R>;
    case Isa::kAvx2: return micro_avx2<C, kRowsA, R>;
    case Isa::kSse2: break;
  }
  return std::is_same_v<C, F32Codec> && !kRowsA && std::is_same_v<R, F32Codec> ? micro_sse2
                                                                               : nullptr;
}

// The microkernel storing into a 16-bit C of codec O (added into it when kAdd), A and B packed
// (a weight gradient's operands); null on SSE2.
template <class O, bool kAdd>
Micro micro_into(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return micro_avx512<F32Codec, false, F32Codec, O, kAdd>;
    case Isa::kAvx2: return micro_avx2<F32Codec, false, F32Codec, O, kAdd>;
    case Isa::kSse2: break;
  }
  return nullptr;
}

}  // namespace zt::cpu
