// CudaKernels::Impl: what the kernel files of the CUDA back end share (the state every table
// of a device shares, the storage types of the 16-bit operands) and their checking macros.
// Private to runtime/cuda and to nvcc (device code); free of fmt and status.h (see cuda_check.h).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_lt_gemm.h"
#include "runtime/cuda/cudnn_attention.h"

#define ZT_CUBLAS_CHECK(call)                                                                   \
  do {                                                                                          \
    const cublasStatus_t zt_cublas_status_ = (call);                                            \
    if (zt_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                             \
      ::zt::throw_cublas_error(#call, static_cast<int>(zt_cublas_status_), __FILE__, __LINE__); \
  } while (0)
// A broken invariant inside a .cu file (no fmt there).
#define ZT_CUDA_ASSERT(cond, message)                                                     \
  do {                                                                                    \
    if (!(cond))                                                                          \
      ::zt::throw_cuda_internal("check failed: " #cond ": " message, __FILE__, __LINE__); \
  } while (0)

namespace zt {

// Shared by the three tables of a device (CudaKernels(base, activations)); freed with the last.
struct CudaKernels::Impl {
  cublasHandle_t cublas = nullptr;  // bound to the stream
  cublasLtHandle_t lt = nullptr;
  void* lt_workspace = nullptr;  // cuBLASLt workspace (device)
  size_t lt_workspace_bytes = 0;
  std::unique_ptr<LtGemm> lt_gemm;  // cuBLASLt plans per problem, over lt and lt_workspace
  bool allow_tf32 = false;
  AttentionPath attention_path = attention_path_from_env();
  std::unique_ptr<CudnnAttention> cudnn_attention;  // made by the first 16-bit attention call
  // The reduction that returns to the host (sum_squares): device partials and a pinned host
  // landing slot.
  double* partials = nullptr;
  size_t partials_capacity = 0;   // elements
  double* host_result = nullptr;  // pinned
};

// ---------------------------------------------------------------------------------------------
// Storage types: an element type with its conversions to and from fp32, as runtime/dtype.h
// defines them (round to nearest even, fp16 overflow to inf, NaN kept as dtype.h keeps it).
// Kernels templated on them read and write an operand in its stored dtype.

struct F32Storage {
  using Elem = float;
  __device__ static float to_fp32(float x) { return x; }
  __device__ static float from_fp32(float x) { return x; }
};

struct F16Storage {
  using Elem = uint16_t;
  // dtype.h's fp16_to_fp32: exact for every pattern, NaN payload kept.
  __device__ static float to_fp32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    if (exp == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
      if (mant == 0) return __uint_as_float(sign);
      const float value = __fmul_rn(static_cast<float>(mant), 0x1p-24f);  // subnormal, exact
      return sign ? -value : value;
    }
    return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
  }
  // dtype.h's fp32_to_fp16: every NaN becomes the quiet NaN 0x7e00 with the input's sign.
  __device__ static uint16_t from_fp32(float f) {
    const uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
      return static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7e00u);
    return __half_as_ushort(__float2half_rn(f));
  }
};

struct BF16Storage {
  using Elem = uint16_t;
  __device__ static float to_fp32(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
  // dtype.h's fp32_to_bf16: a NaN keeps its top 16 bits and is made quiet.
  __device__ static uint16_t from_fp32(float f) {
    const uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
};

// f(S{}) with the storage tag S of t (host side: picks the kernel instantiation).
template <class F>
void visit_storage(DType t, const F& f) {
  switch (t) {
    case DType::kF32: f(F32Storage{}); return;
    case DType::kF16: f(F16Storage{}); return;
    case DType::kBF16: f(BF16Storage{}); return;
  }
  ZT_CUDA_ASSERT(false, "unknown DType");
}

// An operand's pointer as S's element type.
template <class S>
const typename S::Elem* elems(ConstOperand op) {
  return static_cast<const typename S::Elem*>(op.data);
}
template <class S>
typename S::Elem* elems(Operand op) {
  return static_cast<typename S::Elem*>(op.data);
}

}  // namespace zt
