// CudaKernels::Impl: what the two kernel files of the CUDA back end share, and their checking
// macros. Private to runtime/cuda; free of fmt and status.h (see cuda_check.h).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_kernels.h"

#define ZT_CUBLAS_CHECK(call)                                                              \
  do {                                                                                     \
    const cublasStatus_t zt_cublas_status_ = (call);                                       \
    if (zt_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                        \
      ::zt::throw_cublas_error(#call, static_cast<int>(zt_cublas_status_), __FILE__,       \
                               __LINE__);                                                  \
  } while (0)
// A broken invariant inside a .cu file (no fmt there).
#define ZT_CUDA_ASSERT(cond, message)                                                      \
  do {                                                                                     \
    if (!(cond)) ::zt::throw_cuda_internal("check failed: " #cond ": " message, __FILE__,   \
                                           __LINE__);                                      \
  } while (0)

namespace zt {

struct CudaKernels::Impl {
  cublasHandle_t cublas = nullptr;     // bound to the stream
  cublasLtHandle_t lt = nullptr;
  void* lt_workspace = nullptr;        // cuBLASLt workspace (device)
  size_t lt_workspace_bytes = 0;
  bool allow_tf32 = false;
  // The reduction that returns to the host (sum_squares): device partials and a pinned host
  // landing slot.
  double* partials = nullptr;
  size_t partials_capacity = 0;        // elements
  double* host_result = nullptr;       // pinned
};

}  // namespace zt
