// The throwing half of cuda_check.h, compiled by the host compiler.
#include "runtime/cuda/cuda_check.h"

#include "runtime/status.h"

namespace zt {

void throw_cuda_error(const char* call, cudaError_t status, const char* file, int line) {
  throw_system(fmt::format("{} failed: {} ({}) at {}:{}", call, cudaGetErrorString(status),
                           cudaGetErrorName(status), file, line));
}

void throw_cublas_error(const char* call, int status, const char* file, int line) {
  throw_system(fmt::format("{} failed: cuBLAS status {} at {}:{}", call, status, file, line));
}

void throw_cuda_internal(const char* message, const char* file, int line) {
  throw_internal(fmt::format("{} at {}:{}", message, file, line));
}

}  // namespace zt
