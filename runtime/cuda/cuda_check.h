// One checking wrapper for CUDA and cuBLAS calls (docs/architecture.md, "Errors"): a failed call
// throws zt::Error (kSystem) naming the call, the error and the call site. Free of fmt and of
// runtime/status.h so .cu files (compiled by nvcc, which cannot digest fmt 9's headers) can use
// it; cuda_errors.cpp, compiled by the host compiler, builds the message and throws.
#pragma once

#include <cuda_runtime_api.h>

namespace zt {

[[noreturn]] void throw_cuda_error(const char* call, cudaError_t status, const char* file,
                                   int line);
[[noreturn]] void throw_cublas_error(const char* call, int status, const char* file, int line);
// An internal error from device-side code paths (a broken invariant), without fmt.
[[noreturn]] void throw_cuda_internal(const char* message, const char* file, int line);

}  // namespace zt

#define ZT_CUDA_CHECK(call)                                               \
  do {                                                                    \
    const cudaError_t zt_cuda_status_ = (call);                           \
    if (zt_cuda_status_ != cudaSuccess)                                   \
      ::zt::throw_cuda_error(#call, zt_cuda_status_, __FILE__, __LINE__); \
  } while (0)
