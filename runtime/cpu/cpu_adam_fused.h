// The fused Adam loop both CPU Adams run: CpuKernels::adamw (cpu_optimizer_kernels.cpp) and
// offload's CpuAdam (offload/cpu_adam.cpp). Each element's master, m, v and gradient are loaded
// once, the gradient widened in registers, the update is cpu_adam_update.h's, and the results
// are stored together with the working copy, rounded in registers: 28 bytes per element (fp32
// gradient) plus the working copy's 2, where a gradient widened through a scratch buffer and a
// working copy narrowed from the stored master each cost another pass over the chunk.
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
//
// Stores are ordinary stores. master, m and v are read then written, so their lines are in
// cache when written and a non-temporal store would only evict them early. The working copy is
// written without being read, so its lines are filled first (2 bytes per element beside the 30
// a step must move); streaming it instead measured 4% faster by the best of 11 steps of 124M
// parameters here, inside this shared machine's noise (the medians 229 and 220 ms), and would
// need 32-byte-aligned working pointers, which a decay run's offset does not give: not taken.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "runtime/cpu/cpu_adam_update.h"
#include "runtime/cpu/cpu_simd.h"
#include "runtime/dtype.h"
#include "runtime/kernels.h"

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

// No working copy to write.
struct NoWorking {
  using Storage = void;
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

// The gradient lanes at g as fp32, element g[0] first (G: dtype.h's codec of the stored dtype).
template <class T, class G>
inline T load_grad(const typename G::Storage* g) {
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

// bf16 bits of every lane of p in the low halves of U's lanes: dtype.h's fp32_to_bf16.
template <class T>
inline typename Words<T>::U bf16_bits(T p) {
  using U = typename Words<T>::U;
  const U b = (U)p;
  const U rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
  const U quiet_nan = (b >> 16) | 0x40u;
  return (b & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
}

// The working copy's lanes at w = p rounded to W's dtype.
template <class T, class W>
inline void store_working(typename W::Storage* w, T p) {
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

// Elements [0, n) of one chunk: load, update, store, in one pass.
template <class V, bool kDecoupled, class G, class W>
void fused_range(float* master, const typename G::Storage* grad, float* m, float* v,
                 typename W::Storage* working, const AdamScalars& scalars, int64_t n) {
  // A local copy: the stores below could alias a referenced struct, which would make the
  // compiler reload every scalar each iteration; a local one stays in registers.
  const AdamScalars a = scalars;
  simd_loop<V>(0, n, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    T p = load<T>(master + i), mi = load<T>(m + i), vi = load<T>(v + i);
    adam_update<kDecoupled>(p, load_grad<T, G>(grad + i), mi, vi, a);
    store<T>(m + i, mi);
    store<T>(v + i, vi);
    store<T>(master + i, p);
    if constexpr (!std::is_same_v<W, NoWorking>) store_working<T, W>(working + i, p);
  });
}

// The instruction set the fused loop runs for `isa`: the AVX2 path needs F16C beside it (every
// AVX2 CPU so far has it); without it, SSE2.
inline Isa fused_adam_isa(Isa isa) {
  __builtin_cpu_init();
  if (isa == Isa::kAvx2 && !__builtin_cpu_supports("f16c")) return Isa::kSse2;
  return isa;
}

// One Adam step over elements [0, n) of one chunk on the calling thread: master, m and v fp32;
// grad in its stored dtype; working null or written with the updated master in its dtype. isa:
// from fused_adam_isa.
inline void fused_adam(Isa isa, float* master, ConstOperand grad, float* m, float* v,
                       Operand working, const AdamScalars& a, bool decoupled, int64_t n) {
  visit_codec(grad.dtype, [&](auto grad_tag) {
    using G = decltype(grad_tag);
    const auto* g = static_cast<const typename G::Storage*>(grad.data);
    const auto run = [&](auto working_tag) {
      using W = decltype(working_tag);
      typename W::Storage* w = nullptr;
      if constexpr (!std::is_same_v<W, NoWorking>)
        w = static_cast<typename W::Storage*>(working.data);
      run_isa_f16c(isa, [&](auto lanes) {
        using V = typename decltype(lanes)::type;
        if (decoupled)
          fused_range<V, true, G, W>(master, g, m, v, w, a, n);
        else
          fused_range<V, false, G, W>(master, g, m, v, w, a, n);
      });
    };
    if (!working)
      run(NoWorking{});
    else
      visit_codec(working.dtype, run);
  });
}

}  // namespace zt::cpu
