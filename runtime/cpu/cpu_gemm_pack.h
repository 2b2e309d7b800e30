// The packed GEMM's packing (cpu_gemm.cpp): a block of A or a panel of B laid out as the
// microkernels (cpu_gemm_micro.h) read it, strips of MR rows or NR columns, k-major, zeros past
// the edge, widened to fp32 as it is packed. The fast paths use AVX2 (and F16C for fp16): eight
// values of B's dtype widened in a register, and 8 x 8 transposes for the operands whose packed
// order crosses their memory order. Private to cpu_gemm.cpp, its only includer.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "runtime/cpu/cpu_gemm_micro.h"
#include "runtime/cpu/cpu_simd.h"

namespace zt::cpu {

// r[0..8) (rows) transposed in place: r[j][i] = old r[i][j].
__attribute__((target("avx2"))) inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// Bp = B[k0, k0 + kc) x [n0, n0 + nc) as strips of NR columns, each kc x NR (k-major), columns
// past nc zero. `b` points at B(k0, n0); element (k, n) at b + (k·rs + n·cs) elements of C,
// with rs == 1 or cs == 1. Portable loops; pack_b_avx2 below is the same with AVX2.
template <class C>
void pack_b_portable(float* Bp, const void* b, int64_t rs, int64_t cs, int64_t kc, int64_t nc,
                     int64_t NR) {
  const auto* base = static_cast<const typename C::Storage*>(b);
  for (int64_t j0 = 0; j0 < nc; j0 += NR, Bp += kc * NR) {
    const int64_t nr = std::min(NR, nc - j0);
    for (int64_t k = 0; k < kc; ++k) {
      float* dst = Bp + k * NR;
      for (int64_t c = 0; c < nr; ++c) dst[c] = C::widen(base[k * rs + (j0 + c) * cs]);
      std::fill(dst + nr, dst + NR, 0.0f);
    }
  }
}

template <class C>
__attribute__((target("avx2,f16c"))) void pack_b_avx2(float* Bp, const void* b, int64_t rs,
                                                      int64_t cs, int64_t kc, int64_t nc,
                                                      int64_t NR) {
  using S = typename C::Storage;
  const S* base = static_cast<const S*>(b);
  for (int64_t j0 = 0; j0 < nc; j0 += NR, Bp += kc * NR) {
    const int64_t nr = std::min(NR, nc - j0);
    if (nr < NR)
      for (int64_t k = 0; k < kc; ++k) std::fill(Bp + k * NR + nr, Bp + (k + 1) * NR, 0.0f);
    if (cs == 1) {  // a row of B is contiguous: widened straight into its slot
      for (int64_t k = 0; k < kc; ++k) {
        const S* src = base + k * rs + j0;
        float* dst = Bp + k * NR;
        int64_t c = 0;
        for (; c + 8 <= nr; c += 8) _mm256_store_ps(dst + c, load8<C>(src + c));
        for (; c < nr; ++c) dst[c] = C::widen(src[c]);
      }
      continue;
    }
    // A column of B is contiguous along k (B is a weight read as Wᵀ): 8 columns x 8 k at a
    // time, transposed in registers.
    int64_t c0 = 0;
    for (; c0 + 8 <= nr; c0 += 8) {
      const S* col = base + (j0 + c0) * cs;
      int64_t k = 0;
      for (; k + 8 <= kc; k += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i) r[i] = load8<C>(col + i * cs + k);
        transpose8(r);
        for (int i = 0; i < 8; ++i) _mm256_storeu_ps(Bp + (k + i) * NR + c0, r[i]);
      }
      for (; k < kc; ++k)
        for (int i = 0; i < 8; ++i) Bp[k * NR + c0 + i] = C::widen(col[i * cs + k]);
    }
    for (int64_t c = c0; c < nr; ++c) {
      const S* col = base + (j0 + c) * cs;
      for (int64_t k = 0; k < kc; ++k) Bp[k * NR + c] = C::widen(col[k]);
    }
  }
}

// Ap = A[0, mc) x [0, kc) (fp32, element (i, k) at a[i·rs + k·cs], rs == 1 or cs == 1) as
// strips of MR rows, each kc x MR (k-major), rows past mc zero. Portable loops; pack_a_avx2
// below transposes 8 x 8 blocks in registers where A's rows are contiguous.
inline void pack_a_portable(float* Ap, const float* a, int64_t rs, int64_t cs, int64_t mc,
                            int64_t kc, int64_t MR) {
  for (int64_t i0 = 0; i0 < mc; i0 += MR, Ap += kc * MR) {
    const int64_t mr = std::min(MR, mc - i0);
    for (int64_t k = 0; k < kc; ++k) {
      float* dst = Ap + k * MR;
      for (int64_t r = 0; r < mr; ++r) dst[r] = a[(i0 + r) * rs + k * cs];
      for (int64_t r = mr; r < MR; ++r) dst[r] = 0.0f;
    }
  }
}

__attribute__((target("avx2"))) inline void pack_a_avx2(float* Ap, const float* a, int64_t rs,
                                                        int64_t cs, int64_t mc, int64_t kc,
                                                        int64_t MR) {
  for (int64_t i0 = 0; i0 < mc; i0 += MR, Ap += kc * MR) {
    const int64_t mr = std::min(MR, mc - i0);
    if (cs != 1) {  // A transposed: a k's rows are adjacent, and with rs == 1 contiguous
      if (rs == 1 && mr == 8 && MR == 8) {  // AVX-512's 8-row strip: one vector per k
        for (int64_t k = 0; k < kc; ++k)
          _mm256_store_ps(Ap + k * 8, _mm256_loadu_ps(a + i0 + k * cs));
        continue;
      }
      if (rs == 1 && mr == 6 && MR == 6) {  // AVX2's 6-row strip
        for (int64_t k = 0; k < kc; ++k) std::memcpy(Ap + k * 6, a + i0 + k * cs, 6 * 4);
        continue;
      }
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = a + i0 * rs + k * cs;
        float* dst = Ap + k * MR;
        for (int64_t r = 0; r < mr; ++r) dst[r] = src[r * rs];
        for (int64_t r = mr; r < MR; ++r) dst[r] = 0.0f;
      }
      continue;
    }
    // Rows contiguous along k: up to 8 rows x 8 k transposed in registers (rows past mr zero),
    // each k's MR values stored (masked when MR < 8: AVX2's 6-row tile).
    int64_t k = 0;
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(MR)), lanes);
    if (MR <= 8)
      for (; k + 8 <= kc; k += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i)
          r[i] = i < mr ? _mm256_loadu_ps(a + (i0 + i) * rs + k) : _mm256_setzero_ps();
        transpose8(r);
        for (int i = 0; i < 8; ++i) {
          if (MR == 8)
            _mm256_store_ps(Ap + (k + i) * 8, r[i]);
          else
            _mm256_maskstore_ps(Ap + (k + i) * MR, keep, r[i]);
        }
      }
    for (; k < kc; ++k) {
      float* dst = Ap + k * MR;
      for (int64_t r = 0; r < mr; ++r) dst[r] = a[(i0 + r) * rs + k];
      for (int64_t r = mr; r < MR; ++r) dst[r] = 0.0f;
    }
  }
}

}  // namespace zt::cpu
