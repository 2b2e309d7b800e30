// Lanes of 16-bit values converted in registers, with dtype.h's bits: the loads and stores the
// fused Adam (cpu_adam_fused.h) and sum_squares (cpu_elementwise_kernels.cpp) run inside their
// vector loops instead of widening or narrowing through a scratch buffer.
//
// Conversions, each giving dtype.h's bits:
//   bf16 in   the 16 bits shifted into the top of a float (exact);
//   bf16 out  dtype.h's integer rounding (bias 0x7fff plus the lowest kept bit, then the top
//             half; NaN quieted) on integer lanes;
//   fp16 in   VCVTPH2PS (AVX-512F, or F16C on the AVX2 path): fp16_to_fp32's value for every
//             pattern but a signalling NaN, which it quiets, as the gradient's first operation
//             (times grad_scale) does anyway;
//   fp16 out  VCVTPS2PH with round to nearest even: fp32_to_fp16's bits for every non-NaN
//             float (runtime/cpu/cpu_elementwise_kernels.cpp checked all of them); a vector
//             holding a NaN is redone by dtype.h, which maps every NaN to one quiet NaN.
// The SSE2 path and every vector tail convert lane by lane with dtype.h.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "runtime/cpu/cpu_simd.h"
#include "runtime/dtype.h"

namespace zt::cpu {

typedef uint32_t U4 __attribute__((vector_size(16)));
typedef uint32_t U8 __attribute__((vector_size(32)));
typedef uint32_t U16 __attribute__((vector_size(64)));
typedef uint16_t H4 __attribute__((vector_size(8)));
typedef uint16_t H8 __attribute__((vector_size(16)));
typedef uint16_t H16 __attribute__((vector_size(32)));

// The unsigned 32-bit and the 16-bit vectors with V's lane count.
template <class V>
struct Words;
template <>
struct Words<F4> {
  using U = U4;
  using H = H4;
};
template <>
struct Words<F8> {
  using U = U8;
  using H = H8;
};
template <>
struct Words<F16> {
  using U = U16;
  using H = H16;
};

// fp16 lanes by the conversion instructions. Each helper is compiled for the instructions it uses
// (an intrinsic inlines only into a function of its instruction set); `flatten` inlines it into
// that instruction set's loop.
// The AVX-512 conversions use the zero-masked forms with every lane kept: the plain ones trip
// GCC 12's -Wmaybe-uninitialized inside its own header; the instructions are the same.
__attribute__((target("avx512f"))) inline F16 widen_fp16(const uint16_t* h, Lanes<F16>) {
  return (F16)_mm512_maskz_cvtph_ps(0xffff,
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
}
__attribute__((target("avx2,f16c"))) inline F8 widen_fp16(const uint16_t* h, Lanes<F8>) {
  return (F8)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}
__attribute__((target("avx512f"))) inline void narrow_fp16(uint16_t* h, F16 p) {
  const __m512 x = (__m512)p;
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(h),
                      _mm512_maskz_cvtps_ph(0xffff, x, _MM_FROUND_TO_NEAREST_INT));
  if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) != 0)
    for (int l = 0; l < 16; ++l) h[l] = fp32_to_fp16(p[l]);
}
__attribute__((target("avx2,f16c"))) inline void narrow_fp16(uint16_t* h, F8 p) {
  const __m256 x = (__m256)p;
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0)
    for (int l = 0; l < 8; ++l) h[l] = fp32_to_fp16(p[l]);
}

// The lanes at g as fp32, element g[0] first (G: dtype.h's codec of the stored dtype).
template <class T, class G>
inline T load_widened(const typename G::Storage* g) {
  if constexpr (std::is_same_v<G, F32Codec>) {
    return load<T>(g);
  } else if constexpr (std::is_same_v<T, float>) {
    return G::widen(*g);
  } else if constexpr (std::is_same_v<G, BF16Codec>) {
    typename Words<T>::H h;
    std::memcpy(&h, g, sizeof h);
    return (T)(__builtin_convertvector(h, typename Words<T>::U) << 16);
  } else if constexpr (!std::is_same_v<T, F4>) {
    return widen_fp16(g, Lanes<T>{});
  } else {  // SSE2: no conversion instruction
    T x;
    for (int64_t l = 0; l < kWidth<T>; ++l) x[l] = G::widen(g[l]);
    return x;
  }
}

// bf16 bits of every lane of p in the low halves of U's lanes: dtype.h's fp32_to_bf16. (The
// NaN test is a signed compare, which AVX2 has; an unsigned one it would emulate.)
template <class T>
inline typename Words<T>::U bf16_bits(T p) {
  using U = typename Words<T>::U;
  typedef int32_t I __attribute__((vector_size(sizeof(T))));
  const U b = (U)p;
  const U rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
  const U quiet_nan = (b >> 16) | 0x40u;
  return (I)(b & 0x7fffffffu) > 0x7f800000 ? quiet_nan : rounded;
}

// p rounded to bf16 and widened back, lane by lane: float(bf16(p)) with dtype.h's bits.
template <class T>
inline T round_bf16(T p) {
  if constexpr (std::is_same_v<T, float>)
    return bf16_to_fp32(fp32_to_bf16(p));
  else
    return (T)(bf16_bits(p) << 16);
}

// The working copy's lanes at w = p rounded to W's dtype.
template <class T, class W>
inline void store_narrowed(typename W::Storage* w, T p) {
  if constexpr (std::is_same_v<W, F32Codec>) {
    store<T>(w, p);
  } else if constexpr (std::is_same_v<T, float>) {
    *w = W::narrow(p);
  } else if constexpr (std::is_same_v<W, BF16Codec>) {
    const typename Words<T>::H h = __builtin_convertvector(bf16_bits(p), typename Words<T>::H);
    std::memcpy(w, &h, sizeof h);
  } else if constexpr (!std::is_same_v<T, F4>) {
    narrow_fp16(w, p);
  } else {  // SSE2
    for (int64_t l = 0; l < kWidth<T>; ++l) w[l] = W::narrow(p[l]);
  }
}

}  // namespace zt::cpu
