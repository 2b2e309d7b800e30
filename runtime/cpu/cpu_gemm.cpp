// CpuKernels::gemm, the GEMM behind matmul's products with 16-bit weights on a CPU without a
// native GEMM for their dtype (fp16 anywhere; bf16 without AVX512_BF16). It reads the 16-bit
// weight once, in its stored 2 bytes, widening it in registers where the microkernel reads it
// (or, where it must be reordered, as its panel is packed), so no widened copy of it is written
// and read back (the blocked oneDNN sgemm path it replaced paid that pass on every forward and
// dinput product). The output, an activation, is rounded to the table's activation dtype in
// registers, as the microkernel stores the last reduction block's tile. The weight gradient is
// a GEMM into the 16-bit gradient: over one reduction block (up to kKc tokens) the microkernel
// stores its tile into it, rounded in registers (added into the stored values first when
// accumulating); over more, each block of it is summed in fp32 in the thread's scratch, then
// added with one rounding while in cache (an sgemm into an fp32 block and a separate adding
// pass, which this replaced, took about 40 ms more over GPT-2 124M's weight gradients at B=4,
// T=64: that pass read and wrote every gradient again).
//
// Structure (the classic one, as BLIS and oneDNN's own kernels use): C is cut into column
// ranges, one per thread (row ranges for a C with more rows than columns: a tall weight's
// gradient); each thread walks its rows in blocks of kMc, its columns in chunks of kNc (more
// for a reduction shorter than kKc, the panel's bytes the same) and the reduction in blocks of
// kKc. The microkernel keeps an MR x NR tile of C in registers over a kKc block: AVX-512 8 x 48
// (24 accumulators), AVX2 6 x 16 (12), SSE2 4 x 8 (8, multiply and add: SSE2 has no FMA).
// Operands the microkernel can read where they are stored are not packed (AVX-512 and AVX2): an
// A whose rows run along k, MR rows read side by side, and a 16-bit B whose rows are contiguous,
// NR values of a row widened in registers. The others are packed: B's panel (kKc x kNc, NR
// columns interleaved, widened) into the thread's scratch unless it holds that panel already;
// A (MR rows interleaved) per row block for the whole reduction into each thread's scratch, or,
// too large for that (a long reduction), a reduction block at a time into one buffer the threads
// fill together between two barriers; a strip narrower than the tile, alone, zeros past its
// edge.
// Determinism: every element of C is the same chain of fused multiply-adds over k in increasing
// order, blocks of kKc summed in order, whatever the thread count or the rows or columns a
// thread got; a different instruction set (FMA or not) may give different bits, as oneDNN's do.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_lane_codecs.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/dtype.h"
#include "runtime/status.h"

