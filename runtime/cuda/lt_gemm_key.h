// LtGemmKey: what identifies one cuBLASLt matmul plan (descriptors and the heuristic's
// algorithm) in the CUDA back end's plan cache (cuda_lt_gemm.h): the column-major problem, the
// element types, the epilogue and the alignment of every pointer. Pure host logic, free of CUDA
// headers, so tests/runtime/lt_gemm_key_test.cpp runs it on any machine.
// Why alignment is part of the key: cuBLASLt's heuristic picks kernels whose vector loads need
// the alignment it is promised (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES); a plan made for a
// 256-byte-aligned weight must not run on a view of a flat buffer that is only 2-byte aligned.
#pragma once

#include <compare>
#include <cstdint>

#include "runtime/dtype.h"

namespace zt {

struct LtGemmKey {
  DType ab = DType::kF32;  // A and B (cudaDataType_t in cuda_lt_gemm.cpp)
  DType cd = DType::kF32;  // C and D (the GEMM writes D in place of C)
  bool tf32 = false;       // CUBLAS_COMPUTE_32F_FAST_TF32 (fp32 A/B only); else 32F
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;  // D (m,n) = op(A) (m,k) · op(B) (k,n), column-major
  int64_t lda = 0, ldb = 0, ldd = 0;
  bool bias = false;  // CUBLASLT_EPILOGUE_BIAS: D += bias (m), bias typed as D
  uint32_t align_a = 0, align_b = 0, align_d = 0, align_bias = 0;  // lt_alignment of each

  friend auto operator<=>(const LtGemmKey&, const LtGemmKey&) = default;
};

// The largest power of two, at most 256 (cuBLASLt's default assumption), that divides the
// address (256 for null: nothing is read). What a plan may assume of a pointer.
inline constexpr uint32_t kLtMaxAlignment = 256;
inline uint32_t lt_alignment(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = kLtMaxAlignment;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

}  // namespace zt
