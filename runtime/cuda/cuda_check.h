// One checking wrapper for CUDA runtime and cuBLAS calls (DESIGN.md, "Errors"): a failed call
// throws zt::Error (kSystem) naming the call, the error and the call site. Private to
// runtime/cuda and the CUDA parts of comm/.
#pragma once

#include <cuda_runtime_api.h>

#include "runtime/status.h"

#define ZT_CUDA_CHECK(call)                                                                \
  do {                                                                                     \
    const cudaError_t zt_cuda_status_ = (call);                                            \
    if (zt_cuda_status_ != cudaSuccess)                                                    \
      ::zt::throw_system(fmt::format("{} failed: {} ({})", #call,                          \
                                     cudaGetErrorString(zt_cuda_status_),                  \
                                     cudaGetErrorName(zt_cuda_status_)));                  \
  } while (0)