namespace zt {
using namespace cpu;
namespace {

constexpr int64_t kKc = 512;  // reduction block: an A micro-panel (MR x kKc) in L1, a B strip in L2
constexpr int64_t kMc = 256;  // rows of C per block at most (then rounded up to a multiple of MR)
constexpr int64_t kNc = 384;  // columns of C per chunk: the B panel (kKc x kNc, 768 KiB) in L2
constexpr int64_t kAWholeFloats = int64_t(1) << 20;  // A packed whole up to 4 MiB per thread

// The most rows of a row block on an MR-row tile: kMc rounded up to MR (gemm balances the
// blocks, each a multiple of MR).
int64_t max_block_rows(int64_t MR) { return (kMc + MR - 1) / MR * MR; }
// Whether a row block's A is packed whole for a reduction of length K (else a reduction block
// at a time, shared by the threads).
bool a_packed_whole(int64_t MR, int64_t K) {
  return max_block_rows(MR) * ((K + kKc - 1) / kKc) * kKc <= kAWholeFloats;
}

// The microkernel's shape per instruction set.
struct Tile {
  int64_t mr, nr;
};
Tile tile_of(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return {8, 48};
    case Isa::kAvx2: return {6, 16};
    case Isa::kSse2: break;
  }
  return {4, 8};
}

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
void micro_sse2(int64_t kc, const float* Ap, int64_t /*lda*/, const void* B, int64_t ldb, void* Cv,
                int64_t ldc, bool load) {
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

// ---------------------------------------------------------------------------------------------
// Packing. The fast paths use AVX2 (and F16C for fp16): eight values of B's dtype widened in a
// register, and 8 x 8 transposes for the operands whose packed order crosses their memory order.

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
void pack_a_portable(float* Ap, const float* a, int64_t rs, int64_t cs, int64_t mc, int64_t kc,
                     int64_t MR) {
  for (int64_t i0 = 0; i0 < mc; i0 += MR, Ap += kc * MR) {
    const int64_t mr = std::min(MR, mc - i0);
    for (int64_t k = 0; k < kc; ++k) {
      float* dst = Ap + k * MR;
      for (int64_t r = 0; r < mr; ++r) dst[r] = a[(i0 + r) * rs + k * cs];
      for (int64_t r = mr; r < MR; ++r) dst[r] = 0.0f;
    }
  }
}

__attribute__((target("avx2"))) void pack_a_avx2(float* Ap, const float* a, int64_t rs, int64_t cs,
                                                 int64_t mc, int64_t kc, int64_t MR) {
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

}  // namespace

bool CpuKernels::gemm_takes_16bit_c(int64_t K) const { return a_packed_whole(tile_of(isa_).mr, K); }

void CpuKernels::gemm(int64_t M, int64_t N, int64_t K, const GemmMatrix& A, const GemmMatrix& B,
                      Operand c, int64_t ldc, bool accumulate) {
  ZT_ASSERT(A.op.dtype == DType::kF32, "gemm: A in {}", dtype_name(A.op.dtype));
  ZT_ASSERT(B.row_stride == 1 || B.col_stride == 1, "gemm: B strides {} x {}", B.row_stride,
            B.col_stride);
  const bool c16 = c.dtype != DType::kF32;
  ZT_ASSERT(!c16 || gemm_takes_16bit_c(K), "gemm: a {} C needs K={} within one packed A",
            dtype_name(c.dtype), K);
  if (M <= 0 || N <= 0 || (K <= 0 && accumulate)) return;  // C unchanged
  float* C = c16 ? nullptr : static_cast<float*>(c.data);
  if (K <= 0) {  // C = 0 (zero bits in every dtype)
    const size_t row_bytes = static_cast<size_t>(N) * dtype_size(c.dtype);
    for (int64_t r = 0; r < M; ++r) std::memset(c.at(r * ldc).data, 0, row_bytes);
    return;
  }
  const Tile tile = tile_of(isa_);
  const int64_t MR = tile.mr, NR = tile.nr;
  // A short reduction (a weight gradient's, over the tokens) widens the B panel to the same
  // bytes, so a thread's columns more often fit one panel, packed once for every row block.
  // Rows per block: a thread's rows cut into the fewest blocks of at most kMc, balanced, each a
  // multiple of MR (256 rows on a 6-row tile are one block of 258, not 252 and a sliver of 4
  // that would pack B again for 4 rows), so at most kMc rounded up to MR.
  const int64_t mc_max = max_block_rows(MR);
  const int64_t nc_max = std::max(NR, kKc * kNc / std::min(K, kKc) / NR * NR);
  const auto* a = static_cast<const float*>(A.op.data);
  const bool fast = isa_ != Isa::kSse2 && (B.op.dtype != DType::kF16 || f16c_);
  using PackB = void (*)(float*, const void*, int64_t, int64_t, int64_t, int64_t, int64_t);
  PackB pack_b = nullptr;
  visit_codec(B.op.dtype, [&](auto codec) {
    using C = decltype(codec);
    pack_b = fast ? pack_b_avx2<C> : pack_b_portable<C>;
  });
  const auto pack_a = isa_ != Isa::kSse2 ? pack_a_avx2 : pack_a_portable;
  // Operands read where they are stored (AVX-512 and AVX2): an A whose rows run along k (the
  // forward's activation, dinput's output gradient), and a 16-bit B whose rows are contiguous (a
  // weight in the forward product, the LM head's in dinput's), widened in registers. Packing
  // them is a pass through memory that nothing overlaps; reading them in place costs a
  // conversion per vector of B for every strip of A (on a Zen 4 EPYC, two threads, GPT-2 124M's
  // forward products at 256 rows with cold weights: 7-34% less time each; the LM head's 16-bit
  // dinput 114 -> 97 ms). Only a strip narrower than the tile is packed (zeros past its edge).
  // The same products, so the same bits. An fp32 B (the weight gradient's output gradient,
  // rows of 2,304-3,072 floats) stays packed: read in place, a step's weight gradients took 5%
  // more time on AVX-512 and 33% more on AVX2, its rows too far apart.
  const bool a_in_place = isa_ != Isa::kSse2 && A.col_stride == 1;
  const bool b_in_place = fast && B.col_stride == 1 && B.op.dtype != DType::kF32;
  // An fp32 C (an activation) is rounded to the activation dtype as the microkernel stores the
  // last reduction block's tile (AVX-512 and AVX2; SSE2 by a pass over each finished block).
  const bool round_in_micro = !c16 && act_ != DType::kF32 && isa_ != Isa::kSse2;
  Micro micros[2][2][2] = {};  // [A in place][B in place][rounded]
  for (const bool rows_a : {false, true})
    for (const bool direct_b : {false, true})
      for (const bool rounded : {false, true})
        visit_codec(direct_b ? B.op.dtype : DType::kF32, [&](auto codec) {
          visit_codec(rounded ? act_ : DType::kF32, [&](auto round_codec) {
            using C = decltype(codec);
            using R = decltype(round_codec);
            micros[rows_a][direct_b][rounded] =
                rows_a ? micro_of<C, true, R>(isa_) : micro_of<C, false, R>(isa_);
          });
        });
  // A 16-bit C summed over one reduction block (a weight gradient over at most kKc tokens) is
  // stored by the microkernel, rounded in registers (added into the stored values first when
  // accumulating), not summed into an fp32 block (mc x nc floats a thread, 792 KiB over 256
  // tokens, beside a B panel as large in a 1 MiB L2) that a pass then rounds into C. The same
  // bits. GPT-2 124M's block weight gradients at B=4, T=64 (Zen 4 EPYC, two threads, medians of
  // 11-15 alternations): AVX-512 fp16 261 -> 241 and 235 -> 234 ms, AVX2 bf16 294 -> 287 and
  // 268 -> 263, within this shared machine's noise. A longer reduction sums each block of C in
  // fp32 and adds it in once complete.
  Micro into = nullptr;
  if (c16 && K <= kKc && !a_in_place && !b_in_place)
    visit_codec(c.dtype, [&](auto codec) {
      using O = decltype(codec);
      if constexpr (!std::is_same_v<O, F32Codec>)
        into = accumulate ? micro_into<O, true>(isa_) : micro_into<O, false>(isa_);
    });

  // A packed A: a row block's, once for the whole reduction when it fits in each thread's
  // scratch, serves every column chunk. A larger A (a long reduction) is packed one reduction
  // block at a time into one buffer shared by the threads, each packing its share of the
  // strips, so no thread packs what another packs too.
  const int64_t k_blocks = (K + kKc - 1) / kKc, a_block_floats = mc_max * kKc;
  const bool a_whole = a_packed_whole(MR, K);
  const bool a_shared_blocks = !a_in_place && !a_whole;
  // The threads split C's columns in strips of NR, in contiguous ranges; a C with at least as
  // many rows as columns (a weight gradient over a tall weight) is split by rows in strips of
  // MR instead, where each thread reads only its own rows of A (not with a shared A: that needs
  // every thread on every row block).
  const bool by_rows = !a_shared_blocks && M >= N;
  const int64_t strips = by_rows ? (M + MR - 1) / MR : (N + NR - 1) / NR;
  const int threads = static_cast<int>(std::min<int64_t>(strips, omp_get_max_threads()));
  float* a_shared = nullptr;
  if (a_shared_blocks)
    a_shared = reinterpret_cast<float*>(
        (reinterpret_cast<uintptr_t>(thread_scratch<ScratchSlot::kCall>(a_block_floats + 16)) +
         63) &
        ~uintptr_t(63));
  // A packed whole on a C split by columns, where a thread's columns take more than one B panel
  // (the weight gradients of qkv and fc: 1,152 and 1,536 columns a thread, panels of 768 over
  // 256 tokens): every row block's A is packed once, and each B panel then serves every row
  // block (column chunks outside row blocks), where row blocks outside would pack each panel
  // again for every row block.
  const int64_t all_m_blocks = (M + kMc - 1) / kMc;
  const bool a_all = !a_in_place && a_whole && !by_rows && all_m_blocks > 1 &&
                     (N + threads - 1) / threads > nc_max &&
                     all_m_blocks * a_block_floats * k_blocks <= kAWholeFloats;
  // Per thread: the packed A (an A in place: one narrow strip), B's panel, C's block.
  const int64_t ap_floats = a_in_place ? MR * kKc
                            : a_all    ? all_m_blocks * a_block_floats * k_blocks
                            : a_whole  ? a_block_floats * k_blocks
                                       : 0;
  const int64_t bp_floats = kKc * nc_max;
  // A 16-bit C's block (mc x nc) is summed in fp32 here, then added in with one rounding.
  const int64_t cb_floats = c16 && !into ? mc_max * nc_max : 0;
  // n fp32 sums into the 16-bit C at element `at` with one rounding: add's bits, or the sums
  // rounded when C is not accumulated into.
  const auto take_sums = [&](int64_t at, const float* sums, int64_t n) {
    if (accumulate)
      add_range(c.at(at), sums, n);
    else
      narrow_range(c.at(at), sums, n);
  };
  const auto body = [&](int t) {
    float* scratch = thread_scratch<ScratchSlot::kWorker>(ap_floats + bp_floats + cb_floats + 16);
    // 64-byte aligned panels.
    float* Ap =
        reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
    float* Bp = Ap + ap_floats;
    float* Cb = Bp + bp_floats;
    // The panel Bp holds (its first k and n; -1: none yet): one B panel serves every row block
    // when the thread's columns and the reduction each fit one (a weight gradient's B, an
    // activation or an output gradient, beside a tall A). A B in place: its narrow last strip.
    int64_t packed_k0 = -1, packed_n0 = -1;
    alignas(64) float edge[8 * 48];
    const int64_t s_lo = strips * t / threads, s_hi = strips * (t + 1) / threads;
    const int64_t m_lo = by_rows ? std::min(M, s_lo * MR) : 0;
    const int64_t m_hi = by_rows ? std::min(M, s_hi * MR) : M;
    const int64_t n_lo = by_rows ? 0 : std::min(N, s_lo * NR);
    const int64_t n_hi = by_rows ? N : std::min(N, s_hi * NR);
    // C[m0, m0 + mc) x [n0, n0 + nc) += A[m0, m0 + mc) x [k0, k0 + kc) · B's panel at k0; Ab:
    // that block of A packed (null for an A in place).
    const auto product = [&](const float* Ab, int64_t m0, int64_t mc, int64_t k0, int64_t kc,
                             int64_t n0, int64_t nc) {
      if (!b_in_place && (k0 != packed_k0 || n0 != packed_n0)) {
        pack_b(Bp, B.op.at(k0 * B.row_stride + n0 * B.col_stride).data, B.row_stride, B.col_stride,
               kc, nc, NR);
        packed_k0 = k0;
        packed_n0 = n0;
      }
      const bool load = k0 > 0 || (accumulate && !c16);
      const bool last = k0 + kc >= K;
      const int64_t ldt = c16 ? nc : ldc;
      float* target = c16 ? Cb : C + m0 * ldc + n0;
      for (int64_t i0 = 0; i0 < mc; i0 += MR) {
        const int64_t mr = std::min(MR, mc - i0);
        // A's strip: packed, or in place (row i at ap + i·lda), or a narrow strip packed here.
        const float* ap = Ab ? Ab + i0 * kc : a + (m0 + i0) * A.row_stride + k0;
        const bool rows_a = !Ab && mr == MR;
        if (!Ab && !rows_a) {
          pack_a(Ap, ap, A.row_stride, 1, mr, kc, MR);
          ap = Ap;
        }
        const int64_t lda = rows_a ? A.row_stride : MR;
        for (int64_t j0 = 0; j0 < nc; j0 += NR) {
          const int64_t nr = std::min(NR, nc - j0);
          // B's strip: its packed panel's, or in place, or a narrow last strip packed once per
          // reduction block.
          const bool direct_b = b_in_place && nr == NR;
          const void* bs = Bp + j0 * kc;
          int64_t ldb = NR;
          if (b_in_place) {
            const void* at = B.op.at(k0 * B.row_stride + n0 + j0).data;
            if (direct_b) {
              bs = at;
              ldb = B.row_stride;
            } else if (k0 != packed_k0 || n0 + j0 != packed_n0) {
              pack_b(Bp, at, B.row_stride, 1, kc, nr, NR);
              packed_k0 = k0;
              packed_n0 = n0 + j0;
            }
            if (!direct_b) bs = Bp;
          }
          const Micro run = micros[rows_a][direct_b][last && round_in_micro];
          if (into) {  // the one reduction block's tile into the 16-bit C; an edge via `edge`
            const int64_t at = (m0 + i0) * ldc + n0 + j0;
            if (mr == MR && nr == NR) {
              into(kc, ap, lda, bs, ldb, c.at(at).data, ldc, false);
              continue;
            }
            run(kc, ap, lda, bs, ldb, edge, NR, false);
            for (int64_t r = 0; r < mr; ++r) take_sums(at + r * ldc, edge + r * NR, nr);
            continue;
          }
          float* ct = target + i0 * ldt + j0;
          if (mr == MR && nr == NR) {
            run(kc, ap, lda, bs, ldb, ct, ldt, load);
            continue;
          }
          if (load)
            for (int64_t r = 0; r < mr; ++r) std::memcpy(edge + r * NR, ct + r * ldt, nr * 4);
          run(kc, ap, lda, bs, ldb, edge, NR, load);
          for (int64_t r = 0; r < mr; ++r) std::memcpy(ct + r * ldt, edge + r * NR, nr * 4);
        }
      }
      if (!last || round_in_micro || into) return;
      // The block is complete, and in cache: a 16-bit C takes its sums with one rounding (add's
      // bits, or the sums rounded when C is not accumulated into); an fp32 C on SSE2 is rounded
      // to the activation dtype.
      for (int64_t r = 0; r < mc; ++r) {
        const int64_t at = (m0 + r) * ldc + n0;
        if (c16)
          take_sums(at, Cb + r * nc, nc);
        else
          round_act(C, at, at + nc);
      }
    };
    const int64_t m_blocks = std::max<int64_t>(1, (m_hi - m_lo + kMc - 1) / kMc);
    const int64_t mc_step = ((m_hi - m_lo + m_blocks - 1) / m_blocks + MR - 1) / MR * MR;
    // Row block [m0, m0 + mc) of A packed whole into dst, reduction block kb at
    // dst + kb·a_block_floats.
    const auto pack_a_block = [&](float* dst, int64_t m0, int64_t mc) {
      for (int64_t kb = 0; kb < k_blocks; ++kb)
        pack_a(dst + kb * a_block_floats, a + m0 * A.row_stride + kb * kKc * A.col_stride,
               A.row_stride, A.col_stride, mc, std::min(kKc, K - kb * kKc), MR);
    };
    // C[m0, m0 + mc) x the column chunk at n0, over the whole reduction; Ab: that row block
    // packed whole (pack_a_block), null for an A in place.
    const auto chunk = [&](const float* Ab, int64_t m0, int64_t mc, int64_t n0) {
      for (int64_t k0 = 0; k0 < K; k0 += kKc)
        product(Ab ? Ab + (k0 / kKc) * a_block_floats : nullptr, m0, mc, k0, std::min(kKc, K - k0),
                n0, std::min(nc_max, n_hi - n0));
    };
    if (a_all) {  // every row block packed first, row block b at Ap + b·k_blocks·a_block_floats
      if (n_lo >= n_hi) return;
      const int64_t block_floats = k_blocks * a_block_floats;
      int64_t b = 0;
      for (int64_t m0 = m_lo; m0 < m_hi; m0 += mc_step, ++b)
        pack_a_block(Ap + b * block_floats, m0, std::min(mc_step, m_hi - m0));
      for (int64_t n0 = n_lo; n0 < n_hi; n0 += nc_max) {
        b = 0;
        for (int64_t m0 = m_lo; m0 < m_hi; m0 += mc_step, ++b)
          chunk(Ap + b * block_floats, m0, std::min(mc_step, m_hi - m0), n0);
      }
      return;
    }
    for (int64_t m0 = m_lo; m0 < m_hi; m0 += mc_step) {
      const int64_t mc = std::min(mc_step, m_hi - m0);
      if (!a_shared_blocks && n_lo >= n_hi) continue;
      if (a_in_place || a_whole) {  // this row block's A in place, or packed whole into Ap
        const float* Ab = a_in_place ? nullptr : Ap;
        if (Ab) pack_a_block(Ap, m0, mc);
        for (int64_t n0 = n_lo; n0 < n_hi; n0 += nc_max) chunk(Ab, m0, mc, n0);
        continue;
      }
      // A[m0, m0 + mc) x [k0, k0 + kc) into the shared buffer, strips [s0, s1) of it.
      const auto pack_a_strips = [&](int64_t k0, int64_t s0, int64_t s1) {
        const int64_t kc = std::min(kKc, K - k0), r0 = s0 * MR, rows = std::min(mc, s1 * MR) - r0;
        if (rows > 0)
          pack_a(a_shared + r0 * kc, a + (m0 + r0) * A.row_stride + k0 * A.col_stride, A.row_stride,
                 A.col_stride, rows, kc, MR);
      };
      const int64_t a_strips = (mc + MR - 1) / MR;
      for (int64_t k0 = 0; k0 < K; k0 += kKc) {
        pack_a_strips(k0, a_strips * t / threads, a_strips * (t + 1) / threads);
#pragma omp barrier
        for (int64_t n0 = n_lo; n0 < n_hi; n0 += nc_max)
          product(a_shared, m0, mc, k0, std::min(kKc, K - k0), n0, std::min(nc_max, n_hi - n0));
#pragma omp barrier
      }
    }
  };
  if (threads <= 1) {
    body(0);
    return;
  }
#pragma omp parallel num_threads(threads)
  body(omp_get_thread_num());
}

}  // namespace zt
